package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/process"
	"github.com/looprun/looprun/test/proc"
)

func run(t *testing.T, r *Runner, a *executor.Action) executor.ActionResult {
	t.Helper()
	return r.Run(context.Background(), a)
}

// With output files, each action's tail is its own and the files keep everything.
func TestOutputFilesKeepEverything(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	r := &Runner{Stdout: open("out"), Stderr: open("err"), OutputWindow: 8}
	first := run(t, r, &executor.Action{Command: "echo first; echo e1 >&2"})
	second := run(t, r, &executor.Action{Command: "echo 0123456789abcdef"})
	if first.Output != "first\n" || first.Stderr != "e1\n" || first.OutputTruncated {
		t.Errorf("first %+v", first)
	}
	if second.Output != "9abcdef\n" || !second.OutputTruncated || second.Stderr != "" {
		t.Errorf("second %+v", second)
	}
	all, _ := os.ReadFile(filepath.Join(dir, "out"))
	if string(all) != "first\n0123456789abcdef\n" {
		t.Errorf("output file %q", all)
	}
}

func TestExitCodesAndOutput(t *testing.T) {
	r := &Runner{}
	tests := []struct {
		cmd            string
		code           int
		stdout, stderr string
	}{
		{"echo hello", 0, "hello\n", ""},
		{"echo oops >&2; exit 1", 1, "", "oops\n"},
		{"exit 3", 3, "", ""},
		{"kill -9 $$", -9, "", ""},
		{"kill -TERM $$", -15, "", ""},
	}
	for _, tt := range tests {
		res := run(t, r, &executor.Action{Command: tt.cmd, Timeout: 10 * time.Second})
		if res.ExitCode != tt.code || res.Output != tt.stdout || res.Stderr != tt.stderr {
			t.Errorf("%q: exit %d out %q err %q", tt.cmd, res.ExitCode, res.Output, res.Stderr)
		}
	}
}

func TestCannotStart(t *testing.T) {
	res := run(t, &Runner{Shell: "/nonexistent/shell"}, &executor.Action{Command: "true"})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "cannot start /nonexistent/shell") {
		t.Errorf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
}

func TestRunsInDirWithEnv(t *testing.T) {
	dir := t.TempDir()
	res := run(t, &Runner{Dir: dir, Env: []string{"GREETING=hi"}}, &executor.Action{Command: "echo $GREETING; pwd"})
	if res.Output != "hi\n"+dir+"\n" {
		t.Errorf("output %q", res.Output)
	}
}

// A timeout kills the whole process group, grandchildren included, and exits 124.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	late := filepath.Join(dir, "late")
	cmd := "(sleep 30; touch " + late + ") & echo $! > " + pidFile + "; sleep 30"
	start := time.Now()
	res := run(t, &Runner{}, &executor.Action{Command: cmd, Timeout: 300 * time.Millisecond})
	if res.ExitCode != evaluate.ExitTimeout || !strings.Contains(res.Stderr, "timed out") {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(2 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("grandchild %d survived the timeout", pid)
	}
}

func TestCancelKillsAction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	res := (&Runner{}).Run(ctx, &executor.Action{Command: "sleep 30", Timeout: time.Minute})
	if res.ExitCode != -9 || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d after %v", res.ExitCode, time.Since(start))
	}
}

func TestBackgroundChildDoesNotHang(t *testing.T) {
	start := time.Now()
	res := run(t, &Runner{}, &executor.Action{Command: "sleep 30 & echo started", Timeout: time.Minute})
	if res.ExitCode != 0 || res.Output != "started\n" || time.Since(start) > 10*time.Second {
		t.Errorf("exit %d out %q after %v", res.ExitCode, res.Output, time.Since(start))
	}
}

