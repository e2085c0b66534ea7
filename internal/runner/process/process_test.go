package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/test/proc"
)

func bash(script string) []string { return []string{"bash", "-c", script} }

type counter struct{ n atomic.Int64 }

func (c *counter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

func TestExitCodes(t *testing.T) {
	tests := []struct {
		script string
		code   int
	}{
		{"true", 0}, {"exit 1", 1}, {"exit 3", 3}, {"kill -9 $$", -9}, {"kill -TERM $$", -15},
	}
	for _, tt := range tests {
		if r := Run(context.Background(), Spec{Argv: bash(tt.script)}); r.ExitCode != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.script, r.ExitCode, tt.code)
		}
	}
	var log bytes.Buffer
	r := Run(context.Background(), Spec{Argv: []string{"/no/such/command"}, Stderr: &log})
	if r.ExitCode != ExitCannotStart || !strings.Contains(r.Stderr, "cannot start") || !strings.Contains(log.String(), "cannot start") {
		t.Errorf("missing command: %+v, log %q", r, log.String())
	}
	if r := Run(context.Background(), Spec{}); r.ExitCode != ExitCannotStart || !strings.Contains(r.Stderr, "no command") {
		t.Errorf("no command: %+v", r)
	}
}

func TestOutputDirEnv(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	r := Run(context.Background(), Spec{Argv: bash("pwd; echo $X; echo oops >&2"), Dir: dir, Env: []string{"X=42"}, Stdout: &out, Stderr: &errs})
	if r.Stdout != dir+"\n42\n" || out.String() != r.Stdout || r.Stderr != "oops\n" || errs.String() != "oops\n" || r.StdoutTruncated {
		t.Errorf("result %+v, stdout %q, stderr %q", r, out.String(), errs.String())
	}
}

func TestTimeoutKillsTheGroup(t *testing.T) {
	pidFile := t.TempDir() + "/child"
	start := time.Now()
	r := Run(context.Background(), Spec{Argv: bash("sleep 30 & echo $! > " + pidFile + "; sleep 30"), Timeout: 300 * time.Millisecond})
	if r.ExitCode != evaluate.ExitTimeout || !r.TimedOut || !r.ActionResult().TimedOut || !strings.Contains(r.Stderr, "timed out") || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d timedOut %v stderr %q after %v", r.ExitCode, r.TimedOut, r.Stderr, time.Since(start))
	}
	proc.WaitGone(t, proc.WaitPid(t, pidFile))
}

func TestCancelKillsTheGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan int, 1)
	go func() {
		<-started
		cancel()
	}()
	r := Run(ctx, Spec{Argv: bash("sleep 30"), Started: func(pgid int) { started <- pgid }})
	if r.ExitCode != -int(syscall.SIGKILL) || r.TimedOut {
		t.Errorf("cancelled: %+v", r)
	}
}

// A background child that keeps stdout open does not hold the action up:
// the group goes when the command ends.
func TestBackgroundChildDoesNotHang(t *testing.T) {
	start := time.Now()
	r := Run(context.Background(), Spec{Argv: bash("sleep 30 & echo done")})
	if r.ExitCode != 0 || r.Stdout != "done\n" || time.Since(start) > 5*time.Second {
		t.Errorf("result %+v after %v", r, time.Since(start))
	}
}

// waitFor is a writer that closes ready once it has seen word.
type waitFor struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	word  string
	ready chan struct{}
	once  sync.Once
}

func (w *waitFor) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.word) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

// A signal to the wrapper reaches the command, which decides how to end.
func TestSignalForwarding(t *testing.T) {
	signals := make(chan os.Signal, 1)
	log := &waitFor{word: "trap set", ready: make(chan struct{})}
	go func() {
		<-log.ready
		signals <- syscall.SIGTERM
	}()
	r := Run(context.Background(), Spec{
		Argv:   bash("trap 'echo got TERM; exit 7' TERM; echo trap set; sleep 30 & wait"),
		Stdout: log, Signals: signals, Timeout: 20 * time.Second,
	})
	if r.ExitCode != 7 || !strings.Contains(r.Stdout, "got TERM") || !strings.Contains(log.buf.String(), "got TERM") {
		t.Errorf("exit %d stdout %q", r.ExitCode, r.Stdout)
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A sink that fails (a full disk under the output log) neither stops the
// action nor changes its tail or verdict.
func TestFailingSink(t *testing.T) {
	r := Run(context.Background(), Spec{Argv: bash("seq 1 100000; echo END"), Stdout: failing{}, Stderr: failing{},
		Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "END$"}})
	if r.ExitCode != 0 || !strings.HasSuffix(r.Stdout, "100000\nEND\n") || r.Verdict == nil || r.Verdict.Verdict != "success" {
		t.Errorf("result exit %d verdict %+v", r.ExitCode, r.Verdict)
	}
}

func js(v any) *apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return &apiextensionsv1.JSON{Raw: b}
}

