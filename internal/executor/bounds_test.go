package executor

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// drive runs a spec to its end, answering every action with result(a).
func drive(t *testing.T, spec *v1alpha1.LoopSpec, result func(a *Action) ActionResult) (*v1alpha1.RunState, []Event) {
	t.Helper()
	m, err := New("bounds", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	now := time.Unix(1000, 0)
	evs := m.Start(run, "r", now)
	for range 1000 {
		step, e := m.Plan(run, now)
		evs = append(evs, e...)
		switch step.Kind {
		case StepDone:
			return run, evs
		case StepAction:
			res := result(step.Action)
			evs = append(evs, eventsOf(m.Complete(run, &res, now))...)
		case StepEvaluate:
			evs = append(evs, eventsOf(m.Complete(run, nil, now))...)
		}
	}
	t.Fatal("the run did not end")
	return nil, nil
}

// Sixty capturing states each printing 10 KB keep the run state (a Loop's
// status) well under 64 KiB, and say which captures were cut.
func TestRunStateStaysSmall(t *testing.T) {
	states := map[string]v1alpha1.State{"done": {Terminal: true}}
	for i := range 60 {
		next := "done"
		if i < 59 {
			next = fmt.Sprintf("s%02d", i+1)
		}
		states[fmt.Sprintf("s%02d", i)] = v1alpha1.State{Action: "print", Capture: fmt.Sprintf("c%02d", i), Next: next}
	}
	spec := &v1alpha1.LoopSpec{Initial: "s00", States: states, MaxIterations: ptrTo(int32(100))}
	big := strings.Repeat("0123456789", 1000)
	run, evs := drive(t, spec, func(*Action) ActionResult { return ActionResult{Output: big, Stderr: big} })
	b, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 48<<10 || len(run.Captured) != 60 {
		t.Fatalf("run state of %d bytes with %d captures", len(b), len(run.Captured))
	}
	cut := 0
	for _, e := range evs {
		if e.Type == EventCaptureTruncated {
			cut++
		}
	}
	if cut < 60 {
		t.Errorf("%d capture_truncated events for 60 cut captures", cut)
	}
}

// A classify verdict of a megabyte is an error verdict, not a route key;
// details are bounded; an expanded command past the bound is an error.
func TestVerdictDetailsAndCommandBounds(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":    {Action: "x", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalClassify}, Route: map[string]v1alpha1.StateName{"ok": "done", "_error": "bad"}},
		"done": {Terminal: true}, "bad": {Terminal: true},
	}}
	run, _ := drive(t, spec, func(*Action) ActionResult { return ActionResult{Output: strings.Repeat("v", 1<<20)} })
	if run.CurrentState != "bad" || run.LastResult.Verdict != v1alpha1.VerdictError || len(run.LastResult.Details.Raw) > MaxDetailsBytes {
		t.Errorf("state %s verdict %q details %d bytes", run.CurrentState, run.LastResult.Verdict, len(run.LastResult.Details.Raw))
	}
	if d := detailsJSON(map[string]any{"huge": strings.Repeat("é", 100000), "n": 1}); len(d.Raw) > MaxDetailsBytes || !strings.Contains(string(d.Raw), "details_truncated") {
		t.Errorf("details of %d bytes", len(d.Raw))
	}

	spec = &v1alpha1.LoopSpec{Initial: "grow", States: map[string]v1alpha1.State{
		"grow": {Action: "echo ${context.blob}", Next: "done", OnError: "bad"},
		"done": {Terminal: true}, "bad": {Terminal: true},
	}}
	spec.SetContext("blob", strings.Repeat("b", MaxCommandBytes))
	ran := false
	run, _ = drive(t, spec, func(*Action) ActionResult { ran = true; return ActionResult{} })
	if ran || run.CurrentState != "bad" {
		t.Errorf("an action past the bound ran (%v), state %s", ran, run.CurrentState)
	}
}

func ptrTo[T any](v T) *T { return &v }
