package executor

import (
	"fmt"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pricing"
)

// subLoopBudget is what is left of the run's budget, to cap its child's:
// nil when the run has none. A child cannot route to its parent's states,
// so a parent that routes on a spent budget stops its child instead (the
// parent routes on its own next check).
func (t *turn) subLoopBudget() *v1alpha1.Budget {
	l := t.budget()
	if !l.hasCost && !l.hasTokens {
		return nil
	}
	cost, tokens := spent(t.run)
	b := &v1alpha1.Budget{OnExceeded: v1alpha1.BudgetPause}
	if l.onExceed != v1alpha1.BudgetPause {
		b.OnExceeded = v1alpha1.BudgetStop
	}
	if l.hasCost {
		b.MaxCostUSD = pricing.FormatUSD(max(l.costMicro-cost, 0))
	}
	if l.hasTokens {
		left := max(l.tokens-tokens, 0)
		b.MaxTokens = &left
	}
	if sb := t.m.spec.Budget; sb != nil {
		b.WarnAt = sb.WarnAt
	}
	return b
}

// ClampBudget caps a child's budget at what its parent has left (nil: no
// cap). The lower of each limit wins; a child without a budget of its own
// takes the parent's rest whole.
func ClampBudget(spec *v1alpha1.LoopSpec, limit *v1alpha1.Budget) {
	if limit == nil {
		return
	}
	if spec.Budget == nil {
		spec.Budget = limit.DeepCopy()
		return
	}
	b := spec.Budget
	if limit.MaxCostUSD != "" {
		own, err := pricing.ParseUSD(b.MaxCostUSD)
		left, _ := pricing.ParseUSD(limit.MaxCostUSD)
		if b.MaxCostUSD == "" || err != nil || left < own {
			b.MaxCostUSD = limit.MaxCostUSD
		}
	}
	if limit.MaxTokens != nil && (b.MaxTokens == nil || *limit.MaxTokens < *b.MaxTokens) {
		b.MaxTokens = limit.MaxTokens
	}
}

// addChildUsage adds what a sub-loop's child used to the run's totals and
// to the sub-loop state's: a parent's budget counts its children's spend.
func addChildUsage(s *v1alpha1.UsageStatus, state string, c v1alpha1.UsageTotals) *v1alpha1.UsageStatus {
	if c.Calls == 0 && c.Tokens() == 0 && c.CostMicroUSD == 0 {
		return s
	}
	return addTotals(s, state, c)
}

// ChildPaused holds the run while the child of its sub-loop state is paused
// on its budget (the share of this run's budget it was given, or its own):
// the run is Paused with why, until the child goes on (ChildResumed) or
// ends. It changes nothing when the run is paused already.
func (m *Machine) ChildPaused(run *v1alpha1.RunState, child, why string, now time.Time) []Event {
	if run.Phase != v1alpha1.PhaseRunning || run.Action == nil {
		return nil
	}
	t := m.begin(run, now)
	msg := fmt.Sprintf("the sub-loop %s of state %s paused: %s", child, run.CurrentState, why)
	t.emit(EventBudgetExceeded, BudgetExceededEvent{State: run.CurrentState, Action: string(v1alpha1.BudgetPause), Reason: msg, Child: child}.Data())
	run.Phase = v1alpha1.PhasePaused
	t.budgetStatus().Exceeded = msg
	return t.done()
}

// ChildResumed lets a run held by its paused child go on: the child runs
// again. It changes nothing when the run is not paused.
func (m *Machine) ChildResumed(run *v1alpha1.RunState, now time.Time) []Event {
	if run.Phase != v1alpha1.PhasePaused || run.Action == nil {
		return nil
	}
	t := m.begin(run, now)
	t.resumeBudget(t.budget())
	return t.done()
}
