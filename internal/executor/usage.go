package executor

import (
	"math"
	"sync"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/pricing"
)

var defaultPrices = sync.OnceValue(pricing.Default)

// Prices is the machine's price table.
func (m *Machine) Prices() *pricing.Table {
	if m.opts.Prices != nil {
		return m.opts.Prices
	}
	return defaultPrices()
}

// ReasonInvalidUsage is the failure of an action whose reported usage
// fails agentstream.Usage.Check.
const ReasonInvalidUsage = "InvalidUsage"

// checkUsage checks what an action (or the judge) reported it used, where
// it enters the engine: a result whose usage fails the check becomes a
// failure of the action (its verdict error), the usage not counted; a
// judge's answer with such usage becomes an error verdict. Nothing is
// priced before it is checked.
func checkUsage(res *ActionResult) *ActionResult {
	if res == nil {
		return nil
	}
	check := func(u *agentstream.Usage) error {
		if u == nil {
			return nil
		}
		return u.Check()
	}
	actionErr := check(res.Usage)
	if res.Metered != nil && actionErr != nil {
		// What the agent printed is only kept beside the gateway's
		// count: a false one is dropped, the step is not failed for it.
		c := *res
		c.Usage, actionErr = nil, nil
		res = &c
	}
	if res.Metered != nil {
		if err := check(&res.Metered.Usage); err != nil {
			actionErr = err
		}
	}
	var judgeErr error
	if res.Judgement != nil {
		judgeErr = check(res.Judgement.Usage)
	}
	if actionErr == nil && judgeErr == nil {
		return res
	}
	c := *res
	if actionErr != nil {
		c.Usage, c.Metered = nil, nil
		if c.Failure == nil {
			c.Failure = &ActionFailure{Reason: ReasonInvalidUsage, Message: actionErr.Error()}
		}
	}
	if judgeErr != nil {
		c.Judgement = &evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{
			"reason": ReasonInvalidUsage, "error": "the judge's call: " + judgeErr.Error()}}
	}
	return &c
}

// recordUsage prices what one agent action or judge call used, adds it to
// the run's totals, and returns it as its event tells it (little-loops'
// token keys, and cost_usd when the price table prices its model).
func (t *turn) recordUsage(u agentstream.Usage) *EventUsage {
	cost, priced := t.m.Prices().CostMicroUSD(u)
	if priced {
		t.visitCost = satAdd(t.visitCost, cost)
	}
	t.run.Usage = addTotals(t.run.Usage, t.run.CurrentState, oneCall(u, cost, priced))
	return eventUsage(u, cost, priced)
}

// recordMetered adds what the gateway counted for an action to the run's
// totals, and what the agent reported (r, nil for nothing) to the
// reported totals beside them; it returns both as the event tells them.
func (t *turn) recordMetered(m Metered, r *agentstream.Usage) (metered, reported *EventUsage) {
	t.visitCost = satAdd(t.visitCost, m.CostMicroUSD)
	one := oneCall(m.Usage, m.CostMicroUSD, true)
	one.Calls, one.UnpricedCalls = m.Calls, m.Unpriced
	t.run.Usage = addTotals(t.run.Usage, t.run.CurrentState, one)
	metered = eventUsage(m.Usage, m.CostMicroUSD, m.Calls > m.Unpriced)
	if r == nil {
		return metered, nil
	}
	cost, priced := t.m.Prices().CostMicroUSD(*r)
	rep := oneCall(*r, cost, priced)
	rep.UnpricedCalls = 0 // the reported totals count calls, not prices
	if t.run.Usage.Reported == nil {
		t.run.Usage.Reported = &v1alpha1.UsageTotals{}
	}
	addTo(t.run.Usage.Reported, rep)
	return metered, eventUsage(*r, cost, priced)
}

// oneCall is one agent action's (or call's) usage as a run's totals count
// it: its cost when priced, else one unpriced call.
func oneCall(u agentstream.Usage, costMicro int64, priced bool) v1alpha1.UsageTotals {
	one := v1alpha1.UsageTotals{Calls: 1, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadTokens, CacheCreationTokens: u.CacheCreationTokens,
		CLICostMicroUSD: int64(math.Round(u.CLICostUSD * 1e6)), Model: u.Model}
	if priced {
		one.CostMicroUSD = costMicro
	} else {
		one.UnpricedCalls = 1
	}
	return one
}

// eventUsage is u as its event tells it.
func eventUsage(u agentstream.Usage, costMicro int64, priced bool) *EventUsage {
	return &EventUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
		CacheCreationTokens: u.CacheCreationTokens, CostUSD: pricing.MicroToUSD(costMicro), Priced: priced}
}

// addTotals adds c to the run's totals and to its state's.
func addTotals(s *v1alpha1.UsageStatus, state string, c v1alpha1.UsageTotals) *v1alpha1.UsageStatus {
	if s == nil {
		s = &v1alpha1.UsageStatus{}
	}
	addTo(&s.UsageTotals, c)
	if s.States == nil {
		s.States = map[string]v1alpha1.UsageTotals{}
	}
	t := s.States[state]
	addTo(&t, c)
	s.States[state] = t
	return s
}

// addTo adds c to t.
func addTo(t *v1alpha1.UsageTotals, c v1alpha1.UsageTotals) {
	t.Calls = satAdd(t.Calls, c.Calls)
	t.InputTokens = satAdd(t.InputTokens, c.InputTokens)
	t.OutputTokens = satAdd(t.OutputTokens, c.OutputTokens)
	t.CacheReadTokens = satAdd(t.CacheReadTokens, c.CacheReadTokens)
	t.CacheCreationTokens = satAdd(t.CacheCreationTokens, c.CacheCreationTokens)
	t.CostMicroUSD = satAdd(t.CostMicroUSD, c.CostMicroUSD)
	t.UnpricedCalls = satAdd(t.UnpricedCalls, c.UnpricedCalls)
	t.CLICostMicroUSD = satAdd(t.CLICostMicroUSD, c.CLICostMicroUSD)
	if c.Model != "" {
		t.Model = c.Model
	}
}

// satAdd adds, stopping at the largest int64 instead of wrapping (a CLI's
// figures are not to be trusted to be sane).
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 {
		return a // a negative count is nonsense: ignored
	}
	return a + b
}
