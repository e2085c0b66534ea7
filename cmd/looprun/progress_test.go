package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/test/proc"
)

// looprun resume of a run cut off in the middle of an action prints the
// state's route line with its iteration, not [<nil>] (resume.golden: what
// it prints, whole).
func TestResumeProgressShowsTheIteration(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "slow.yaml", "name: slow\ninitial: a\nstates:\n  a:\n    action: \"true\"\n    next: b\n  b:\n    action: echo $$ > pid; test -f go-on || exec sleep 60\n    next: done\n  done:\n    terminal: true\n")
	cmd := exec.Command(binary, "run", "slow.yaml")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := proc.WaitPid(t, filepath.Join(dir, "pid"))
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	proc.WaitGone(t, pid)
	write(t, dir, "go-on", "")
	r := looprun(t, dir, "resume", "slow")
	if r.code != 0 || !strings.Contains(steps(r.stdout), "[2] b -> done") || strings.Contains(r.stdout, "<nil>") {
		t.Errorf("exit %d, progress:\n%s\nwant the line [2] b -> done", r.code, r.stdout)
	}
	progressGolden(t, "resume.golden", r.stdout)
}

// A run stopped with Ctrl-C says how it ended once: the progress's last
// line, not again on stderr.
func TestStoppedRunSaysItsEndOnce(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "slow.yaml", "name: slow\ninitial: a\nstates:\n  a:\n    action: echo $$ > pid; exec sleep 60\n    next: done\n  done:\n    terminal: true\n")
	cmd := exec.Command(binary, "run", "slow.yaml")
	cmd.Dir = dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := proc.WaitPid(t, filepath.Join(dir, "pid"))
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	proc.WaitGone(t, pid)
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	all := stdout.String() + stderr.String()
	if n := strings.Count(all, "stopped"); n != 1 || !strings.Contains(stdout.String(), "Loop ended: stopped in a") {
		t.Errorf("the end is said %d times:\n%s\nstderr:\n%s", n, stdout.String(), stderr.String())
	}
}

// A judge's answer with no evidence counts as no: the progress says so
// under the judge's own reason, which argued for its answer.
func TestProgressSaysWhyAVerdictWasChanged(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, style{}, false, header{loop: "j"}, nil)
	p.print([]executor.Event{{Type: executor.EventEvaluate, Seq: 1, Data: map[string]any{
		"type": "llm_structured", "verdict": "no", "reason": "the tests pass now", "evidence": "", "evidence_coerced": true, "confidence": 0.9}}})
	got := out.String()
	if !strings.Contains(got, "the tests pass now") || !strings.Contains(got, "counted as no: the judge quoted no output as its evidence") {
		t.Fatalf("progress:\n%s", got)
	}
	out.Reset()
	p.print([]executor.Event{{Type: executor.EventEvaluate, Seq: 2, Data: map[string]any{
		"type": "llm_structured", "verdict": "yes", "reason": "fixed", "evidence": "ok", "confidence": 0.9}}})
	if strings.Contains(out.String(), "counted as no") {
		t.Fatalf("progress of an answer with evidence:\n%s", out.String())
	}
}

// A resumed run's summary counts its time before the resume too.
func TestResumedRunSummaryCountsTheWholeRun(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, style{}, false, header{loop: "r"}, nil)
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	run := &v1alpha1.RunState{AccumulatedMs: 90_000}
	p.Observe(run, []executor.Event{{Type: executor.EventLoopResume, Seq: 7, Time: t0, Data: executor.LoopResumeEvent{Loop: "r", FromState: "a", Iteration: 3}.Data()}})
	p.Observe(run, []executor.Event{{Type: executor.EventLoopComplete, Seq: 8, Time: t0.Add(2 * time.Second),
		Data: executor.LoopCompleteEvent{FinalState: "done", Iterations: 4, TerminatedBy: "terminal"}.Data()}})
	if !strings.Contains(out.String(), "Loop completed: done (4 iterations, 1m 32s)") {
		t.Fatalf("progress:\n%s", out.String())
	}
}

// A rewind and a fork are said where they are in the log: a watch of a
// rewound Loop reads its ended timeline, then where it went back to.
func TestProgressSaysRewindAndFork(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, style{}, false, header{loop: "r"}, nil)
	p.print([]executor.Event{
		{Type: executor.EventLoopRewind, Seq: 30, Data: executor.LoopRewindEvent{State: "fix", Iteration: 3, FromState: "done", FromIteration: 5}.Data()},
		{Type: executor.EventLoopFork, Seq: 31, Data: executor.LoopForkEvent{Source: "ship", State: "ask", Iteration: 1}.Data()},
	})
	got := out.String()
	for _, want := range []string{"Rewound from iteration 5 (done) to the checkpoint of iteration 3: on from state fix",
		"forked from ship at iteration 1: on from state ask"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%s", want, got)
		}
	}
}
