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

// capSpec alternates a and b under a cap of 3 steps with a summary state.
func capSpec(summary v1alpha1.State) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "a", MaxIterations: i32(3), OnMaxIterations: "summary",
		States: map[string]v1alpha1.State{
			"a": {Action: "a", Next: "b"}, "b": {Action: "b", Next: "a"},
			"summary": summary, "done": {Terminal: true},
		}}
}

// At the step cap the summary state runs once, then the run ends by the
// cap (as ll-loop's on_max_steps: a b a summary, 4 iterations).
func TestCapSummaryState(t *testing.T) {
	for _, c := range []struct {
		name    string
		summary v1alpha1.State
		final   string
	}{
		{"routes on", v1alpha1.State{Action: "summary", Next: "done"}, "done"},
		{"terminal with an action", v1alpha1.State{Action: "summary", Terminal: true}, "summary"},
	} {
		acts := &fakeActions{}
		r := runLoop(t, capSpec(c.summary), acts, Options{LittleLoops: true}, time.Millisecond)
		if strings.Join(acts.ran, " ") != "a b a summary" || r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations ||
			r.run.Iteration != 4 || r.run.CurrentState != c.final || r.count("max_steps_summary") != 1 {
			t.Errorf("%s: ran %v, %s in %s after %d", c.name, acts.ran, r.run.TerminatedBy, r.run.CurrentState, r.run.Iteration)
		}
		last := r.events[len(r.events)-1]
		if last.Data["terminated_by"] != "max_steps" {
			t.Errorf("%s: loop_complete %v", c.name, last.Data)
		}
	}
}

// maxPasses caps a maintain loop's full passes; onMaxPasses runs once.
func TestMaxPasses(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "work", Maintain: true, MaxIterations: i32(100), MaxPasses: i32(2), OnMaxPasses: "report",
		States: map[string]v1alpha1.State{
			"work": {Action: "work", Next: "done"}, "done": {Terminal: true},
			"report": {Action: "report", Next: "done"},
		}}
	acts := &fakeActions{}
	r := runLoop(t, spec, acts, Options{LittleLoops: true}, time.Millisecond)
	if strings.Join(acts.ran, " ") != "work work report" || r.run.TerminatedBy != v1alpha1.TerminatedMaxPasses ||
		r.run.Phase != v1alpha1.PhaseInterrupted || r.events[len(r.events)-1].Data["terminated_by"] != "max_iterations_reached" {
		t.Fatalf("ran %v; %s %s %v", acts.ran, r.run.TerminatedBy, r.run.Phase, r.events[len(r.events)-1].Data)
	}
}

// retryableExitCodes: an exit code not listed skips the state's error
// route (a retry) for onRetryExhausted, as little-loops.
func TestNonRetryableExitCodesEscalate(t *testing.T) {
	for _, c := range []struct {
		name string
		st   v1alpha1.State
		code int
		want string
	}{
		{"next, listed", v1alpha1.State{Action: "x", Next: "done", OnError: "retry", RetryableExitCodes: []int32{75}}, 75, "retry"},
		{"next, not listed", v1alpha1.State{Action: "x", Next: "done", OnError: "retry", RetryableExitCodes: []int32{75}, MaxRetries: i32(3), OnRetryExhausted: "giveup"}, 2, "giveup"},
		{"next, not listed, no onRetryExhausted", v1alpha1.State{Action: "x", Next: "done", OnError: "retry", RetryableExitCodes: []int32{75}}, 2, "retry"},
		{"evaluated error, not listed", v1alpha1.State{Action: "x", OnSuccess: "done", OnError: "retry", RetryableExitCodes: []int32{75}, MaxRetries: i32(3), OnRetryExhausted: "giveup"}, 2, "giveup"},
		{"evaluated error, listed", v1alpha1.State{Action: "x", OnSuccess: "done", OnError: "retry", RetryableExitCodes: []int32{2}, MaxRetries: i32(3), OnRetryExhausted: "giveup"}, 2, "retry"},
	} {
		spec := &v1alpha1.LoopSpec{Initial: "s", States: map[string]v1alpha1.State{"s": c.st,
			"done": {Terminal: true}, "retry": {Terminal: true}, "giveup": {Terminal: true}}}
		acts := &fakeActions{results: map[string][]ActionResult{"x": {{ExitCode: c.code}}}}
		if r := runLoop(t, spec, acts, Options{}, time.Millisecond); r.run.CurrentState != c.want {
			t.Errorf("%s: went to %s, want %s", c.name, r.run.CurrentState, c.want)
		}
	}
}

// A next state's action killed by a signal, without onError, ends the
// run system_signal (Failed).
func TestSystemSignal(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "s", States: map[string]v1alpha1.State{"s": {Action: "x", Next: "done"}, "done": {Terminal: true}}}
	acts := &fakeActions{results: map[string][]ActionResult{"x": {{ExitCode: -9}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedSystemSignal || r.run.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("%s %s", r.run.TerminatedBy, r.run.Phase)
	}
}
