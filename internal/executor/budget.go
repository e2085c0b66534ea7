package executor

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pricing"
)

// Events of budgets and cost ceilings (looprun's own).
const (
	// EventBudgetWarning: the run spent warnAt percent of a limit.
	EventBudgetWarning = "budget_warning"
	// EventBudgetExceeded: a state that spends was about to be entered
	// with the budget spent; data says what onExceeded did.
	EventBudgetExceeded = "budget_exceeded"
	// EventBudgetResumed: a paused run goes on, its budget raised.
	EventBudgetResumed = "budget_resumed"
	// EventCostCeiling: one visit of a state cost more than its costCeiling
	// (its verdict becomes error), or reached its warning.
	EventCostCeiling = "cost_ceiling"
)

// DefaultBudgetWarnAt is the share of a limit, in percent, at which a
// budget warns when spec.budget.warnAt is unset.
const DefaultBudgetWarnAt = 80

// limits is a run's budget as numbers. A limit of 0 is a limit: nothing
// may be spent (hasCost and hasTokens say whether there is one).
type limits struct {
	costMicro int64
	tokens    int64
	hasCost   bool
	hasTokens bool
	warnAt    int64
	onExceed  v1alpha1.BudgetAction
	state     string
}

// budget is the run's limits: spec.budget, and the run's own --max-cost
// (the lower cost limit wins).
func (t *turn) budget() limits { return budgetOf(t.m.spec, t.run) }

// budgetOf is the limits of a run of spec.
func budgetOf(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) limits {
	l := limits{warnAt: DefaultBudgetWarnAt, onExceed: v1alpha1.BudgetPause}
	if b := spec.Budget; b != nil {
		if b.MaxCostUSD != "" {
			l.costMicro, _ = pricing.ParseUSD(b.MaxCostUSD) // validated
			l.hasCost = true
		}
		if b.MaxTokens != nil {
			l.tokens, l.hasTokens = *b.MaxTokens, true
		}
		if b.WarnAt != nil {
			l.warnAt = int64(*b.WarnAt)
		}
		if b.OnExceeded != "" {
			l.onExceed = b.OnExceeded
		}
		l.state = b.State
	}
	if s := run.Budget; s != nil && s.RunMaxCostMicroUSD != nil {
		if run := *s.RunMaxCostMicroUSD; !l.hasCost || run < l.costMicro {
			l.costMicro, l.hasCost = run, true
		}
	}
	return l
}

// BudgetExceeded says what of the run's budget is spent once moreCostMicro
// and moreTokens are added to what the run recorded ("" when nothing is).
// The model gateway asks it before each model call of a step, with what
// the step's calls used so far: the budget bites in the middle of a step.
func BudgetExceeded(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState, moreCostMicro, moreTokens int64) string {
	cost, tokens := spent(run)
	return budgetOf(spec, run).exceeded(satAdd(cost, max(moreCostMicro, 0)), satAdd(tokens, max(moreTokens, 0)))
}

// spent is what the run used so far: its cost in millionths of a dollar
// and its tokens of every kind.
func spent(run *v1alpha1.RunState) (costMicro, tokens int64) {
	if u := run.Usage; u != nil {
		return u.CostMicroUSD, u.Tokens()
	}
	return 0, 0
}

// spends reports whether entering st may spend: an agent action, a
// learning gate (it runs the agent), the LLM judge, or a sub-loop (whose
// spend counts against this run's budget).
func (m *Machine) spends(st *v1alpha1.State) bool {
	return st.IsAgent() || st.Learning != nil || st.Loop != "" || (judgedByLLM(st) && m.spec.LLMEnabled() && st.Approval == nil)
}

// remaining is what is left of the cost limit, in millionths of a dollar,
// and whether there is a limit at all.
func (l limits) remaining(costMicro int64) (int64, bool) {
	if !l.hasCost {
		return 0, false
	}
	return max(l.costMicro-costMicro, 0), true
}

// exceeded says what of the budget is spent, "" when nothing is.
func (l limits) exceeded(costMicro, tokens int64) string {
	switch {
	case l.hasCost && costMicro >= l.costMicro:
		return fmt.Sprintf("spent $%s of its $%s budget", pricing.FormatUSD(costMicro), pricing.FormatUSD(l.costMicro))
	case l.hasTokens && tokens >= l.tokens:
		return fmt.Sprintf("used %d of its %d tokens", tokens, l.tokens)
	}
	return ""
}

