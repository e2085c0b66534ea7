package executor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Event types, as little-loops writes them.
const (
	EventLoopStart       = "loop_start"
	EventLoopResume      = "loop_resume"
	EventStateEnter      = "state_enter"
	EventActionStart     = "action_start"
	EventActionComplete  = "action_complete"
	EventActionRestarted = "action_restarted"
	EventActionError     = "action_error"
	EventEvaluate        = "evaluate"
	EventRoute           = "route"
	EventRetryExhausted  = "retry_exhausted"
	EventActionRetry     = "action_retry"
	EventCycleDetected   = "cycle_detected"
	EventLoopComplete    = "loop_complete"
	EventSpecChanged     = "spec_changed"
	// EventLoopFork: the run started from another loop's checkpoint.
	EventLoopFork = "loop_fork"
	// EventLoopRewind: the run went back to one of its own checkpoints.
	EventLoopRewind = "loop_rewind"
	// EventCaptureTruncated: a capture keeps less than the action printed
	// (the per-capture bound, or the run state's budget for captures).
	EventCaptureTruncated = "capture_truncated"
	// EventHandoffDetected: an action printed CONTEXT_HANDOFF:; the run
	// pauses (state, iteration, continuation).
	EventHandoffDetected = "handoff_detected"
	// EventMaxStepsSummary: the run reached maxIterations and runs its
	// onMaxIterations state before it ends.
	EventMaxStepsSummary = "max_steps_summary"
	// EventMaxPassesSummary: a maintain loop reached maxPasses and runs its
	// onMaxPasses state before it ends.
	EventMaxPassesSummary = "max_iterations_reached_summary"
)

// EventTypes are the types of the events the engine writes.
var EventTypes = []string{
	EventLoopStart, EventLoopResume, EventStateEnter, EventActionStart, EventActionComplete, EventActionRestarted,
	EventActionError, EventEvaluate, EventRoute, EventRetryExhausted, EventActionRetry, EventCycleDetected,
	EventLoopComplete, EventSpecChanged, EventLoopFork, EventLoopRewind, EventCaptureTruncated,
	EventApprovalRequested, EventApprovalAnswered, EventStallDetected,
	EventLearningTargetStale, EventLearningExploreInvoked, EventLearningTargetProven, EventLearningTargetRefuted,
	EventLearningBlocked, EventLearningComplete, EventSubLoopStart, EventSubLoopComplete,
	EventThrottleWarn, EventThrottleHard, EventThrottleStop, EventHandoffDetected, EventMessagesAppend,
	EventRateLimitWaiting, EventRateLimitExhausted, EventRateLimitStorm, EventAPIErrorRetry, EventAPIErrorExhausted,
	EventInfraRetry, EventInfraRetryExhausted,
	EventBudgetWarning, EventBudgetExceeded, EventBudgetResumed, EventCostCeiling, EventGitClone,
	EventMaxStepsSummary, EventMaxPassesSummary,
}

// Event is one entry of a loop's event log. Seq numbers events of a run from 1
// without gaps, so an append that is repeated can be recognised and skipped.
type Event struct {
	Seq  int64
	Type string
	Time time.Time
	Data map[string]any
}

// MarshalJSON writes {"event": ..., "seq": ..., "ts": ..., <data>}.
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"event":`)
	t, err := MarshalJSON(e.Type)
	if err != nil {
		return nil, err
	}
	b.Write(t)
	fmt.Fprintf(&b, `,"seq":%d,"ts":"%s"`, e.Seq, e.Time.UTC().Format(time.RFC3339Nano))
	if len(e.Data) > 0 {
		data, err := MarshalJSON(e.Data)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", e.Type, err)
		}
		b.WriteByte(',')
		b.Write(data[1:]) // drop the opening brace, keep the closing one
	} else {
		b.WriteByte('}')
	}
	return b.Bytes(), nil
}

// UnmarshalJSON reads an event written by MarshalJSON (or by little-loops,
// whose events have no seq).
func (e *Event) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return err
	}
	e.Type, _ = m["event"].(string)
	if n, ok := m["seq"].(json.Number); ok {
		e.Seq, _ = n.Int64()
	}
	if ts, ok := m["ts"].(string); ok {
		e.Time, _ = time.Parse(time.RFC3339Nano, ts)
	}
	delete(m, "event")
	delete(m, "seq")
	delete(m, "ts")
	e.Data = m
	return nil
}

// MarshalJSON encodes v like json.Marshal, but leaves <, > and & as they are,
// as little-loops' files have them.
func MarshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
