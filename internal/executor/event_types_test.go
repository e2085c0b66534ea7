package executor

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// A typed event reads back the same, from the engine's own payload and
// from one read back from JSON (numbers as float64).
func TestTypedEventsReadBack(t *testing.T) {
	viaJSON := func(data map[string]any) map[string]any {
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	route := RouteEvent{From: "a", To: "b", Verdict: "success"}
	retry := RetryEvent{State: "a", Retry: 2, Limit: 3, DelayMs: 1500, Reason: "PodDeleted"}
	exhausted := RetryExhaustedEvent{State: "a", Retries: 4, Next: "b"}
	restarted := RestartedEvent{State: "a", Iteration: 7, Action: "make"}
	asked := ApprovalRequestedEvent{State: "ask", Message: "ship?", Deadline: "2026-01-15T10:30:00Z"}
	answered := ApprovalAnsweredEvent{State: "ask", Verdict: "approved", By: "ann", Message: "go"}
	for _, data := range []func(map[string]any) map[string]any{func(d map[string]any) map[string]any { return d }, viaJSON} {
		if got := RouteOf(Event{Data: data(route.Data())}); got != route {
			t.Errorf("route %+v", got)
		}
		if got := RetryOf(Event{Data: data(retry.Data())}); got != retry {
			t.Errorf("retry %+v", got)
		}
		if got := RetryExhaustedOf(Event{Data: data(exhausted.Data())}); got != exhausted {
			t.Errorf("retry exhausted %+v", got)
		}
		if got := RestartedOf(Event{Data: data(restarted.Data())}); got != restarted {
			t.Errorf("restarted %+v", got)
		}
		if got := ApprovalRequestedOf(Event{Data: data(asked.Data())}); got != asked {
			t.Errorf("approval requested %+v", got)
		}
		if got := ApprovalAnsweredOf(Event{Data: data(answered.Data())}); got != answered {
			t.Errorf("approval answered %+v", got)
		}
	}
	// The payloads keep little-loops' keys, optional ones only when set.
	if keys := sortedKeys(route.Data()); !reflect.DeepEqual(keys, []string{"from", "to", "verdict"}) {
		t.Errorf("route keys %v", keys)
	}
	if keys := sortedKeys(exhausted.Data()); !reflect.DeepEqual(keys, []string{"next", "retries", "state"}) {
		t.Errorf("retry_exhausted keys %v", keys)
	}
	if keys := sortedKeys(ApprovalAnsweredEvent{State: "ask", Verdict: "timeout"}.Data()); !reflect.DeepEqual(keys, []string{"state", "verdict"}) {
		t.Errorf("a timed-out approval_answered keys %v", keys)
	}
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
