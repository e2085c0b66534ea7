package executor

import (
	"cmp"
	"fmt"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Events of the throttle, as little-loops writes them.
const (
	EventThrottleWarn = "throttle_warn"
	EventThrottleHard = "throttle_hard"
	EventThrottleStop = "throttle_stop"
)

// throttled applies the state's throttle once its action ran: the n-th
// run in a row (n counts the state's consecutive visits) is warned about
// at warnMax, sent to onThrottleHard (else onError) at hardMax, and past
// it ends the loop. It reports true when the state is done with.
func (t *turn) throttled(st *v1alpha1.State) bool {
	count, warnMax, hardMax, ok := t.throttleCount(st)
	if !ok {
		return false
	}
	state := t.run.CurrentState
	if count == warnMax {
		t.emit(EventThrottleWarn, ThrottleWarnEvent{State: state, Count: count, WarnMax: warnMax, HardMax: hardMax}.Data())
	}
	switch {
	case count == hardMax:
		next := cmp.Or(st.OnThrottleHard, st.OnError)
		t.emit(EventThrottleHard, ThrottleHardEvent{State: state, Count: count, HardMax: hardMax, Next: next}.Data())
		if next == "" {
			return false
		}
		t.transition(next, "")
		return true
	case count > hardMax:
		t.emit(EventThrottleStop, ThrottleStopEvent{State: state, Count: count, HardMax: hardMax}.Data())
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("Throttle stop: state '%s' exceeded hard_max=%d tool calls with no on_throttle_hard target", state, hardMax))
		return true
	}
	return false
}

// throttleCount is the state's run in a row that its action just ended,
// and the throttle's limits; ok is false when no throttle applies.
func (t *turn) throttleCount(st *v1alpha1.State) (count, warnMax, hardMax int32, ok bool) {
	th := st.Throttle
	if st.Learning != nil {
		return 0, 0, 0, false // a learning gate is bounded by its maxRetries
	}
	if th == nil {
		th = t.m.spec.Throttle
	}
	if th == nil {
		return 0, 0, 0, false
	}
	warnMax, hardMax = v1alpha1.DefaultThrottleWarnMax, v1alpha1.DefaultThrottleHardMax
	if th.WarnMax != nil {
		warnMax = *th.WarnMax
	}
	if th.HardMax != nil {
		hardMax = *th.HardMax
	}
	return t.run.RetryCounts[t.run.CurrentState] + 1, warnMax, hardMax, true
}

// throttleEnds reports whether the throttle ends the state its action just
// ended (throttled then returns true without judging it).
func (t *turn) throttleEnds(st *v1alpha1.State) bool {
	count, _, hardMax, ok := t.throttleCount(st)
	return ok && (count > hardMax || count == hardMax && cmp.Or(st.OnThrottleHard, st.OnError) != "")
}
