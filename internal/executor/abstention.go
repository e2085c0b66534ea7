package executor

import (
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The abstention hold: a verdict of cannot_judge (or cannot_judge_...,
// say cannot_judge_uncertain) that the state does not route by name runs
// the state again, at most abstentionHolds times in a row, then takes the
// error route, never the default one (_) nor the failure one, as
// little-loops holds an abstaining judge or classify line.
const (
	verdictCannotJudge = "cannot_judge"
	abstentionHolds    = 2
	// abstentionKey prefixes the hold counts in the run's stall counters.
	abstentionKey = "abstention/"
)

// isAbstention reports whether verdict says the judge could not judge.
func isAbstention(verdict string) bool {
	return verdict == verdictCannotJudge || strings.HasPrefix(verdict, verdictCannotJudge+"_")
}

// abstentionTarget is where an abstaining verdict goes: handled reports
// false when the state routes it by name (or it is no abstention), and the
// run routes as usual. target is the state itself while the hold lasts,
// then the error route ("" for none: the run ends, no route).
func (t *turn) abstentionTarget(st *v1alpha1.State, verdict string) (target string, handled bool) {
	key := abstentionKey + t.run.CurrentState
	if _, declared := st.Route[verdict]; declared || !isAbstention(verdict) {
		delete(t.run.Stalls, key)
		return "", false
	}
	if t.run.Stalls == nil {
		t.run.Stalls = map[string]v1alpha1.StallCounter{}
	}
	c := t.run.Stalls[key]
	if c.Count < abstentionHolds {
		c.Count++
		t.run.Stalls[key] = c
		return v1alpha1.CurrentStateToken, true
	}
	delete(t.run.Stalls, key)
	if target, ok := st.Route["_error"]; ok {
		return string(target), true
	}
	if routeTable(st) {
		return "", true
	}
	return st.OnError, true
}

// routeTable reports whether the state routes by a table alone (a
// little-loops route:, whose error fallback is _error only).
func routeTable(st *v1alpha1.State) bool {
	return len(st.Route) > 0 && st.OnSuccess == "" && st.OnFailure == "" && st.OnError == ""
}