func TestAgentCommandStub(t *testing.T) {
	dir := t.TempDir()
	stub := "#!/bin/sh\nprintf 'agent args:'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo\n"
	if err := os.WriteFile(filepath.Join(dir, "claude"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	res := run(t, &Runner{}, &executor.Action{Command: "/fix the tests", Agent: true, Timeout: 10 * time.Second})
	if res.Output != "agent args: [--dangerously-skip-permissions] [-p] [/fix the tests]\n" {
		t.Errorf("output %q", res.Output)
	}
	res = run(t, &Runner{AgentCommand: []string{"claude", "--model", "x", "-p"}}, &executor.Action{Command: "hi", Agent: true})
	if res.Output != "agent args: [--model] [x] [-p] [hi]\n" {
		t.Errorf("configured command output %q", res.Output)
	}
}

// An action printing 1 GiB keeps only the window and leaves memory flat.
func TestHugeOutputMemoryIsFlat(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := run(t, &Runner{}, &executor.Action{Command: "head -c 1073741824 /dev/zero | tr '\\0' x; echo; echo END", Timeout: 2 * time.Minute})
	runtime.ReadMemStats(&after)
	if res.ExitCode != 0 || len(res.Output) != process.DefaultOutputWindow || !strings.HasSuffix(res.Output, "x\nEND\n") || !res.OutputTruncated {
		t.Fatalf("exit %d, kept %d bytes, truncated %v", res.ExitCode, len(res.Output), res.OutputTruncated)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
		t.Errorf("allocated %d MiB while reading 1 GiB", grown>>20)
	}
}

func TestActions(t *testing.T) {
	a := NewActions(t.TempDir())
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loop", UID: "u1"}}
	loop.Status.RunID = "r"
	loop.Status.Action = &v1alpha1.ActionStatus{Iteration: 1}
	check := func() runner.Outcome {
		t.Helper()
		out, err := a.Check(t.Context(), loop)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := check(); out.State != runner.Lost {
		t.Fatalf("an unknown action: %v", out.State)
	}
	act := executor.Action{Iteration: 1, Command: "echo $PWD; sleep 0.2", Timeout: 10 * time.Second}
	_, _ = a.Start(t.Context(), loop, act)
	_, _ = a.Start(t.Context(), loop, act) // the same key does not start twice
	if out := check(); out.State != runner.Running || a.Running() != 1 {
		t.Fatalf("state %v, running %d", out.State, a.Running())
	}
	deadline := time.Now().Add(10 * time.Second)
	for check().State == runner.Running && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	out := check()
	if out.State != runner.Done || out.Result.ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(out.Result.Output), filepath.Join("ns", "loop")) {
		t.Errorf("outcome %+v", out)
	}
	if a.EndedAt(loop, 1).IsZero() {
		t.Error("the action's end was not noted")
	}
	if _, err := a.Start(t.Context(), loop, act); !errors.As(err, new(*runner.AlreadyEnded)) {
		t.Errorf("starting an ended action again: %v", err)
	}
	a.Release(loop, 1)
	if out := check(); out.State != runner.Lost {
		t.Errorf("after Release: %v", out.State)
	}
	loop.Status.Action.Iteration = 2
	_, _ = a.Start(t.Context(), loop, executor.Action{Iteration: 2, Command: "sleep 30", Timeout: time.Minute})
	_ = a.Cancel(t.Context(), loop)
	if out := check(); out.State != runner.Lost || a.Running() != 0 {
		t.Errorf("after Cancel: %v", out.State)
	}
	loop.Status.Action.Iteration = 3
	_, _ = a.Start(t.Context(), loop, executor.Action{Iteration: 3, Command: "sleep 30", Timeout: time.Minute})
	a.Forget(types.NamespacedName{Namespace: "ns", Name: "loop"})
	if out := check(); out.State != runner.Lost || a.Running() != 0 {
		t.Errorf("after Forget: %v", out.State)
	}
	a.Close()
	loop.Status.Action.Iteration = 4
	_, _ = a.Start(t.Context(), loop, executor.Action{Iteration: 4, Command: "true"})
	if a.Running() != 0 {
		t.Error("a closed runner started an action")
	}
}

// An operator restarted with --allow-local-actions kills the action an
// earlier operator process left running before it starts the Loop's next.
func TestActionsKillWhatAnEarlierOperatorLeft(t *testing.T) {
	base := t.TempDir()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loop", UID: "u1"}}
	loop.Status.RunID = "r"
	loop.Status.Action = &v1alpha1.ActionStatus{Iteration: 1}
	first := NewActions(base)
	_, _ = first.Start(t.Context(), loop, executor.Action{Iteration: 1, Command: "echo $$ > pid; exec sleep 60", Timeout: time.Minute})
	pid := proc.WaitPid(t, filepath.Join(base, "ns", "loop", "pid"))
	// The first operator dies without a word: its goroutines are gone,
	// its action is not (in a real crash the parent-death signal would
	// also fire; here the test process lives on).
	second := NewActions(base)
	defer second.Close()
	defer first.Close()
	_, _ = second.Start(t.Context(), loop, executor.Action{Iteration: 1, Command: "true", Timeout: time.Minute})
	proc.WaitGone(t, pid) // the action an earlier operator left was killed
}
