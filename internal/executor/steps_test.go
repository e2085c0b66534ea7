package executor

import (
	"reflect"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// Every answer from outside has one shape: the engine returns a step that
// names the request and changes nothing else; the driver brings the answer
// back in the ActionResult given to Complete, which then routes on it.
func TestAnswersFromOutsideAreSteps(t *testing.T) {
	t.Run("judge", func(t *testing.T) {
		spec := &v1alpha1.LoopSpec{Initial: "fix", States: map[string]v1alpha1.State{
			"fix":  {Action: "/fix the tests", OnSuccess: "done", OnFailure: "fix"},
			"done": {Terminal: true},
		}}
		m, run := startRun(t, "judged", spec, Options{})
		step, _ := m.Plan(run, t0)
		if step.Kind != StepAction || !step.Action.Agent {
			t.Fatalf("plan: %v", step.Kind)
		}
		res := &ActionResult{Output: "all green"}
		before := run.DeepCopy()
		ask, evs := m.Complete(run, res, t0)
		if ask.Kind != StepJudge || ask.Judge == nil || ask.Judge.Output != "all green" {
			t.Fatalf("complete: %v %+v", ask.Kind, ask.Judge)
		}
		if len(evs) != 0 || !reflect.DeepEqual(before, run) {
			t.Fatalf("asking the judge changed the run (%d events)", len(evs))
		}
		res.Judgement = &evaluate.Result{Verdict: "yes", Details: map[string]any{"reason": "green"}}
		next, evs := m.Complete(run, res, t0)
		if next.Kind != StepNext || run.CurrentState != "done" || run.LastResult.Verdict != "yes" {
			t.Fatalf("answered: %v, in %s, last %+v", next.Kind, run.CurrentState, run.LastResult)
		}
		if kinds := eventKinds(evs); !reflect.DeepEqual(kinds, []string{EventActionComplete, EventEvaluate, EventRoute}) {
			t.Errorf("events %v", kinds)
		}
	})
	t.Run("judge of a state without an action", func(t *testing.T) {
		spec := &v1alpha1.LoopSpec{Initial: "check", Context: map[string]apiextensionsJSON{"report": jsonValue("3 failing")},
			States: map[string]v1alpha1.State{
				"check": {Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalLLMStructured, Source: "${context.report}"}, OnSuccess: "done", OnFailure: "no"},
				"done":  {Terminal: true}, "no": {Terminal: true},
			}}
		m, run := startRun(t, "decide", spec, Options{})
		if step, _ := m.Plan(run, t0); step.Kind != StepEvaluate {
			t.Fatalf("plan: %v", step.Kind)
		}
		ask, _ := m.Complete(run, nil, t0)
		if ask.Kind != StepJudge || ask.Judge.Output != "3 failing" {
			t.Fatalf("complete: %v %+v", ask.Kind, ask.Judge)
		}
		m.Complete(run, &ActionResult{Judgement: &evaluate.Result{Verdict: "no"}}, t0)
		if run.CurrentState != "no" || run.Captured != nil {
			t.Errorf("in %s, captured %v", run.CurrentState, run.Captured)
		}
	})
	t.Run("sub-loop", func(t *testing.T) {
		m, run, step := startSubLoop(t, parentSpec(nil))
		if step.Loop == nil || step.Loop.Loop != "inner" {
			t.Fatalf("step %+v", step)
		}
		if again, evs := m.Plan(run, t0); again.Kind != StepLoop || len(evs) != 0 {
			t.Fatalf("planned again: %v with %d events", again.Kind, len(evs))
		}
		next, _ := m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal}}, t0)
		if next.Kind != StepNext || run.CurrentState != "done" {
			t.Fatalf("answered: %v, in %s", next.Kind, run.CurrentState)
		}
	})
	t.Run("approval", func(t *testing.T) {
		spec := &v1alpha1.LoopSpec{Initial: "ask", Context: map[string]apiextensionsJSON{"goal": jsonValue("v2")},
			States: map[string]v1alpha1.State{
				"ask": {Approval: &v1alpha1.Approval{Message: "ship ${context.goal}?", Timeout: dur(time.Hour)},
					Route: map[string]v1alpha1.StateName{"approved": "ship", "rejected": "stop", "timeout": "stop"}},
				"ship": {Terminal: true}, "stop": {Terminal: true},
			}}
		m, run := startRun(t, "gated", spec, Options{})
		step, evs := m.Plan(run, t0)
		if step.Kind != StepApproval || step.Approval.Message != "ship v2?" || !step.Approval.Deadline.Equal(t0.Add(time.Hour)) {
			t.Fatalf("plan: %v %+v", step.Kind, step.Approval)
		}
		if kinds := eventKinds(evs); kinds[len(kinds)-1] != EventApprovalRequested {
			t.Errorf("events %v", kinds)
		}
		if again, evs := m.Plan(run, t0.Add(time.Minute)); again.Kind != StepApproval || len(evs) != 0 {
			t.Fatalf("planned again: %v with %d events", again.Kind, len(evs))
		}
		before := run.DeepCopy()
		if wait, evs := m.Complete(run, nil, t0.Add(time.Minute)); wait.Kind != StepApproval || len(evs) != 0 || !reflect.DeepEqual(before, run) {
			t.Fatalf("no answer yet: %v, %d events, changed %v", wait.Kind, len(evs), !reflect.DeepEqual(before, run))
		}
		if evs, _ := m.Resume(run.DeepCopy(), t0); len(evs) != 1 {
			t.Errorf("resuming a wait restarts an action: %v", eventKinds(evs))
		}
		answered := run.DeepCopy()
		next, evs := m.Complete(answered, &ActionResult{Approval: &ApprovalAnswer{Approved: true, By: "ann", Message: "go"}}, t0.Add(time.Minute))
		if next.Kind != StepNext || answered.CurrentState != "ship" || answered.LastResult.Verdict != v1alpha1.VerdictApproved || answered.Action != nil {
			t.Fatalf("approved: %v, in %s, last %+v", next.Kind, answered.CurrentState, answered.LastResult)
		}
		if e := evs[0]; e.Type != EventApprovalAnswered || e.Data["by"] != "ann" || e.Data["message"] != "go" {
			t.Errorf("answer event %+v", e)
		}
		rejected := run.DeepCopy()
		m.Complete(rejected, &ActionResult{Approval: &ApprovalAnswer{}}, t0.Add(time.Minute))
		if rejected.CurrentState != "stop" || rejected.LastResult.Verdict != v1alpha1.VerdictRejected {
			t.Errorf("rejected: in %s, %+v", rejected.CurrentState, rejected.LastResult)
		}
		m.Complete(run, nil, t0.Add(time.Hour))
		if run.CurrentState != "stop" || run.LastResult.Verdict != v1alpha1.VerdictTimeout {
			t.Errorf("timed out: in %s, %+v", run.CurrentState, run.LastResult)
		}
	})
	t.Run("pattern search apart", func(t *testing.T) {
		spec := &v1alpha1.LoopSpec{Initial: "test", Context: map[string]apiextensionsJSON{"log": jsonValue("aaaa!")},
			States: map[string]v1alpha1.State{
				"test": {Action: "make test", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "PASS"},
					OnSuccess: "check", OnFailure: "no"},
				"check": {Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "(a+)+$", Source: "${context.log}"},
					OnSuccess: "no", OnFailure: "done"},
				"done": {Terminal: true}, "no": {Terminal: true},
			}}
		m, run := startRun(t, "searched", spec, Options{SearchApart: true})
		m.Plan(run, t0)
		res := &ActionResult{Output: "ok\nPASS\n"}
		before := run.DeepCopy()
		ask, evs := m.Complete(run, res, t0)
		if ask.Kind != StepSearch || ask.Search.Output != res.Output || ask.Search.Evaluate.Pattern != "PASS" {
			t.Fatalf("complete: %v %+v", ask.Kind, ask.Search)
		}
		if len(evs) != 0 || !reflect.DeepEqual(before, run) {
			t.Fatalf("asking for a search changed the run (%d events)", len(evs))
		}
		next, evs := m.Complete(run, Searched(res, ask.Search.Verdict()), t0)
		if next.Kind != StepNext || run.CurrentState != "check" || run.LastResult.Verdict != v1alpha1.VerdictSuccess {
			t.Fatalf("searched: %v, in %s, last %+v", next.Kind, run.CurrentState, run.LastResult)
		}
		if kinds := eventKinds(evs); !reflect.DeepEqual(kinds, []string{EventActionComplete, EventEvaluate, EventRoute}) {
			t.Errorf("events %v", kinds)
		}
		if step, _ := m.Plan(run, t0); step.Kind != StepEvaluate {
			t.Fatalf("plan: %v", step.Kind)
		}
		ask, _ = m.Complete(run, nil, t0)
		if ask.Kind != StepSearch || ask.Search.Output != "aaaa!" {
			t.Fatalf("a state without an action: %v %+v", ask.Kind, ask.Search)
		}
		m.Complete(run, Searched(nil, ask.Search.Verdict()), t0)
		if run.CurrentState != "done" || run.LastResult.Verdict != v1alpha1.VerdictFailure {
			t.Errorf("in %s, last %+v", run.CurrentState, run.LastResult)
		}
		local, lrun := startRun(t, "inline", spec, Options{})
		local.Plan(lrun, t0)
		if next, _ := local.Complete(lrun, &ActionResult{Output: "PASS"}, t0); next.Kind != StepNext || lrun.CurrentState != "check" {
			t.Errorf("without SearchApart the search runs in Complete: %v, in %s", next.Kind, lrun.CurrentState)
		}
	})
	t.Run("no judge needed", func(t *testing.T) {
		spec := &v1alpha1.LoopSpec{Initial: "fix", States: map[string]v1alpha1.State{
			"fix":  {Action: "/fix", OnSuccess: "done", OnError: "done", RetryPolicy: &v1alpha1.RetryPolicy{Limit: 2}},
			"done": {Terminal: true},
		}}
		m, run := startRun(t, "transient", spec, Options{})
		m.Plan(run, t0)
		lost := &ActionResult{ExitCode: -1, Failure: &ActionFailure{Reason: "PodDeleted", Transient: true}}
		if next, _ := m.Complete(run, lost, t0); next.Kind != StepNext || run.Retries != 1 {
			t.Errorf("a transient failure asked the judge (%v) or was not retried (%d)", next.Kind, run.Retries)
		}
	})
}

func eventKinds(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}
