package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// announceBudget emits the Kubernetes Event of a budget warning, a pause
// or stop on a spent budget, a paused Loop going on, or a visit over its
// state's cost ceiling.
func (s *step) announceBudget(ctx context.Context, e executor.Event) {
	switch e.Type {
	case executor.EventBudgetWarning:
		w := executor.BudgetWarningOf(e)
		spent := fmt.Sprintf("%v of %v tokens", w.Tokens, w.MaxTokens)
		if w.MaxCostUSD > 0 {
			spent = fmt.Sprintf("$%v of $%v", w.CostUSD, w.MaxCostUSD)
		}
		s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonBudgetWarning, "Spend", "the run spent %s before state %s", spent, w.State)
	case executor.EventBudgetExceeded:
		x := executor.BudgetExceededOf(e)
		log.FromContext(ctx).Info("Budget spent", "state", x.State, "onExceeded", x.Action, "spent", x.Reason)
		s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonBudgetExceeded, x.Action, "the run %s before state %s (%s): raise spec.budget to go on", x.Reason, x.State, spendOf(x))
	case executor.EventBudgetResumed:
		s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonBudgetRaised, "Resume", "the budget was raised; the run goes on in state %s", executor.BudgetResumedOf(e).State)
	case executor.EventCostCeiling:
		c := executor.CostCeilingOf(e)
		if c.Exceeded {
			s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonCostCeiling, "Escalate", "state %s cost $%v this visit, over its cost ceiling of $%v: its verdict is error", c.State, c.CostUSD, c.CeilingUSD)
		} else {
			s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonCostWarning, "Spend", "state %s cost $%v this visit (warning at $%v)", c.State, c.CostUSD, c.WarnAtUSD)
		}
	}
}

// spendOf says what the run spent of which limit when its budget was
// exceeded.
func spendOf(x executor.BudgetExceededEvent) string {
	out := ""
	if x.MaxCostUSD != nil {
		out = fmt.Sprintf("$%v of $%v", x.CostUSD, *x.MaxCostUSD)
	}
	if x.MaxTokens != nil {
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%d of %d tokens", x.Tokens, *x.MaxTokens)
	}
	return out
}
