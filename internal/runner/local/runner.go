// Package local runs actions as child processes: bash -c for shell actions,
// the agent command for agent actions. Each action runs in its own process
// group, so a timeout or a cancellation kills everything it started.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

// Defaults for what a runner keeps of an action's output.
const (
	// DefaultOutputWindow is how much of stdout (the tail) evaluators read.
	DefaultOutputWindow = 1 << 20
	// DefaultStderrWindow is how much of stderr (the tail) is kept.
	DefaultStderrWindow = 64 << 10
	// waitDelay bounds how long output is still read after the action exits
	// (a background child may hold the pipes open).
	waitDelay = 2 * time.Second
)

// ExitTimeout is the exit code of an action killed by its timeout.
const ExitTimeout = 124

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
	// Log, when set, receives the complete stdout and stderr of every action.
	Log io.Writer
	// OutputWindow and StderrWindow bound the output kept in memory.
	OutputWindow, StderrWindow int
}

// Run runs a and waits for it. Whatever happens, it returns a result: a
// command that cannot start exits 127, a timeout 124, a signal -SIGNAL.
func (r *Runner) Run(ctx context.Context, a *executor.Action) executor.ActionResult {
	stdout := newTailBuffer(orDefault(r.OutputWindow, DefaultOutputWindow))
	stderr := newTailBuffer(orDefault(r.StderrWindow, DefaultStderrWindow))
	runCtx := ctx
	if a.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, a.Timeout)
		defer cancel()
	}
	cmd := r.command(runCtx, a)
	cmd.Dir = r.Dir
	cmd.Env = r.Env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if r.Log != nil {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, r.Log), io.MultiWriter(stderr, r.Log)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	cmd.Cancel = func() error { return killGroup(cmd.Process) }

	start := time.Now()
	err := cmd.Run()
	res := executor.ActionResult{Duration: time.Since(start)}
	res.ExitCode = exitCode(cmd)
	if cmd.Process != nil {
		// Whatever the action left behind in its group goes with it.
		_ = killGroup(cmd.Process)
	}
	switch {
	case cmd.Process == nil:
		fmt.Fprintf(stderr, "cannot start action: %v", err)
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		res.ExitCode = ExitTimeout
		fmt.Fprintf(stderr, "\naction timed out after %s", a.Timeout)
	}
	res.Output, res.Stderr = stdout.String(), stderr.String()
	res.OutputTruncated, res.StderrTruncated = stdout.Truncated(), stderr.Truncated()
	return res
}

func (r *Runner) command(ctx context.Context, a *executor.Action) *exec.Cmd {
	if a.Agent {
		argv := append(append([]string{}, r.agentCommand()...), a.Command)
		return exec.CommandContext(ctx, argv[0], argv[1:]...) //nolint:gosec // running the loop's own agent command is the point
	}
	shell := r.Shell
	if shell == "" {
		shell = "bash"
	}
	return exec.CommandContext(ctx, shell, "-c", a.Command) //nolint:gosec // running the loop's own action is the point
}

func (r *Runner) agentCommand() []string {
	if len(r.AgentCommand) > 0 {
		return r.AgentCommand
	}
	return []string{"claude", "--dangerously-skip-permissions", "-p"}
}

func killGroup(p *os.Process) error {
	if p == nil {
		return nil
	}
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}

func exitCode(cmd *exec.Cmd) int {
	if cmd.ProcessState == nil {
		return 127
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}
