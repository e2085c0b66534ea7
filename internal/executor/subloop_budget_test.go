package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A child's spend counts against its parent's budget: the child is given
// what is left as its own cap, its usage joins the parent's totals (under
// the sub-loop state), and the parent pauses before its next spending state.
func TestSubLoopSpendCountsAgainstTheParentsBudget(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "first", Budget: &v1alpha1.Budget{MaxCostUSD: "1.50", MaxTokens: i64(10000)},
		States: map[string]v1alpha1.State{
			"first":  {Loop: "inner", OnSuccess: "second"},
			"second": {Loop: "inner", OnSuccess: "done"},
			"done":   {Terminal: true},
		}}
	m, err := New("parent", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	m.Start(run, "parent-1", t0)
	step, _ := m.Plan(run, t0)
	if step.Kind != StepLoop || step.Loop.Budget == nil || step.Loop.Budget.MaxCostUSD != "1.50" || *step.Loop.Budget.MaxTokens != 10000 {
		t.Fatalf("first child's budget %+v", step.Loop.Budget)
	}
	child := v1alpha1.UsageTotals{Calls: 3, InputTokens: 4000, OutputTokens: 2000, CostMicroUSD: 1_200_000, Model: "claude-sonnet-4-6"}
	m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, Usage: &child}}, t0.Add(time.Second))
	first := run.Usage.States["first"]
	if u := run.Usage; u.CostMicroUSD != 1_200_000 || u.Calls != 3 || first.Tokens() != 6000 {
		t.Fatalf("parent usage %+v", run.Usage)
	}
	step, _ = m.Plan(run, t0.Add(2*time.Second))
	if step.Kind != StepLoop || step.Loop.Budget.MaxCostUSD != "0.30" || *step.Loop.Budget.MaxTokens != 4000 {
		t.Fatalf("second step %v in %s: %+v (%s %s)", step.Kind, run.CurrentState, step.Loop, run.TerminatedBy, run.Message)
	}
	child = v1alpha1.UsageTotals{Calls: 1, CostMicroUSD: 300_000}
	m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, Usage: &child}}, t0.Add(3*time.Second))
	if run.CurrentState != "done" || run.Usage.CostMicroUSD != 1_500_000 {
		t.Fatalf("in %s, spent %d", run.CurrentState, run.Usage.CostMicroUSD)
	}

	// Spent before a sub-loop: the parent pauses there, no child starts.
	spec.States["first"] = v1alpha1.State{Action: "true", Next: "second"}
	m, _ = New("parent", spec, Options{})
	run = &v1alpha1.RunState{}
	m.Start(run, "parent-2", t0)
	run.Usage = &v1alpha1.UsageStatus{UsageTotals: v1alpha1.UsageTotals{CostMicroUSD: 1_500_000}}
	step, _ = m.Plan(run, t0)
	m.Complete(run, &ActionResult{}, t0)
	if step, _ = m.Plan(run, t0.Add(time.Second)); step.Kind != StepPaused || run.CurrentState != "second" {
		t.Fatalf("step %v in %s, want paused before the sub-loop", step.Kind, run.CurrentState)
	}
}

func TestClampBudget(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Budget: &v1alpha1.Budget{MaxCostUSD: "2", MaxTokens: i64(100), OnExceeded: v1alpha1.BudgetRoute, State: "wrap"}}
	ClampBudget(spec, &v1alpha1.Budget{MaxCostUSD: "0.5", MaxTokens: i64(1000), OnExceeded: v1alpha1.BudgetPause})
	if b := spec.Budget; b.MaxCostUSD != "0.5" || *b.MaxTokens != 100 || b.OnExceeded != v1alpha1.BudgetRoute || b.State != "wrap" {
		t.Errorf("clamped %+v", b)
	}
	spec = &v1alpha1.LoopSpec{}
	ClampBudget(spec, &v1alpha1.Budget{MaxCostUSD: "0.5"})
	if spec.Budget == nil || spec.Budget.MaxCostUSD != "0.5" {
		t.Errorf("no budget of its own: %+v", spec.Budget)
	}
}
func i64(n int64) *int64 { return &n }
