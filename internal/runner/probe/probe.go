// Package probe runs the probe of an action (action.Action.Probe): a
// short shell command run right after the action, where the action ran, for
// an evaluator that looks there (diff_stall's git diff, score_stall's
// history file).
package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"os/exec"
	"syscall"
	"time"

	"github.com/looprun/looprun/internal/action"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// Timeout bounds a probe, as little-loops bounds its git diff.
const Timeout = 30 * time.Second

// Bounds on what is kept of a probe's output (all of it is hashed).
const (
	OutputBytes = 16 << 10
	StderrBytes = 1 << 10
)

// Run runs command with bash -c in dir (the current directory when "")
// with env (this process's when nil). A probe that cannot start or is
// killed has a non-zero exit code, its reason in Stderr.
func Run(ctx context.Context, dir string, env []string, command string) *action.ProbeResult {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out := &tail{max: OutputBytes, h: sha256.New()}
	errs := &tail{max: StderrBytes}
	cmd.Stdout, cmd.Stderr = out, errs
	err := cmd.Run()
	res := &action.ProbeResult{Output: out.String(), SHA256: hex.EncodeToString(out.h.Sum(nil)), Stderr: errs.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		res.ExitCode = ee.ExitCode()
	case ctx.Err() != nil:
		res.ExitCode, res.Stderr = evaluate.ExitTimeout, "probe timed out: "+command
	default:
		res.ExitCode, res.Stderr = 127, err.Error()
	}
	return res
}

// tail keeps the last max bytes written, and hashes all of them.
type tail struct {
	max int
	b   []byte
	h   hash.Hash
}

func (t *tail) Write(p []byte) (int, error) {
	if t.h != nil {
		t.h.Write(p)
	}
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	b := t.b
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