// checkBudget runs before a state that spends is entered (or its action
// tried again). With the budget spent it does what onExceeded says:
// Pause holds the run (StepPaused), Stop ends it, Route moves it to
// budget.state (hopped; that state is then entered whatever it spends).
// A paused run whose budget was raised goes on. It also gives the
// warning at warnAt, once per limit.
func (t *turn) checkBudget(st *v1alpha1.State) (step Step, hopped, stop bool) {
	run := t.run
	l := t.budget()
	if !t.m.spends(st) || t.budgetRouted {
		t.resumeBudget(l)
		return Step{}, false, false
	}
	cost, tokens := spent(run)
	why := l.exceeded(cost, tokens)
	if why == "" {
		t.resumeBudget(l)
		t.warnBudget(l, cost, tokens)
		return Step{}, false, false
	}
	ev := BudgetExceededEvent{State: run.CurrentState, CostUSD: pricing.MicroToUSD(cost), Tokens: tokens,
		Action: string(l.onExceed), Reason: why}
	ev.MaxCostUSD, ev.MaxTokens = l.set()
	msg := fmt.Sprintf("the run %s before state %s", why, run.CurrentState)
	switch l.onExceed {
	case v1alpha1.BudgetStop:
		t.emit(EventBudgetExceeded, ev.Data())
		t.budgetStatus().Exceeded = msg
		t.finish(v1alpha1.TerminatedBudgetExceeded, msg)
		return Step{Kind: StepDone}, false, true
	case v1alpha1.BudgetRoute:
		ev.Next = l.state
		t.emit(EventBudgetExceeded, ev.Data())
		t.budgetRouted = true
		if !t.transition(l.state, "budget_exceeded") {
			return Step{Kind: StepDone}, false, true
		}
		return Step{}, true, false
	}
	if run.Phase != v1alpha1.PhasePaused {
		t.emit(EventBudgetExceeded, ev.Data())
		run.Phase = v1alpha1.PhasePaused
		t.budgetStatus().Exceeded = msg
	}
	return Step{Kind: StepPaused, Paused: msg}, false, true
}

// resumeBudget lets a paused run go on: its budget was raised, or the
// state it waits to enter no longer spends.
func (t *turn) resumeBudget(l limits) {
	run := t.run
	if run.Phase != v1alpha1.PhasePaused {
		return
	}
	run.Phase = v1alpha1.PhaseRunning
	ev := BudgetResumedEvent{State: run.CurrentState}
	ev.MaxCostUSD, ev.MaxTokens = l.set()
	t.emit(EventBudgetResumed, ev.Data())
	run.Budget.Exceeded = ""
}

// warnBudget gives the warning of a limit warnAt percent spent, once per
// limit: raising the limit arms it again.
func (t *turn) warnBudget(l limits, cost, tokens int64) {
	var key string
	ev := BudgetWarningEvent{State: t.run.CurrentState, WarnAtPercent: l.warnAt}
	switch {
	case l.costMicro > 0 && reached(cost, l.costMicro, l.warnAt):
		key = "cost:" + strconv.FormatInt(l.costMicro, 10)
		ev.CostUSD, ev.MaxCostUSD = pricing.MicroToUSD(cost), pricing.MicroToUSD(l.costMicro)
	case l.tokens > 0 && reached(tokens, l.tokens, l.warnAt):
		key = "tokens:" + strconv.FormatInt(l.tokens, 10)
		ev.Tokens, ev.MaxTokens = tokens, l.tokens
	default:
		return
	}
	if s := t.run.Budget; s != nil && s.Warned == key {
		return
	}
	t.budgetStatus().Warned = key
	t.emit(EventBudgetWarning, ev.Data())
}

// reached says whether spent is at least percent of limit, without the
// products overflowing (a limit or a count may be near the largest int64).
func reached(spent, limit, percent int64) bool {
	return float64(spent)*100 >= float64(limit)*float64(percent)
}

// set are the limits the spec sets, as the budget's events tell them
// (nil for one it does not).
func (l limits) set() (maxCostUSD *float64, maxTokens *int64) {
	if l.hasCost {
		c := pricing.MicroToUSD(l.costMicro)
		maxCostUSD = &c
	}
	if l.hasTokens {
		n := l.tokens
		maxTokens = &n
	}
	return maxCostUSD, maxTokens
}