// 50 MiB of output: the verdict is over all of it, memory holds the tail,
// the writer gets every byte.
func TestVerdictOverTheCompleteOutput(t *testing.T) {
	// NEEDLE and "errors = 0" sit before 50 MiB of filler, far out of the tail.
	script := "echo 'errors = 4'; echo NEEDLE; echo 'errors = 0'; head -c 52428800 /dev/zero | tr '\\0' '.'; echo; echo done"
	tests := []struct {
		name string
		eval v1alpha1.Evaluate
		want string
	}{
		{"contains", v1alpha1.Evaluate{Type: "output_contains", Pattern: "NEE+DLE"}, "success"},
		{"contains literal", v1alpha1.Evaluate{Type: "output_contains", Pattern: "NEEDLE("}, "failure"},
		{"negated", v1alpha1.Evaluate{Type: "output_contains", Pattern: "NEEDLE", Negate: true}, "failure"},
		{"numeric key, last value", v1alpha1.Evaluate{Type: "output_numeric", Key: "errors", Operator: "eq", Target: js(0)}, "success"},
		{"exit code", v1alpha1.Evaluate{Type: "exit_code"}, "success"},
		{"classify the last line", v1alpha1.Evaluate{Type: "classify"}, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &counter{}
			r := Run(context.Background(), Spec{Argv: bash(script), Evaluate: &tt.eval, Stdout: log, Timeout: time.Minute})
			if r.Verdict == nil || r.Verdict.Verdict != tt.want {
				t.Fatalf("verdict %+v, want %s", r.Verdict, tt.want)
			}
			if log.n.Load() < 50<<20 || len(r.Stdout) != DefaultOutputWindow || !r.StdoutTruncated {
				t.Errorf("log got %d bytes; kept %d bytes", log.n.Load(), len(r.Stdout))
			}
		})
	}
}

// An action printing 1 GiB keeps only the window and leaves memory flat.
func TestHugeOutputMemoryIsFlat(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := Run(context.Background(), Spec{Argv: bash("head -c 1073741824 /dev/zero | tr '\\0' x; echo; echo END"), Stdout: io.Discard, Timeout: 2 * time.Minute})
	runtime.ReadMemStats(&after)
	if r.ExitCode != 0 || len(r.Stdout) != DefaultOutputWindow || !strings.HasSuffix(r.Stdout, "x\nEND\n") || !r.StdoutTruncated {
		t.Fatalf("exit %d, kept %d bytes, truncated %v", r.ExitCode, len(r.Stdout), r.StdoutTruncated)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
		t.Errorf("allocated %d MiB while reading 1 GiB", grown>>20)
	}
}

func TestNoVerdictWithoutDeterministicEvaluator(t *testing.T) {
	r := Run(context.Background(), Spec{Argv: bash("echo hi"), Evaluate: &v1alpha1.Evaluate{Type: "llm_structured"}})
	if r.Verdict != nil {
		t.Errorf("verdict %+v for an LLM evaluator", r.Verdict)
	}
}

func TestTailRing(t *testing.T) {
	tl := newTail(8)
	for _, s := range []string{"abc", "defgh", "ij", "klmnopqrstu", "v"} {
		_, _ = io.WriteString(tl, s)
	}
	if tl.String() != "opqrstuv" || !tl.truncated() {
		t.Errorf("tail %q", tl.String())
	}
}

