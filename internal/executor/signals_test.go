package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

func signalSpec(action string) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":    {Action: action, OnSuccess: "b", OnFailure: "b"},
		"b":    {Action: "b", Next: "done"},
		"done": {Terminal: true},
	}}
}

// FATAL_ERROR: ends the run in error once the verdict is recorded, before
// the route; LOOP_STOP: lets the state route, then stops; CONTEXT_HANDOFF:
// pauses the run in its state with handoff_detected and no loop_complete.
func TestSignalsEndTheRun(t *testing.T) {
	acts := &fakeActions{results: map[string][]ActionResult{
		"fatal": {{Output: "FATAL_ERROR: disk full\n"}},
		"stop":  {{Output: "LOOP_STOP:\n", ExitCode: 1}},
		"hand":  {{Output: "CONTEXT_HANDOFF: go on\n"}},
		"told":  {{Output: "nothing here", Signal: &Signal{Kind: SignalError, Payload: "found by the runner"}, SignalScanned: true}},
	}}
	r := runLoop(t, signalSpec("fatal"), acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Message != "disk full" || r.run.CurrentState != "a" ||
		r.count(EventEvaluate) != 1 || r.count(EventRoute) != 0 {
		t.Errorf("FATAL_ERROR: %s %q in %s, %d evaluate, %d route", r.run.TerminatedBy, r.run.Message, r.run.CurrentState, r.count(EventEvaluate), r.count(EventRoute))
	}
	r = runLoop(t, signalSpec("stop"), acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedInterrupted || r.run.Phase != v1alpha1.PhaseInterrupted || r.run.CurrentState != "b" || r.count(EventRoute) != 1 {
		t.Errorf("LOOP_STOP: %s %s in %s, %d route", r.run.Phase, r.run.TerminatedBy, r.run.CurrentState, r.count(EventRoute))
	}
	r = runLoop(t, signalSpec("hand"), acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedHandoff || r.run.Message != "go on" || r.run.CurrentState != "a" ||
		r.count(EventHandoffDetected) != 1 || r.count(EventLoopComplete) != 0 {
		t.Errorf("CONTEXT_HANDOFF: %s %q in %s, %d handoff_detected, %d loop_complete", r.run.TerminatedBy, r.run.Message, r.run.CurrentState,
			r.count(EventHandoffDetected), r.count(EventLoopComplete))
	}
	r = runLoop(t, signalSpec("told"), acts, Options{}, time.Millisecond)
	if r.run.Message != "found by the runner" {
		t.Errorf("a runner's signal: %s %q", r.run.TerminatedBy, r.run.Message)
	}
	r = runLoop(t, signalSpec("fatal"), &fakeActions{results: map[string][]ActionResult{"fatal": {{Output: "FATAL_ERROR: x\n"}}}},
		Options{IgnoreSignals: true}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedTerminal {
		t.Errorf("a child ignores signals; ended %s %q", r.run.TerminatedBy, r.run.Message)
	}
}

// A run paused by a handoff resumes in the state that asked for it, and
// loop_resume says so.
func TestHandoffResumes(t *testing.T) {
	m, run := startRun(t, "h", signalSpec("hand"), Options{})
	run.Phase, run.TerminatedBy, run.Message = v1alpha1.PhaseInterrupted, v1alpha1.TerminatedHandoff, "go on"
	evs, ok := m.Resume(run, t0)
	if !ok || len(evs) != 1 || evs[0].Data["from_handoff"] != true || evs[0].Data["continuation_prompt"] != "go on" {
		t.Fatalf("resume: %v %+v", ok, evs)
	}
}
