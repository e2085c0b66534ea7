// Package local runs actions as processes of this machine: bash -c for shell
// actions, the agent command for agent actions, each supervised by
// internal/runner/process as the in-pod wrapper's are. Runner runs one
// action and waits (looprun run); Actions runs them in the background for
// the operator's --allow-local-actions. This package links no controller
// machinery (what wakes a Loop is a runner.Wake the reconciler turns into
// watches), so the CLI starts quickly.
package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/probe"
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
	// Env is the environment; nil means the current one. Each action also
	// gets LOOPRUN_LOOP, LOOPRUN_STATE and LOOPRUN_ITERATION, as in a Pod.
	Env []string
	// Loop names the loop, for LOOPRUN_LOOP.
	Loop string
	// Stdout and Stderr receive the complete output of every action (the
	// run's output logs; as two regular files open for reading and
	// appending, the actions write into them directly); nil discards it.
	// Only bounded tails are kept in memory.
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
	return r.RunWhenReady(ctx, a, nil)
}

// RunWhenReady is Run for an action that may begin only once ready
// returns (a local run saves the step that starts it first): its process
// is started at once, so that starting it overlaps with the wait, and its
// command begins after. ready is told the process group; its error stops
// the action unrun.
func (r *Runner) RunWhenReady(ctx context.Context, a *executor.Action, ready func(pgid int) error) executor.ActionResult {
	if a.Git != nil {
		return r.git(ctx, a) // in this process: no group, ready is not asked
	}
	runDir := a.RunDir
	if runDir != "" {
		if !filepath.IsAbs(runDir) {
			runDir = filepath.Join(r.Dir, runDir)
		}
		_ = os.MkdirAll(runDir, 0o755) // as little-loops makes it; an action that needs it says so
	}
	argv := r.argv(a)
	if ready != nil {
		if a.Agent {
			argv = process.GatedExec(argv)
		} else {
			argv = process.GatedShell(argv[0], argv[2])
		}
	}
	env := r.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(slices.Clip(env), "LOOPRUN_LOOP="+r.Loop, "LOOPRUN_STATE="+a.State, "LOOPRUN_ITERATION="+strconv.Itoa(int(a.Iteration)))
	env = append(env, a.Env...)
	ran := process.Run(ctx, process.Spec{
		Argv: argv, Dir: r.Dir, Env: env, Timeout: a.Timeout, IdleTimeout: a.IdleTimeout, Evaluate: a.Evaluate,
		Stdout: r.Stdout, Stderr: r.Stderr, OwnFiles: true, OutputWindow: r.OutputWindow, StderrWindow: r.StderrWindow,
		Started: r.Started, Ready: ready, AgentStream: a.AgentStream, AgentCalls: a.CallsAgent,
	})
	res := ran.ActionResult()
	if a.Probe != "" && ctx.Err() == nil {
		res.Probe = probe.Run(ctx, r.Dir, env, a.Probe)
	}
	r.writeUsage(a, ran)
	return res
}

// writeUsage appends the usage the agent of a reported to the usage.jsonl
// of its run_dir (Action.UsageTarget), as little-loops writes it: a row
// for an agent action, and one for each agent call of a command that
// calls it (a learning gate's explore calls, each an agent prompt).
func (r *Runner) writeUsage(a *executor.Action, ran process.Result) {
	to := a.UsageTarget()
	if ran.Usage == nil || to.RunDir == "" {
		return
	}
	dir := to.RunDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(r.Dir, dir)
	}
	usages, prompt := []agentstream.Usage{*ran.Usage}, a.Agent
	if a.CallsAgent {
		usages, prompt = ran.CallUsages, true
	}
	for _, u := range usages {
		row := agentstream.UsageRow{Iteration: to.Iteration, State: to.State, Prompt: prompt, Usage: u, Time: time.Now()}
		if err := agentstream.AppendUsage(dir, row); err != nil && r.Stderr != nil {
			fmt.Fprintf(r.Stderr, "looprun: %s: %v\n", agentstream.UsageFile, err)
			return
		}
	}
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

// InDir returns a runner like r whose actions run in dir (a sub-loop's
// worktree).
func (r *Runner) InDir(dir string) *Runner {
	c := *r
	c.Dir = dir
	return &c
}

// git runs the run's clone or push in this process, its checkout in Dir
// (the clone makes it).
func (r *Runner) git(ctx context.Context, a *executor.Action) executor.ActionResult {
	op := *a.Git
	if op.Dir == "" {
		op.Dir = r.Dir
	}
	if op.Dir == "" {
		return runner.Failure("NoCheckout", "the %s has no directory for the checkout", op.Op)
	}
	return runner.Git(ctx, op)
}