// A gated command's process exists before Ready returns, and its script
// runs only after: an error from Ready kills it unrun.
func TestReadyGatesTheCommand(t *testing.T) {
	dir := t.TempDir()
	var pgid int
	r := Run(context.Background(), Spec{Argv: GatedShell("bash", "echo ran > "+dir+"/ran; echo line $LINENO"),
		Started: func(p int) { pgid = p },
		Ready: func(int) error {
			if _, err := os.Stat(dir + "/ran"); err == nil {
				t.Error("the script ran before Ready returned")
			}
			if !proc.Alive(pgid) {
				t.Error("no process while Ready waits")
			}
			return nil
		}})
	if r.ExitCode != 0 || r.Stdout != "line 1\n" {
		t.Errorf("gated run: %+v", r)
	}
	r = Run(context.Background(), Spec{Argv: GatedShell("bash", "touch "+dir+"/refused"), Started: func(p int) { pgid = p },
		Ready: func(int) error { return errors.New("the save failed") }})
	if _, err := os.Stat(dir + "/refused"); err == nil || r.ExitCode != ExitCannotStart || !strings.Contains(r.Stderr, "the save failed") {
		t.Errorf("refused run: %+v (file: %v)", r, err)
	}
	if proc.Alive(pgid) {
		t.Error("the refused command's process lives on")
	}
	// A script the shell cannot parse ends without waiting for the gate.
	r = Run(context.Background(), Spec{Argv: GatedShell("bash", "echo 'unterminated"), Ready: func(int) error { return nil }})
	if r.ExitCode != 2 || !strings.Contains(r.Stderr, "unexpected EOF") {
		t.Errorf("unparsable script: %+v", r)
	}
	r = Run(context.Background(), Spec{Argv: GatedExec([]string{"echo", "a b", "c"}), Ready: func(int) error { return nil }})
	if r.ExitCode != 0 || r.Stdout != "a b c\n" {
		t.Errorf("gated program: %+v", r)
	}
}

// With its own output files, the command writes into them and the result
// is the same as through pipes; one file for both is not the run's own.
func TestOwnFiles(t *testing.T) {
	open := logFiles(t)
	script := "echo out; echo err >&2; echo NEEDLE; head -c 2000000 /dev/zero | tr '\\0' .; echo"
	eval := &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "NEEDLE"}
	out, errs := open("out"), open("err")
	own := Run(context.Background(), Spec{Argv: bash(script), Stdout: out, Stderr: errs, OwnFiles: true, Evaluate: eval})
	piped := Run(context.Background(), Spec{Argv: bash(script), Evaluate: eval})
	if own.Stderr != "err\n" || own.Stdout != piped.Stdout || own.Stderr != piped.Stderr || !own.StdoutTruncated ||
		own.Verdict.Verdict != "success" || piped.Verdict.Verdict != "success" {
		t.Errorf("own files %+v, piped %+v", own.Verdict, piped.Verdict)
	}
	both := open("both")
	shared := Run(context.Background(), Spec{Argv: bash("echo out; echo err >&2"), Stdout: both, Stderr: both, OwnFiles: true})
	if shared.Stdout != "out\n" || shared.Stderr != "err\n" {
		t.Errorf("one file for both: stdout %q stderr %q", shared.Stdout, shared.Stderr)
	}
}

// A note rewritten in place: recorded, cleared, recorded again, it names
// the last group only, and a cleared note names none.
func TestGroupNote(t *testing.T) {
	path := filepath.Join(t.TempDir(), "action")
	n, err := OpenGroupNote(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Close() }()
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first, second := start(), start()
	n.Record(first.Process.Pid)
	n.Clear()
	if killed, err := KillRecordedGroup(path); killed || err != nil {
		t.Fatalf("a cleared note killed %v (%v)", killed, err)
	}
	_ = n.Close()
	if n, err = OpenGroupNote(path); err != nil {
		t.Fatal(err)
	}
	n.Record(first.Process.Pid)
	n.Record(second.Process.Pid)
	if b, _ := os.ReadFile(path); len(b) != noteSize {
		t.Errorf("note of %d bytes: %q", len(b), b)
	}
	if killed, err := KillRecordedGroup(path); !killed || err != nil {
		t.Fatalf("killed %v (%v)", killed, err)
	}
	proc.WaitGone(t, second.Process.Pid)
	if !proc.Alive(first.Process.Pid) {
		t.Error("a group noted before the last one was killed")
	}
}

