package eventlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

func ev(seq int64, typ string) executor.Event {
	return executor.Event{Seq: seq, Type: typ, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Data: map[string]any{"action": "a > b && c"}}
}

func TestAppendReadTruncate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.events.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]executor.Event{ev(1, "loop_start"), ev(2, "state_enter")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]executor.Event{ev(3, "action_start")}); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	raw, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 || lines[0] != `{"event":"loop_start","seq":1,"ts":"2026-01-01T00:00:00Z","action":"a > b && c"}` {
		t.Errorf("log:\n%s", raw)
	}
	// A line cut short at the end is not an event.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString(`{"event":"rou`)
	_ = f.Close()
	evs, err := Read(path)
	if err != nil || len(evs) != 3 || evs[2].Type != "action_start" || executor.ActionStartOf(evs[2]).Action != "a > b && c" {
		t.Fatalf("read %v, %v", evs, err)
	}
	if err := TruncateAfter(path, 2); err != nil {
		t.Fatal(err)
	}
	evs, _ = Read(path)
	if len(evs) != 2 || evs[1].Seq != 2 {
		t.Errorf("after truncate: %v", evs)
	}
	raw, _ = os.ReadFile(path)
	if !strings.HasSuffix(string(raw), "}\n") {
		t.Errorf("truncated log does not end with a whole line: %q", raw)
	}
}

func TestReadMissingAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	if evs, err := Read(filepath.Join(dir, "none")); err != nil || evs != nil {
		t.Errorf("missing log: %v %v", evs, err)
	}
	if err := TruncateAfter(filepath.Join(dir, "none"), 3); err != nil {
		t.Errorf("truncate missing: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	_ = os.WriteFile(bad, []byte("{\"event\":\"a\",\"seq\":1}\nnot json\n"), 0o644)
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "byte") {
		t.Errorf("corrupt log: %v", err)
	}
}
