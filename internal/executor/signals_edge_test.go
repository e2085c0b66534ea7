package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// An agent killed at its timeout has no signal: little-loops keeps no
// output of it. A shell action's output until its timeout counts.
func TestTimedOutActionSignal(t *testing.T) {
	spec := func(action string) *v1alpha1.LoopSpec {
		return &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a":    {Action: action, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, OnSuccess: "b", OnFailure: "b", OnError: "b"},
			"b":    {Action: "b", Next: "done"},
			"done": {Terminal: true},
		}}
	}
	timedOut := func(action string) *fakeActions {
		return &fakeActions{results: map[string][]ActionResult{action: {{Output: "FATAL_ERROR: gave up\n", ExitCode: 124, TimedOut: true}}}}
	}
	r := runLoop(t, spec("/ask"), timedOut("/ask"), Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedTerminal || r.run.CurrentState != "done" {
		t.Errorf("a timed-out agent: ended %s %q in %s", r.run.TerminatedBy, r.run.Message, r.run.CurrentState)
	}
	r = runLoop(t, spec("slow"), timedOut("slow"), Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Message != "gave up" {
		t.Errorf("a timed-out shell action: ended %s %q in %s", r.run.TerminatedBy, r.run.Message, r.run.CurrentState)
	}
}
