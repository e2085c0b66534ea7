package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The signal the agent of a learning gate prints counts, as in
// little-loops, where the gate runs it as any action: FATAL_ERROR: ends the
// run once the gate's verdict is recorded, before it routes.
func TestLearningGateAgentSignal(t *testing.T) {
	m, run := startRun(t, "test", learningSpec(nil), Options{})
	m.Plan(run, t0)
	res := &ActionResult{Output: "looprun-learning: explore 1 A b\nFATAL_ERROR: A b needs a person\n",
		Probe: &ProbeResult{Output: "stale missing A b\nexplore 1 A b\nproven A b\nproven it's\ncomplete\n"}}
	evs := eventsOf(m.Complete(run, res, t0))
	if run.TerminatedBy != v1alpha1.TerminatedError || run.Message != "A b needs a person" || run.CurrentState != "gate" {
		t.Fatalf("ended %s %q in %s", run.TerminatedBy, run.Message, run.CurrentState)
	}
	if got := learningEvents(evs); len(got) == 0 || got[len(got)-1] != EventLearningComplete {
		t.Fatalf("learning events %v: the gate's verdict is recorded first", got)
	}
	for _, e := range evs {
		if e.Type == EventRoute {
			t.Fatalf("routed: %v", e.Data)
		}
	}
}

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

// A try that retryPolicy would run again still ends the run on its
// FATAL_ERROR:, its result kept, and LOOP_STOP: stops the run instead of
// trying again, as little-loops heeds every action's signal.
func TestRetriedTrySignal(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a": {Action: "try", Capture: "try", RetryPolicy: &v1alpha1.RetryPolicy{Limit: 2, ExitCodes: []int32{3}},
			OnSuccess: "done", OnFailure: "done", OnError: "done"},
		"done": {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"try": {{Output: "FATAL_ERROR: the disk is gone\n", ExitCode: 3}}}}
	r := runLoop(t, spec, acts, Options{}, time.Minute)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Message != "the disk is gone" || len(acts.ran) != 1 {
		t.Errorf("FATAL_ERROR: ended %s %q after %d tries", r.run.TerminatedBy, r.run.Message, len(acts.ran))
	}
	if c := r.run.Captured["try"]; c.ExitCode != 3 || c.Output != "FATAL_ERROR: the disk is gone" {
		t.Errorf("the try's capture %+v", c)
	}
	acts = &fakeActions{results: map[string][]ActionResult{"try": {{Output: "LOOP_STOP:\n", ExitCode: 3}}}}
	r = runLoop(t, spec, acts, Options{}, time.Minute)
	if r.run.Phase != v1alpha1.PhaseInterrupted || r.run.CurrentState != "a" || len(acts.ran) != 1 {
		t.Errorf("LOOP_STOP: %s %s in %s after %d tries", r.run.Phase, r.run.TerminatedBy, r.run.CurrentState, len(acts.ran))
	}
}

// The action flushed before the loop's timeout ends it routes nowhere and
// its signal is not heeded: the run ends by its timeout, as in little-loops.
func TestFlushedActionSignalIgnored(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "slow", Timeout: dur(time.Second), States: map[string]v1alpha1.State{
		"slow": {Action: "slow", OnSuccess: "done", OnFailure: "mark"},
		"mark": {Action: "mark", Next: "slow"},
		"done": {Terminal: true},
	}}
	m, run := startRun(t, "test", spec, Options{})
	m.Plan(run, t0)
	m.Complete(run, &ActionResult{ExitCode: 1}, t0.Add(1500*time.Millisecond))
	step, _ := m.Plan(run, t0.Add(1500*time.Millisecond))
	if step.Kind != StepAction || step.Action.Command != "mark" || run.Action == nil || !run.Action.Flush {
		t.Fatalf("step %v %+v: want the flush of mark", step.Kind, step.Action)
	}
	m.Complete(run, &ActionResult{Output: "FATAL_ERROR: flushed\n"}, t0.Add(1600*time.Millisecond))
	if run.TerminatedBy != v1alpha1.TerminatedTimeout || run.CurrentState != "mark" {
		t.Fatalf("ended %s %q in %s", run.TerminatedBy, run.Message, run.CurrentState)
	}
}

// FATAL_ERROR: with only a blank after it ends the run with no text (the
// pattern's (.+) takes the blank, then it is stripped); with only line ends
// after it, it is no signal.
func TestEmptyFatalError(t *testing.T) {
	acts := &fakeActions{results: map[string][]ActionResult{
		"blank": {{Output: "FATAL_ERROR: \n"}},
		"bare":  {{Output: "FATAL_ERROR:\n"}},
	}}
	r := runLoop(t, signalSpec("blank"), acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Message != "" || r.run.CurrentState != "a" {
		t.Errorf("a blank text: ended %s %q in %s", r.run.TerminatedBy, r.run.Message, r.run.CurrentState)
	}
	r = runLoop(t, signalSpec("bare"), acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedTerminal {
		t.Errorf("no text: ended %s %q in %s", r.run.TerminatedBy, r.run.Message, r.run.CurrentState)
	}
}
