package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/test/proc"
)

// A local run waits in its approval state until looprun approve (from
// another shell) answers it; the answer, who gave it and why are in the
// event log. An answer with no approval waiting is refused.
func TestApproveLocalRun(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "gate.yaml", `name: gate
initial: build
context:
  version: v2
states:
  build:
    action: echo built > trace
    next: ask
  ask:
    approval:
      message: ship ${context.version}?
      timeout: 1m
    route:
      approved: ship
      rejected: stop
      timeout: stop
  ship:
    action: echo shipped >> trace
    next: done
  done:
    terminal: true
  stop:
    terminal: true
`)
	if r := looprun(t, dir, "approve", "gate"); r.code != 1 {
		t.Fatalf("approve before any run: exit %d %q", r.code, r.stderr)
	}
	cmd := exec.Command(binary, "run", "gate.yaml") // stdin /dev/null: not a terminal
	cmd.Dir = dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, ".loops/.running/gate.state.json")
	sf := waitingForApproval(t, state)
	if sf.ActiveAction.Approval.Message != "ship v2?" || sf.ActiveAction.Approval.Deadline == "" {
		t.Errorf("waiting for %+v", sf.ActiveAction.Approval)
	}
	r := looprun(t, dir, "approve", "gate", "-m", "green")
	if r.code != 0 || !strings.Contains(r.stdout, "state ask (iteration 2) approved") {
		t.Fatalf("approve: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if got := readFile(dir, "trace"); got != "built\nshipped\n" {
		t.Errorf("trace %q", got)
	}
	// With no terminal to answer at, the run does not ask there; it
	// shows the wait and the answer.
	if out := stdout.String(); strings.Contains(out, "Approve?") || !strings.Contains(out, "waiting for approval: ship v2?") ||
		!strings.Contains(out, "answer: approved by ") {
		t.Errorf("progress:\n%s", out)
	}
	events, err := eventlog.Read(filepath.Join(dir, ".loops/.running/gate.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var answered bool
	for _, e := range events {
		if e.Type == "approval_answered" {
			a := executor.ApprovalAnsweredOf(e)
			answered = a.Verdict == "approved" && a.Message == "green" && a.By != ""
		}
	}
	if !answered {
		t.Errorf("no approval_answered event with its verdict, message and approver: %v", events)
	}
	if r := looprun(t, dir, "reject", "gate"); r.code != 1 || !strings.Contains(r.stderr, "waits for no approval") {
		t.Errorf("reject after the run: exit %d %q", r.code, r.stderr)
	}
}

// A run stopped while it waits for an approval resumes waiting for the same
// question (its deadline kept), and an answer then lets it go on.
func TestApprovalWaitResumes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "gate.yaml", `name: gate
initial: ask
states:
  ask:
    approval:
      message: ship?
      timeout: 1h
    on_approved: ship
    on_rejected: stop
  ship:
    action: echo shipped >> trace
    next: done
  done:
    terminal: true
  stop:
    terminal: true
`)
	state := filepath.Join(dir, ".loops/.running/gate.state.json")
	waiting := func(cmd *exec.Cmd) *localrun.StateFile {
		t.Helper()
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return waitingForApproval(t, state)
	}
	run := exec.Command(binary, "run", "gate.yaml")
	first := waiting(run)
	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = run.Wait()
	if sf, _ := localrun.ReadStateFile(state); sf.Status == localrun.StatusRunning {
		t.Fatalf("the interrupted run still says running: %+v", sf)
	}
	resume := exec.Command(binary, "resume", "gate")
	var stderr strings.Builder
	resume.Stderr = &stderr
	again := waiting(resume)
	if again.ActiveAction.Approval.Deadline != first.ActiveAction.Approval.Deadline || again.ActiveAction.Approval.Message != "ship?" {
		t.Errorf("the wait resumed as %+v, was %+v", again.ActiveAction.Approval, first.ActiveAction.Approval)
	}
	if r := looprun(t, dir, "approve", "gate"); r.code != 0 {
		t.Fatalf("approve: exit %d %q", r.code, r.stderr)
	}
	if err := resume.Wait(); err != nil {
		t.Fatalf("resume: %v\n%s", err, stderr.String())
	}
	if got := readFile(dir, "trace"); got != "shipped\n" {
		t.Errorf("trace %q", got)
	}
}

// looprun reject says "rejected"; a second answer to the same approval
// never also reports success: it is refused whether the run has read the
// first (no approval waits) or not yet (answered already).
func TestSecondAnswerIsRefused(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "gate.yaml", `name: gate
initial: ask
states:
  ask:
    approval:
      message: ship?
      timeout: 1m
    route:
      approved: done
      rejected: stop
      timeout: stop
  done:
    terminal: true
  stop:
    terminal: true
`)
	cmd := exec.Command(binary, "run", "gate.yaml")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, ".loops/.running/gate.state.json")
	waitingForApproval(t, state)
	r := looprun(t, dir, "reject", "gate", "-m", "not today")
	if r.code != 0 || !strings.Contains(r.stdout, "state ask (iteration 1) rejected") {
		t.Fatalf("reject: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	again := looprun(t, dir, "approve", "gate")
	if again.code != 1 || !strings.Contains(again.stderr, "was answered already") && !strings.Contains(again.stderr, "waits for no approval") {
		t.Fatalf("a second answer: exit %d %q %q", again.code, again.stdout, again.stderr)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	sf, err := localrun.ReadStateFile(state)
	if err != nil || sf.CurrentState != "stop" {
		t.Fatalf("ended in %s (%v): the second answer replaced the first", sf.CurrentState, err)
	}
}

// waitingForApproval waits until the run of the state file waits, running,
// for an approval, and returns its state file.
func waitingForApproval(t *testing.T, state string) *localrun.StateFile {
	t.Helper()
	var sf *localrun.StateFile
	proc.Until(t, 20*time.Second, "the run to wait for approval", func() bool {
		got, err := localrun.ReadStateFile(state)
		if err != nil || got.ActiveAction == nil || got.ActiveAction.Approval == nil || got.Status != localrun.StatusRunning {
			return false
		}
		sf = got
		return true
	})
	return sf
}
