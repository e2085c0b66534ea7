package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

func throttleSpec(st v1alpha1.State) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "spin", MaxIterations: i32(100),
		Throttle: &v1alpha1.Throttle{WarnMax: i32(8), HardMax: i32(12)},
		States:   map[string]v1alpha1.State{"spin": st, "cool": {Terminal: true}, "done": {Terminal: true}}}
}

// A state runs its action at most hardMax times in a row: the 12th goes
// to onThrottleHard; without one the 13th ends the loop, as little-loops.
func TestThrottle(t *testing.T) {
	r := runLoop(t, throttleSpec(v1alpha1.State{Action: "true", OnSuccess: "$current", OnThrottleHard: "cool"}), nil, Options{}, time.Millisecond)
	if r.run.CurrentState != "cool" || r.run.Iteration != 12 || r.count(EventThrottleWarn) != 1 || r.count(EventThrottleHard) != 1 {
		t.Fatalf("state %s after %d iterations; events %v", r.run.CurrentState, r.run.Iteration, r.count(EventThrottleHard))
	}
	r = runLoop(t, throttleSpec(v1alpha1.State{Action: "true", OnSuccess: "$current"}), nil, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Iteration != 13 || r.count(EventThrottleStop) != 1 ||
		!strings.Contains(r.run.Message, "Throttle stop: state 'spin' exceeded hard_max=12") {
		t.Fatalf("%s after %d iterations: %s", r.run.TerminatedBy, r.run.Iteration, r.run.Message)
	}
	// Leaving the state starts the count again.
	spec := throttleSpec(v1alpha1.State{Action: "true", OnSuccess: "other"})
	spec.States["other"] = v1alpha1.State{Action: "true", OnSuccess: "spin"}
	r = runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations || r.count(EventThrottleWarn) != 0 {
		t.Fatalf("alternating states: %s, %d warnings", r.run.TerminatedBy, r.count(EventThrottleWarn))
	}
	// No throttle, no bound.
	spec = throttleSpec(v1alpha1.State{Action: "true", OnSuccess: "$current"})
	spec.Throttle = nil
	if r = runLoop(t, spec, nil, Options{}, time.Millisecond); r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations {
		t.Fatalf("unthrottled: %s", r.run.TerminatedBy)
	}
}
