package executor

import (
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

func circuitSpec(rf *v1alpha1.RepeatedFailure) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "work", Circuit: &v1alpha1.CircuitSpec{RepeatedFailure: rf},
		States: map[string]v1alpha1.State{
			"work":    {Action: "make", OnSuccess: "work", OnFailure: "done", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalDiffStall, MaxStall: i32(100)}},
			"recover": {Action: "reset", Next: "work"},
			"done":    {Terminal: true},
		}}
}

// The circuit counts (state, exit code, verdict) across steps; progress
// in a watched file, reported by the probe beside the evaluator's own,
// starts the count again; tripped, it aborts or goes where it says.
func TestRepeatedFailureCircuit(t *testing.T) {
	m, run := startRun(t, "test", circuitSpec(&v1alpha1.RepeatedFailure{Window: i32(2), ProgressPaths: []string{"out.txt", "own.txt"}, ExcludePaths: []string{"own.txt"}}), Options{LittleLoops: true})
	var all []Event
	for i, fp := range []string{"1", "2", "2"} {
		step, _ := m.Plan(run, t0)
		if i == 0 && (!strings.Contains(step.Action.Probe, "git diff --stat") || !strings.Contains(step.Action.Probe, "for p in out.txt; do stat")) {
			t.Fatalf("probe %q", step.Action.Probe)
		}
		all = append(all, eventsOf(m.Complete(run, &ActionResult{ExitCode: 0, Probe: &ProbeResult{
			Output: " a | 1 +\n", SHA256: "same", Stderr: "warning: x\n" + progressMark + fp + "\n"}}, t0))...)
	}
	if run.TerminatedBy != v1alpha1.TerminatedStallDetected || run.Iteration != 3 {
		t.Fatalf("ended %s after %d (%s)", run.TerminatedBy, run.Iteration, run.Message)
	}
	if want := "Stall detected: state 'work' produced (exit_code=0, verdict='yes') for 2 consecutive iterations"; run.Message != want {
		t.Errorf("message %q", run.Message)
	}
	last := all[len(all)-2]
	if last.Type != EventStallDetected || last.Data["action"] != "abort" || last.Data["consecutive"] != int32(2) {
		t.Errorf("event %+v", last)
	}

	// Routed, and counted over the run.
	m, run = startRun(t, "test", circuitSpec(&v1alpha1.RepeatedFailure{Window: i32(5), RecurrentWindow: i32(2), OnRepeatedFailure: "recover"}), Options{})
	for range 2 {
		m.Plan(run, t0)
		m.Complete(run, &ActionResult{ExitCode: 0, Probe: &ProbeResult{SHA256: "same"}}, t0)
	}
	if run.CurrentState != "recover" || run.Phase.IsFinished() {
		t.Errorf("in %s (%s)", run.CurrentState, run.Message)
	}
}

func TestCircuitValidation(t *testing.T) {
	for rf, want := range map[*v1alpha1.RepeatedFailure]string{
		{OnRepeatedFailure: "nowhere"}: "spec.circuit.repeatedFailure.onRepeatedFailure: Invalid value: \"nowhere\": must be abort or name a state",
		{Window: i32(0)}:               "spec.circuit.repeatedFailure.window",
		{RecurrentWindow: i32(1)}:      "spec.circuit.repeatedFailure.recurrentWindow",
	} {
		if _, err := New("test", circuitSpec(rf), Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want %q", err, want)
		}
	}
}
