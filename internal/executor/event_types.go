package executor

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The events a driver reads back (the reconciler turns them into Kubernetes
// Events and log lines) are typed: the engine emits each with its
// constructor's Data, and a driver reads it with its accessor, never by
// string keys of its own.

// RouteEvent is a route event: the run moved from one state to another.
type RouteEvent struct {
	From, To string
	// Verdict routed the run; "" for an unconditional move.
	Verdict string
	// Reason is "maintain" for a maintain loop's restart; "" otherwise.
	Reason string
}

// Data is the event's payload as the log keeps it.
func (e RouteEvent) Data() map[string]any {
	data := map[string]any{"from": e.From, "to": e.To}
	if e.Verdict != "" {
		data["verdict"] = e.Verdict
	}
	if e.Reason != "" {
		data["reason"] = e.Reason
	}
	return data
}

// RouteOf reads a route event.
func RouteOf(e Event) RouteEvent {
	return RouteEvent{From: str(e.Data, "from"), To: str(e.Data, "to"), Verdict: str(e.Data, "verdict"), Reason: str(e.Data, "reason")}
}

// RetryEvent is an action_retry event: the action failed for a transient
// reason and runs again after a delay.
type RetryEvent struct {
	State   string
	Retry   int32
	Limit   int32
	DelayMs int64
	Reason  string
}

// Data is the event's payload as the log keeps it.
func (e RetryEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "retry": e.Retry, "limit": e.Limit, "delay_ms": e.DelayMs, "reason": e.Reason}
}

// RetryOf reads an action_retry event.
func RetryOf(e Event) RetryEvent {
	return RetryEvent{State: str(e.Data, "state"), Retry: num32(e.Data, "retry"), Limit: num32(e.Data, "limit"),
		DelayMs: num(e.Data, "delay_ms"), Reason: str(e.Data, "reason")}
}

// RetryExhaustedEvent is a retry_exhausted event: a state used up its
// retries (of its action, or of re-entering itself) and escalates.
type RetryExhaustedEvent struct {
	State   string
	Retries int32
	// Reason is why the last try failed; "" for a state that re-entered
	// itself too often.
	Reason string
	// Next is where the run goes; "" when it ends.
	Next string
}

// Data is the event's payload as the log keeps it.
func (e RetryExhaustedEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "retries": e.Retries, "next": e.Next}
	if e.Reason != "" {
		data["reason"] = e.Reason
	}
	return data
}

// RetryExhaustedOf reads a retry_exhausted event.
func RetryExhaustedOf(e Event) RetryExhaustedEvent {
	return RetryExhaustedEvent{State: str(e.Data, "state"), Retries: num32(e.Data, "retries"), Reason: str(e.Data, "reason"), Next: str(e.Data, "next")}
}

// RestartedEvent is an action_restarted event: the action in flight runs
// again (a resume, or the process running it was lost).
type RestartedEvent struct {
	State     string
	Iteration int32
	Action    string
}

// Data is the event's payload as the log keeps it.
func (e RestartedEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "iteration": e.Iteration, "action": e.Action}
}

// RestartedOf reads an action_restarted event.
func RestartedOf(e Event) RestartedEvent {
	return RestartedEvent{State: str(e.Data, "state"), Iteration: num32(e.Data, "iteration"), Action: str(e.Data, "action")}
}

// num32 is num within int32; 0 outside it.
func num32(data map[string]any, k string) int32 {
	n := num(data, k)
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0
	}
	return int32(n)
}

// ApprovalRequestedEvent is an approval_requested event: an approval
// state began to wait for a person.
type ApprovalRequestedEvent struct {
	State, Message string
	// Deadline is when the wait times out (RFC 3339); "" for none.
	Deadline string
}

// Data is the event's payload as the log keeps it.
func (e ApprovalRequestedEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "message": e.Message}
	if e.Deadline != "" {
		data["deadline"] = e.Deadline
	}
	return data
}

// ApprovalRequestedOf reads an approval_requested event.
func ApprovalRequestedOf(e Event) ApprovalRequestedEvent {
	return ApprovalRequestedEvent{State: str(e.Data, "state"), Message: str(e.Data, "message"), Deadline: str(e.Data, "deadline")}
}

// ApprovalAnsweredEvent is an approval_answered event: the approval's
// verdict, and for a person's answer who gave it and why.
type ApprovalAnsweredEvent struct {
	State, Verdict string
	By, Message    string
}

// Data is the event's payload as the log keeps it.
func (e ApprovalAnsweredEvent) Data() map[string]any {
	data := e.details()
	data["state"], data["verdict"] = e.State, e.Verdict
	return data
}

// details are what a person's answer adds: who and why (none for a
// timeout).
func (e ApprovalAnsweredEvent) details() map[string]any {
	if e.Verdict == v1alpha1.VerdictTimeout {
		return map[string]any{}
	}
	return map[string]any{"by": e.By, "message": e.Message}
}

// ApprovalAnsweredOf reads an approval_answered event.
func ApprovalAnsweredOf(e Event) ApprovalAnsweredEvent {
	return ApprovalAnsweredEvent{State: str(e.Data, "state"), Verdict: str(e.Data, "verdict"), By: str(e.Data, "by"), Message: str(e.Data, "message")}
}

// str is the string under k; "" when there is none.
func str(data map[string]any, k string) string {
	s, _ := data[k].(string)
	return s
}

// num is the integer under k, as the engine wrote it or as JSON read it
// back; 0 when there is none.
func num(data map[string]any, k string) int64 {
	switch v := data[k].(type) {
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	case float64:
		return int64(v)
	case json.Number:
		n, _ := strconv.ParseInt(string(v), 10, 64)
		return n
	}
	return 0
}
