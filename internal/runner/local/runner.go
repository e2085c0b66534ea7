// Package local runs actions as processes of this machine: bash -c for shell
// actions, the agent command for agent actions, each supervised by
// internal/runner/process as the in-pod wrapper's are. Runner runs one
// action and waits (looprun run); Actions runs them in the background for
// the operator's --allow-local-actions.
package local

import (
	"context"
	"io"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/process"
)

// Runner runs actions on this machine.
type Runner struct {
	// Shell runs shell actions as Shell -c ACTION. Default bash.
	Shell string
	// AgentCommand runs agent actions, the prompt appended as the last argument.
	AgentCommand []string
	// Dir is the working directory; empty means the current one.
	Dir string
	// Env is the environment; nil means the current one.
	Env []string
	// Stdout and Stderr receive the complete output of every action (the
	// run's output logs); nil discards it. Only bounded tails are kept in
	// memory.
	Stdout, Stderr io.Writer
	// OutputWindow and StderrWindow bound the tails kept (defaults: those
	// of internal/runner/process).
	OutputWindow, StderrWindow int
	// Started, when set, is told the process group of each action once it runs.
	Started func(pgid int)
}

// Run runs a and waits for it. Whatever happens, it returns a result: a
// command that cannot start exits 127, a timeout 124, a signal -SIGNAL. A
// deterministic evaluator (a.Evaluate) is judged over the complete stdout.
func (r *Runner) Run(ctx context.Context, a *executor.Action) executor.ActionResult {
	return process.Run(ctx, process.Spec{
		Argv: r.argv(a), Dir: r.Dir, Env: r.Env, Timeout: a.Timeout, Evaluate: a.Evaluate,
		Stdout: r.Stdout, Stderr: r.Stderr, OutputWindow: r.OutputWindow, StderrWindow: r.StderrWindow,
		Started: r.Started,
	}).ActionResult()
}

func (r *Runner) argv(a *executor.Action) []string {
	if a.Agent {
		base := a.AgentCommand
		if len(base) == 0 {
			base = r.AgentCommand
		}
		if len(base) == 0 {
			base = v1alpha1.DefaultAgentCommand
		}
		return append(append([]string{}, base...), a.Command)
	}
	shell := r.Shell
	if shell == "" {
		shell = "bash"
	}
	return []string{shell, "-c", a.Command}
}