// PausedWhy says what a run paused on its budget spent of which limit.
func PausedWhy(run *v1alpha1.RunState) string {
	if run.Budget != nil && run.Budget.Exceeded != "" {
		return run.Budget.Exceeded
	}
	return "its budget is spent"
}

func (t *turn) budgetStatus() *v1alpha1.BudgetStatus {
	if t.run.Budget == nil {
		t.run.Budget = &v1alpha1.BudgetStatus{}
	}
	return t.run.Budget
}

// agentBudget is the most the agent of an action about to start may
// spend, in millionths of a dollar: what is left of the run's budget and
// the state's cost ceiling, the lower; ok is false with neither.
func (t *turn) agentBudget(st *v1alpha1.State) (micro int64, ok bool) {
	cost, _ := spent(t.run)
	micro, ok = t.budget().remaining(cost)
	if c := st.CostCeiling; c != nil && c.MaxCostUSD != "" {
		if ceiling, err := pricing.ParseUSD(c.MaxCostUSD); err == nil && (!ok || ceiling < micro) {
			micro, ok = ceiling, true
		}
	}
	return micro, ok
}

// overCeiling checks the visit of st that just completed against its
// cost ceiling: over it, the verdict becomes error (with why); at its
// warning, an event. t.visitCost is what the visit's action and judge
// cost.
func (t *turn) overCeiling(st *v1alpha1.State) (string, bool) {
	c := st.CostCeiling
	if c == nil || t.visitCost == 0 {
		return "", false
	}
	state := t.run.CurrentState
	ev := CostCeilingEvent{State: state, CostUSD: pricing.MicroToUSD(t.visitCost)}
	if c.MaxCostUSD != "" {
		if ceiling, err := pricing.ParseUSD(c.MaxCostUSD); err == nil && t.visitCost > ceiling {
			why := fmt.Sprintf("state %s cost $%s this visit, over its cost ceiling of $%s", state, pricing.FormatUSD(t.visitCost), pricing.FormatUSD(ceiling))
			ev.CeilingUSD, ev.Exceeded = pricing.MicroToUSD(ceiling), true
			t.emit(EventCostCeiling, ev.Data())
			return why, true
		}
	}
	if c.WarnAtUSD != "" {
		if warn, err := pricing.ParseUSD(c.WarnAtUSD); err == nil && t.visitCost >= warn {
			ev.WarnAtUSD = pricing.MicroToUSD(warn)
			t.emit(EventCostCeiling, ev.Data())
		}
	}
	return "", false
}

// validateBudget checks spec.budget and the states' cost ceilings.
func validateBudget(spec *v1alpha1.LoopSpec, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	usd := func(p *field.Path, s string) {
		if s == "" {
			return
		}
		if _, err := pricing.ParseUSD(s); err != nil {
			errs = append(errs, field.Invalid(p, s, err.Error()))
		}
	}
	if b := spec.Budget; b != nil {
		p := root.Child("budget")
		usd(p.Child("maxCostUSD"), b.MaxCostUSD)
		if b.MaxCostUSD == "" && b.MaxTokens == nil {
			errs = append(errs, field.Required(p, "a budget needs maxCostUSD or maxTokens"))
		}
		if b.MaxTokens != nil && *b.MaxTokens < 0 {
			errs = append(errs, field.Invalid(p.Child("maxTokens"), *b.MaxTokens, "must be 0 (none may be used) or more"))
		}
		if b.WarnAt != nil && (*b.WarnAt < 1 || *b.WarnAt > 100) {
			errs = append(errs, field.Invalid(p.Child("warnAt"), *b.WarnAt, "must be a percentage from 1 to 100"))
		}
		switch b.OnExceeded {
		case "", v1alpha1.BudgetPause, v1alpha1.BudgetStop:
			if b.State != "" {
				errs = append(errs, field.Invalid(p.Child("state"), b.State, "is where onExceeded Route goes: set onExceeded: Route"))
			}
		case v1alpha1.BudgetRoute:
			if _, ok := spec.States[b.State]; !ok {
				errs = append(errs, field.NotFound(p.Child("state"), b.State))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("onExceeded"), b.OnExceeded, []string{"Pause", "Stop", "Route"}))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.States)) {
		if c := spec.States[name].CostCeiling; c != nil {
			p := root.Child("states").Key(name).Child("costCeiling")
			usd(p.Child("maxCostUSD"), c.MaxCostUSD)
			usd(p.Child("warnAtUSD"), c.WarnAtUSD)
		}
	}
	return errs
}
