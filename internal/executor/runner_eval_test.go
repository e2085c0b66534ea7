package executor

import (
	"reflect"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The evaluator handed to a runner has its templates expanded, and is
// withheld when judging must wait for values only known afterwards.
func TestRunnerEvaluate(t *testing.T) {
	cases := []struct {
		name     string
		eval     *v1alpha1.Evaluate
		next     string
		want     bool
		target   string
		previous string
	}{
		{name: "none", eval: nil},
		{name: "exit code", eval: &v1alpha1.Evaluate{Type: "exit_code"}, want: true},
		{name: "llm", eval: &v1alpha1.Evaluate{Type: "llm_structured"}},
		{name: "next state", eval: &v1alpha1.Evaluate{Type: "exit_code"}, next: "done"},
		{name: "source", eval: &v1alpha1.Evaluate{Type: "output_contains", Source: "${prev.output}", Pattern: "x"}},
		{name: "context target", eval: &v1alpha1.Evaluate{Type: "output_numeric", Target: jsp("${context.goal}")}, want: true, target: `"10"`},
		{name: "number target", eval: &v1alpha1.Evaluate{Type: "output_numeric", Target: jsp(3)}, want: true, target: `3`},
		{name: "prev target", eval: &v1alpha1.Evaluate{Type: "output_numeric", Target: jsp("${prev.output}")}},
		{name: "elapsed target", eval: &v1alpha1.Evaluate{Type: "output_numeric", Target: jsp("${loop.elapsed_ms}")}},
		{name: "missing variable", eval: &v1alpha1.Evaluate{Type: "output_numeric", Target: jsp("${context.nope}")}},
		{name: "previous from context", eval: &v1alpha1.Evaluate{Type: "convergence", Target: jsp(0), Previous: "${context.goal}"}, want: true, target: "0", previous: "10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := v1alpha1.State{Action: "measure", Evaluate: tc.eval, OnSuccess: "done", OnFailure: "done", OnError: "done", Next: tc.next}
			if tc.next != "" {
				st.OnSuccess, st.OnFailure = "", ""
			}
			spec := &v1alpha1.LoopSpec{Initial: "a", Context: map[string]apiextensionsv1.JSON{"goal": jsonValue("10")},
				States: map[string]v1alpha1.State{"a": st, "done": {Terminal: true}}}
			before := tc.eval.DeepCopy()
			m, run := startRun(t, "test", spec, Options{})
			step, _ := m.Plan(run, t0)
			got := step.Action.Evaluate
			if (got != nil) != tc.want {
				t.Fatalf("evaluate %+v, want present=%v", got, tc.want)
			}
			if got == nil {
				return
			}
			if tc.target != "" && string(got.Target.Raw) != tc.target {
				t.Errorf("target %s, want %s", got.Target.Raw, tc.target)
			}
			if got.Previous != tc.previous {
				t.Errorf("previous %q, want %q", got.Previous, tc.previous)
			}
			if !reflect.DeepEqual(spec.States["a"].Evaluate, before) {
				t.Error("the spec was changed")
			}
			// Planned again while in flight (after a restart), the same evaluator.
			again, _ := m.Plan(run, t0.Add(time.Minute))
			if again.Action.Evaluate == nil || !reflect.DeepEqual(again.Action.Evaluate, got) {
				t.Errorf("re-planned evaluate %+v", again.Action.Evaluate)
			}
		})
	}
}

// An action that did not run to its end gives an error verdict with the
// reason, routed by onError; a next state without onError ends the run.
func TestActionFailure(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":       {Action: "step", OnSuccess: "done", OnError: "handled"},
		"b":       {Action: "step", Next: "done"},
		"done":    {Terminal: true},
		"handled": {Terminal: true},
	}}
	fail := ActionResult{ExitCode: -1, Stderr: "gone", Failure: &ActionFailure{Reason: "PodDeleted", Message: "the pod was deleted"}}
	acts := &fakeActions{results: map[string][]ActionResult{"step": {fail}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "handled" || r.run.LastResult.Verdict != "error" {
		t.Fatalf("state %s, last result %+v", r.run.CurrentState, r.run.LastResult)
	}
	if got := string(r.run.LastResult.Details.Raw); got != `{"error":"the pod was deleted","reason":"PodDeleted"}` {
		t.Errorf("details %s", got)
	}
	var complete *Event
	for i := range r.events {
		if r.events[i].Type == EventActionComplete {
			complete = &r.events[i]
		}
	}
	if complete == nil || complete.Data["failure"] != "PodDeleted" {
		t.Errorf("action_complete %+v", complete)
	}

	spec.Initial = "b"
	acts = &fakeActions{results: map[string][]ActionResult{"step": {fail}}}
	r = runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Message != `state "b": PodDeleted: the pod was deleted` {
		t.Errorf("terminatedBy %s, message %q", r.run.TerminatedBy, r.run.Message)
	}
	// A failure beats a verdict the runner computed.
	m, run := startRun(t, "test", fixSpec(), Options{})
	m.Plan(run, t0)
	m.Complete(run, &ActionResult{Verdict: &evaluateResult{Verdict: "success"}, Failure: fail.Failure}, t0)
	if run.LastResult.Verdict != "error" {
		t.Errorf("verdict %s", run.LastResult.Verdict)
	}
}
