package localrun

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// Each messages_append event becomes a row of messages.jsonl with the
// run's iteration and the event's state (a sub-loop's, forwarded with its
// depth, keeps its own state); other events write nothing, nor does a run
// without a run_dir.
func TestMessagesLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs", "r")
	at := time.Date(2026, 11, 28, 1, 2, 3, 0, time.UTC)
	run := &v1alpha1.RunState{Iteration: 3}
	evs := []executor.Event{
		{Type: executor.EventRoute, Time: at, Data: map[string]any{"from": "a", "to": "b"}},
		{Type: executor.EventMessagesAppend, Time: at, Data: executor.MessagesAppendEvent{State: "sub", Message: "hi"}.Data()},
		{Type: executor.EventMessagesAppend, Time: at, Data: map[string]any{"state": "child", "message": "deep", "depth": 1}},
	}
	MessagesLog(dir, nil).Observe(run, evs)
	MessagesLog("", nil).Observe(run, evs)
	b, err := os.ReadFile(filepath.Join(dir, "messages.jsonl"))
	want := `{"iteration": 3, "state": "sub", "message": "hi", "timestamp": "2026-11-28T01:02:03+00:00"}` + "\n" +
		`{"iteration": 3, "state": "child", "message": "deep", "timestamp": "2026-11-28T01:02:03+00:00"}` + "\n"
	if err != nil || string(b) != want {
		t.Errorf("messages.jsonl %q %v, want %q", b, err, want)
	}
}
