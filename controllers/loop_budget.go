package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/internal/executor"
)

// announceBudget emits the Kubernetes Event of a budget warning, a pause
// or stop on a spent budget, a paused Loop going on, or a visit over its
// state's cost ceiling.
func (s *step) announceBudget(ctx context.Context, e executor.Event) {
	state, _ := e.Data["state"].(string)
	switch e.Type {
	case executor.EventBudgetWarning:
		s.r.event(s.loop, corev1.EventTypeWarning, "BudgetWarning", "Spend", "the run spent %s before state %s", spendOf(e.Data), state)
	case executor.EventBudgetExceeded:
		reason, _ := e.Data["reason"].(string)
		action, _ := e.Data["action"].(string)
		log.FromContext(ctx).Info("Budget spent", "state", state, "onExceeded", action, "spent", reason)
		s.r.event(s.loop, corev1.EventTypeWarning, "BudgetExceeded", action, "the run %s before state %s (%s): raise spec.budget to go on", reason, state, spendOf(e.Data))
	case executor.EventBudgetResumed:
		s.r.event(s.loop, corev1.EventTypeNormal, "BudgetRaised", "Resume", "the budget was raised; the run goes on in state %s", state)
	case executor.EventCostCeiling:
		if over, _ := e.Data["exceeded"].(bool); over {
			s.r.event(s.loop, corev1.EventTypeWarning, "CostCeiling", "Escalate", "state %s cost $%v this visit, over its cost ceiling of $%v: its verdict is error", state, e.Data["cost_usd"], e.Data["cost_ceiling_usd"])
		} else {
			s.r.event(s.loop, corev1.EventTypeWarning, "CostWarning", "Spend", "state %s cost $%v this visit (warning at $%v)", state, e.Data["cost_usd"], e.Data["cost_warn_at_usd"])
		}
	}
}

// spendOf says what a budget event's data spent of which limit.
func spendOf(d map[string]any) string {
	out := ""
	if limit, ok := d["max_cost_usd"]; ok {
		out = fmt.Sprintf("$%v of $%v", d["cost_usd"], limit)
	}
	if limit, ok := d["max_tokens"]; ok {
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%v of %v tokens", d["tokens"], limit)
	}
	return out
}
