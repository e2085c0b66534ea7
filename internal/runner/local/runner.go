// Package local runs actions as child processes: bash -c for shell actions,
// the agent command for agent actions. Each action runs in its own process
// group, so a timeout or a cancellation kills everything it started.
//
// An action writes its stdout and stderr straight into append-only files
// (the run's output logs); when it ends the runner reads back the tail it
// keeps. Nothing is copied through the runner while the action runs, so an
// action that prints a gigabyte costs disk, not memory.
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

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// Defaults for what a runner keeps of an action's output.
const (
	// DefaultOutputWindow is how much of stdout (the tail) evaluators read.
	DefaultOutputWindow = 1 << 20
	// DefaultStderrWindow is how much of stderr (the tail) is kept.
	DefaultStderrWindow = 64 << 10
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
	// Stdout and Stderr receive the complete output of every action. They
	// must be opened for reading and appending. When nil, each action gets
	// temporary files, removed after it ends.
	Stdout, Stderr *os.File
	// OutputWindow and StderrWindow bound the output read back into memory.
	OutputWindow, StderrWindow int
}

// Run runs a and waits for it. Whatever happens, it returns a result: a
// command that cannot start exits 127, a timeout 124, a signal -SIGNAL.
func (r *Runner) Run(ctx context.Context, a *executor.Action) executor.ActionResult {
	stdout, stderr, cleanup, err := r.outputs()
	if err != nil {
		return executor.ActionResult{ExitCode: 127, Stderr: fmt.Sprintf("cannot open the output files: %v", err)}
	}
	defer cleanup()
	outStart, errStart := size(stdout), size(stderr)

	runCtx := ctx
	if a.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, a.Timeout)
		defer cancel()
	}
	cmd := r.command(runCtx, a)
	cmd.Dir, cmd.Env = r.Dir, r.Env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process) }

	start := time.Now()
	err = cmd.Run()
	res := executor.ActionResult{Duration: time.Since(start), ExitCode: exitCode(cmd)}
	if cmd.Process != nil {
		// Whatever the action left behind in its group goes with it.
		_ = killGroup(cmd.Process)
	}
	switch {
	case cmd.Process == nil:
		fmt.Fprintf(stderr, "cannot start action: %v\n", err)
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		res.ExitCode = ExitTimeout
		fmt.Fprintf(stderr, "\naction timed out after %s\n", a.Timeout)
	}
	res.Output, res.OutputTruncated = readTail(stdout, outStart, orDefault(r.OutputWindow, DefaultOutputWindow))
	res.Stderr, res.StderrTruncated = readTail(stderr, errStart, orDefault(r.StderrWindow, DefaultStderrWindow))
	return res
}

// outputs returns the files the action writes to.
func (r *Runner) outputs() (stdout, stderr *os.File, cleanup func(), err error) {
	if r.Stdout != nil && r.Stderr != nil {
		return r.Stdout, r.Stderr, func() {}, nil
	}
	var files []*os.File
	cleanup = func() {
		for _, f := range files {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}
	for range 2 {
		f, err := os.CreateTemp("", "looprun-output-*")
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		files = append(files, f)
	}
	return files[0], files[1], cleanup, nil
}

func size(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// readTail reads the last max bytes written to f after start.
func readTail(f *os.File, start int64, max int) (string, bool) {
	end := size(f)
	if end <= start {
		return "", false
	}
	from, truncated := start, false
	if end-start > int64(max) {
		from, truncated = end-int64(max), true
	}
	buf := make([]byte, end-from)
	n, err := f.ReadAt(buf, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read the output back: %v)", err), truncated
	}
	return string(buf[:n]), truncated
}

func (r *Runner) command(ctx context.Context, a *executor.Action) *exec.Cmd {
	if a.Agent {
		base := a.AgentCommand
		if len(base) == 0 {
			base = r.agentCommand()
		}
		argv := append(append([]string{}, base...), a.Command)
		return exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	shell := r.Shell
	if shell == "" {
		shell = "bash"
	}
	return exec.CommandContext(ctx, shell, "-c", a.Command)
}

func (r *Runner) agentCommand() []string {
	if len(r.AgentCommand) > 0 {
		return r.AgentCommand
	}
	return v1alpha1.DefaultAgentCommand
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
