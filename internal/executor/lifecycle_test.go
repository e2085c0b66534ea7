package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/gitws"
)

// startGitRun starts a run of gitSpec, cloned before its first state, with
// hook as its exit hook.
func startGitRun(t *testing.T, hook string) (*Machine, *v1alpha1.RunState, time.Time) {
	t.Helper()
	spec := gitSpec()
	spec.OnExit = &v1alpha1.ExitHook{Action: hook}
	m, err := New("fix", spec, Options{Clone: CloneOf(spec)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	run := &v1alpha1.RunState{}
	m.Start(run, "r1", now)
	return m, run, now
}

// A run's life outside its states comes from Plan in one order, whatever
// the driver: the clone before the first state, and once the run ended
// (and its end was saved) the push, then the exit hook, which reads what
// the push did. Each is found again, unchanged, while it is in flight.
func TestLifecycleOrder(t *testing.T) {
	m, run, now := startGitRun(t, "echo ${loop.git.pushed} ${loop.git.commit} ${loop.git.branch} ${loop.git.cloned}")
	var order []string
	step := func() Step {
		t.Helper()
		s, _ := m.Plan(run, now)
		if s.Kind == StepAction && s.InFlight {
			t.Fatalf("a new %s is in flight", s.Action.State)
		}
		if s.Kind == StepAction {
			again, more := m.Plan(run, now)
			if !again.InFlight || again.Action.State != s.Action.State || len(more) != 0 {
				t.Fatalf("planned again in flight: %+v, events %v", again, more)
			}
		}
		return s
	}
	complete := func(out string) {
		t.Helper()
		if next, _ := m.Complete(run, &ActionResult{Output: out}, now); next.Kind != StepNext {
			t.Fatalf("complete: %s", next.Kind)
		}
	}
	s := step()
	if s.Kind != StepAction || s.Action.Git == nil || s.Action.Git.Op != gitws.OpClone || !IsLifecycle(s.Action) {
		t.Fatalf("first step %+v, want the clone", s)
	}
	order = append(order, s.Action.State)
	if _, evs := m.Complete(run, &ActionResult{Output: `{"commit":"c0ffee"}` + "\n"}, now); len(evs) != 1 || evs[0].Type != EventGitClone {
		t.Fatalf("the clone's events: %v", evs)
	}
	s = step()
	if s.Kind != StepAction || IsLifecycle(s.Action) || s.Action.State != "a" {
		t.Fatalf("after the clone %+v, want state a", s)
	}
	order = append(order, s.Action.State)
	complete("")
	if s = step(); s.Kind != StepDone || !m.AfterEnd(run) {
		t.Fatalf("at the end %s, after end %v", s.Kind, m.AfterEnd(run))
	}
	s = step()
	if s.Kind != StepAction || s.Action.Git == nil || s.Action.Git.Op != gitws.OpPush || s.Action.Git.Base != "c0ffee" {
		t.Fatalf("after the end %+v, want the push", s)
	}
	order = append(order, s.Action.State)
	complete(`{"commit":"beef","branch":"looprun/fix-r1","pushed":true}` + "\n")
	s = step()
	if s.Kind != StepAction || !s.Action.Exit {
		t.Fatalf("after the push %+v, want the exit hook", s)
	}
	order = append(order, s.Action.State)
	if want := "echo True beef looprun/fix-r1 c0ffee"; s.Action.Command != want {
		t.Errorf("the hook reads %q, want %q", s.Action.Command, want)
	}
	complete("")
	if s = step(); s.Kind != StepDone || m.AfterEnd(run) {
		t.Fatalf("after the hook %s, after end %v", s.Kind, m.AfterEnd(run))
	}
	if got := order; len(got) != 4 || got[0] != GitCloneState || got[1] != "a" || got[2] != GitPushState || got[3] != ExitState {
		t.Fatalf("order %v", got)
	}
	if run.ExitHook.Phase != v1alpha1.ExitHookSucceeded || run.Git.Push.Phase != v1alpha1.ExitHookSucceeded || run.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("status %+v %+v %s", run.ExitHook, run.Git.Push, run.Phase)
	}
}

// A clone that fails ends the run with git's error; its exit hook still
// runs, and nothing is pushed.
func TestLifecycleCloneFails(t *testing.T) {
	m, run, now := startGitRun(t, "true")
	m.Plan(run, now)
	m.Complete(run, &ActionResult{ExitCode: 128, Stderr: "git clone: repository not found\n"}, now)
	if run.Phase != v1alpha1.PhaseFailed || run.Message != "the clone of https://h/r.git failed: git clone: repository not found" {
		t.Fatalf("run %s: %q", run.Phase, run.Message)
	}
	s, _ := m.Plan(run, now)
	if s.Kind != StepAction || !s.Action.Exit {
		t.Fatalf("after a failed clone %+v, want the exit hook alone", s)
	}
}

// A state without an action whose verdict is awaited (the judge's) is
// not entered again while it waits: Plan returns the same step, with no
// events, and the verdict completes it once.
func TestVerdictAwaitedIsPlannedAgainNotEnteredAgain(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "ask", States: map[string]v1alpha1.State{
		"ask":  {Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalLLMStructured, Prompt: "done?"}, OnSuccess: "done", OnFailure: "done", OnError: "done"},
		"done": {Terminal: true},
	}}
	m, err := New("judge", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	run := &v1alpha1.RunState{}
	m.Start(run, "r1", now)
	s, _ := m.Plan(run, now)
	if s.Kind != StepEvaluate || run.Iteration != 1 {
		t.Fatalf("first %s at iteration %d", s.Kind, run.Iteration)
	}
	q, _ := m.Complete(run, nil, now)
	if q.Kind != StepJudge || run.Action == nil || !run.Action.Verdict || run.Action.IsAction() {
		t.Fatalf("complete %s, in flight %+v", q.Kind, run.Action)
	}
	for range 3 { // the reconciles that wake before the judge answers
		again, evs := m.Plan(run, now)
		if again.Kind != StepEvaluate || !again.InFlight || len(evs) != 0 || run.Iteration != 1 {
			t.Fatalf("planned again: %+v, events %v, iteration %d", again, evs, run.Iteration)
		}
		if q, _ := m.Complete(run, nil, now); q.Kind != StepJudge {
			t.Fatalf("asked again: %s", q.Kind)
		}
	}
	res := Judged(nil, evaluate.Result{Verdict: "yes", Details: map[string]any{"confidence": 1.0, "evidence": "seen"}})
	if next, _ := m.Complete(run, res, now); next.Kind != StepNext || run.Action != nil || run.CurrentState != "done" {
		t.Fatalf("judged: %s, in flight %+v, state %s", next.Kind, run.Action, run.CurrentState)
	}
}

// A saved state (an imported state file, an edited status) that marks a
// state with an action as waiting for its verdict runs nothing: the
// action's result is lost and the run ends with why.
func TestForgedVerdictMarkOnAnActionEndsTheRun(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a": {Action: "echo hi", Next: "done"}, "done": {Terminal: true}}}
	m, err := New("forged", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	run := &v1alpha1.RunState{}
	m.Start(run, "r1", now)
	run.Iteration = 1
	run.Action = &v1alpha1.ActionStatus{State: "a", Iteration: 1, Verdict: true}
	s, _ := m.Plan(run, now)
	if s.Kind != StepEvaluate {
		t.Fatalf("planned %s", s.Kind)
	}
	m.Complete(run, nil, now)
	if run.Phase != v1alpha1.PhaseFailed || run.Message != `state "a": the action's result was lost` {
		t.Fatalf("run %s: %q", run.Phase, run.Message)
	}
}