// A program found in PATH once is not searched for again; one that fails
// to start is.
func TestCommandCachesPathSearch(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	tool := filepath.Join(dir, "looprun-test-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho one\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := Run(context.Background(), Spec{Argv: []string{"looprun-test-tool"}}); r.Stdout != "one\n" {
		t.Fatalf("first run: %+v", r)
	}
	if p, ok := lookPaths.Load(os.Getenv("PATH") + "\x00looprun-test-tool"); !ok || p != tool {
		t.Fatalf("cached %v %v", p, ok)
	}
	if err := os.Remove(tool); err != nil {
		t.Fatal(err)
	}
	if r := Run(context.Background(), Spec{Argv: []string{"looprun-test-tool"}}); r.ExitCode != ExitCannotStart {
		t.Fatalf("removed tool: %+v", r)
	}
	if _, ok := lookPaths.Load(os.Getenv("PATH") + "\x00looprun-test-tool"); ok {
		t.Error("a program that failed to start is still cached")
	}
	// $0 is the name, not the path found.
	if r := Run(context.Background(), Spec{Argv: bash(`echo "$0"`)}); r.Stdout != "bash\n" {
		t.Errorf("$0 = %q", r.Stdout)
	}
}

// logFiles opens files as a local run's output logs are (appending, read
// back), in a directory of the test's.
func logFiles(t *testing.T) func(name string) *os.File {
	dir := t.TempDir()
	return func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
}

// An agent's stream with a local run's own log files: stdout is decoded
// into its file, stderr goes straight into its file, and both tails hold
// what the files hold (the decoder's [result] line with the agent's own
// stderr), what came before in the files left out.
func TestAgentStreamOwnFiles(t *testing.T) {
	open := logFiles(t)
	out, errf := open("stdout.log"), open("stderr.log")
	_, _ = errf.WriteString("an earlier step\n")
	script := `echo '{"type":"assistant","message":{"content":[{"type":"text","text":"hello"}]}}'
echo 'warming up' >&2
echo '{"type":"result","is_error":true,"result":"API Error: 429"}'
exit 1`
	r := Run(context.Background(), Spec{Argv: bash(script), AgentStream: true, Stdout: out, Stderr: errf, OwnFiles: true})
	if r.ExitCode != 1 || r.Stdout != "hello\n" {
		t.Errorf("exit %d, stdout %q", r.ExitCode, r.Stdout)
	}
	if r.Stderr != "warming up\n[result] API Error: 429\n" {
		t.Errorf("stderr tail %q", r.Stderr)
	}
	got, _ := os.ReadFile(errf.Name())
	if string(got) != "an earlier step\nwarming up\n[result] API Error: 429\n" {
		t.Errorf("stderr file %q", got)
	}
	if got, _ := os.ReadFile(out.Name()); string(got) != "hello\n" {
		t.Errorf("stdout file %q", got)
	}
	// A timeout's note reaches the tail too.
	r = Run(context.Background(), Spec{Argv: bash("sleep 5"), AgentStream: true, Stdout: out, Stderr: errf, OwnFiles: true, Timeout: 200 * time.Millisecond})
	if r.ExitCode != 124 || !strings.Contains(r.Stderr, "action timed out after 200ms") {
		t.Errorf("timeout: exit %d, stderr %q", r.ExitCode, r.Stderr)
	}
}

// An agent's stderr is kept until its result record ends the turn: what
// it writes there after is not, through pipes or with own log files (the
// file keeps it all).
func TestAgentStderrEndsAtResult(t *testing.T) {
	script := `echo 'before' >&2
sleep 0.2
echo '{"type":"result","is_error":false,"result":"ok"}'
sleep 0.3
echo 'after' >&2`
	r := Run(context.Background(), Spec{Argv: bash(script), AgentStream: true})
	if r.Stderr != "before\n" {
		t.Errorf("piped: stderr %q", r.Stderr)
	}
	open := logFiles(t)
	out, errf := open("stdout.log"), open("stderr.log")
	r = Run(context.Background(), Spec{Argv: bash(script), AgentStream: true, Stdout: out, Stderr: errf, OwnFiles: true})
	if r.Stderr != "before\n" {
		t.Errorf("own files: stderr %q", r.Stderr)
	}
	if got, _ := os.ReadFile(errf.Name()); string(got) != "before\nafter\n" {
		t.Errorf("stderr file %q", got)
	}
	// Plain text is no turn's end: all of stderr is kept.
	r = Run(context.Background(), Spec{Argv: bash("echo hi; echo one >&2; sleep 0.1; echo two >&2"), AgentStream: true})
	if r.Stderr != "one\ntwo\n" {
		t.Errorf("plain: stderr %q", r.Stderr)
	}
}
