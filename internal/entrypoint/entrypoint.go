// Package entrypoint is the wrapper that runs an action inside its Pod. It
// streams the command's output to the container log, keeps the tails, judges
// the complete stdout with the state's deterministic evaluator as it goes by,
// forwards signals to the command, and sums it all up in a Result that fits
// the container's termination message.
package entrypoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// Windows of output kept in memory.
const (
	// EvalWindow is how much of stdout's end the evaluators read besides
	// what they learn line by line.
	EvalWindow = 1 << 20
	// stderrWindow is how much of stderr's end is kept.
	stderrWindow = 64 << 10
	// maxLine bounds a line for the line-by-line matchers; longer lines are
	// judged in pieces.
	maxLine = 64 << 10
)

// ExitTimeout is the exit code of a command killed by its timeout.
const ExitTimeout = 124

// Options describe one run of the wrapper.
type Options struct {
	// Command is what to run (for example bash -c ACTION).
	Command []string
	// Timeout kills the command's process group and exits 124; 0 means none.
	Timeout time.Duration
	// Evaluate is the state's evaluator with its templates already expanded;
	// a deterministic one gives the Result its verdict.
	Evaluate *v1alpha1.Evaluate
	// Stdout and Stderr receive the command's output as it comes (the
	// container log).
	Stdout, Stderr io.Writer
	// Signals are forwarded to the command's process group.
	Signals <-chan os.Signal
}

// Run runs the command and returns its Result. It never fails: a command
// that cannot start exits 127.
func Run(ctx context.Context, o Options) Result {
	if len(o.Command) == 0 {
		return Result{ExitCode: 127, Stderr: "no command to run"}
	}
	out := newTail(EvalWindow)
	errTail := newTail(stderrWindow)
	lines := newLineJudge(o.Evaluate)
	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Stdout = io.MultiWriter(writerOr(o.Stdout), out, lines)
	cmd.Stderr = io.MultiWriter(writerOr(o.Stderr), errTail)
	// Its own group, so signals and the timeout reach everything it starts;
	// and it dies with the wrapper, should the wrapper be killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{ExitCode: 127, Stderr: fmt.Sprintf("cannot start %s: %v", o.Command[0], err)}
	}
	timedOut := supervise(ctx, cmd.Process.Pid, o.Timeout, o.Signals, func() error { return cmd.Wait() })
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left behind
	lines.flush()

	r := Result{
		ExitCode:   exitCode(cmd.ProcessState),
		DurationMs: time.Since(start).Milliseconds(),
		Stdout:     out.String(), StdoutTruncated: out.truncated(),
		Stderr: errTail.String(), StderrTruncated: errTail.truncated(),
	}
	if timedOut {
		r.ExitCode, r.TimedOut = ExitTimeout, true
		r.Stderr += fmt.Sprintf("\naction timed out after %s", o.Timeout)
	}
	if o.Evaluate != nil && evaluate.IsDeterministic(o.Evaluate.Type) {
		v := evaluate.Deterministic(o.Evaluate, evaluate.Input{Output: r.Stdout, ExitCode: r.ExitCode, Streamed: lines.facts()})
		r.Verdict = &v
	}
	return r
}

// supervise waits for the command, forwarding signals to its group and
// killing the group at the timeout. It reports whether the timeout fired.
func supervise(ctx context.Context, pid int, timeout time.Duration, signals <-chan os.Signal, wait func() error) bool {
	done := make(chan struct{})
	go func() {
		_ = wait()
		close(done)
	}()
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	timedOut := false
	for {
		select {
		case <-done:
			return timedOut
		case s := <-signals:
			if sig, ok := s.(syscall.Signal); ok {
				_ = syscall.Kill(-pid, sig)
			}
		case <-deadline:
			timedOut = true
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		case <-ctx.Done():
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			ctx = context.Background() // kill once
		}
	}
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 127
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal()) // as the local runner says it
	}
	return ps.ExitCode()
}

func writerOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// lineJudge applies the line-by-line parts of the evaluator to the complete
// stdout: output_contains' pattern, output_numeric's key.
type lineJudge struct {
	mu      sync.Mutex
	pattern *regexp.Regexp
	literal string
	key     *evaluate.KeyMatcher
	buf     []byte
	seen    evaluate.Streamed
}

func newLineJudge(e *v1alpha1.Evaluate) *lineJudge {
	j := &lineJudge{}
	if e == nil {
		return j
	}
	switch {
	case e.Type == v1alpha1.EvalOutputContains && e.Pattern != "":
		if re, err := regexp.Compile(e.Pattern); err == nil {
			j.pattern = re
		} else {
			j.literal = e.Pattern
		}
	case e.Type == v1alpha1.EvalOutputNumeric && e.Key != "":
		k := evaluate.NewKeyMatcher(e.Key)
		j.key = &k
	}
	return j
}

func (j *lineJudge) Write(p []byte) (int, error) {
	if j.pattern == nil && j.literal == "" && j.key == nil {
		return len(p), nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(j.buf, p...)
	for {
		i := bytes.IndexByte(j.buf, '\n')
		if i < 0 {
			if len(j.buf) > maxLine {
				j.judge(j.buf[:maxLine])
				j.buf = append(j.buf[:0], j.buf[maxLine:]...)
				continue
			}
			return len(p), nil
		}
		j.judge(j.buf[:i])
		j.buf = j.buf[i+1:]
	}
}

func (j *lineJudge) judge(line []byte) {
	switch {
	case j.pattern != nil && !j.seen.PatternMatched:
		j.seen.PatternMatched = j.pattern.Match(line)
	case j.literal != "" && !j.seen.PatternMatched:
		j.seen.PatternMatched = bytes.Contains(line, []byte(j.literal))
	case j.key != nil:
		if v, ok := j.key.Last(string(line)); ok {
			j.seen.KeyValue, j.seen.KeyFound = v, true
		}
	}
}

func (j *lineJudge) flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.buf) > 0 {
		j.judge(j.buf)
		j.buf = nil
	}
}

// facts is what the lines showed; nil when the evaluator needs no lines.
func (j *lineJudge) facts() *evaluate.Streamed {
	if j.pattern == nil && j.literal == "" && j.key == nil {
		return nil
	}
	f := j.seen
	return &f
}

// tail keeps the last max bytes written to it, in a ring.
type tail struct {
	mu    sync.Mutex
	ring  []byte
	max   int
	pos   int
	full  bool
	total int64
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.total += int64(n)
	if !t.full {
		room := t.max - len(t.ring)
		if len(p) <= room {
			t.ring = append(t.ring, p...)
			return n, nil
		}
		t.ring = append(t.ring, p[:room]...)
		p, t.full, t.pos = p[room:], true, 0
	}
	if len(p) >= t.max {
		copy(t.ring, p[len(p)-t.max:])
		t.pos = 0
		return n, nil
	}
	c := copy(t.ring[t.pos:], p)
	copy(t.ring, p[c:])
	t.pos = (t.pos + len(p)) % t.max
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return string(t.ring)
	}
	return string(t.ring[t.pos:]) + string(t.ring[:t.pos])
}

func (t *tail) truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total > int64(len(t.ring))
}
