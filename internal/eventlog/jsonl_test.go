package eventlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
	if err != nil || len(evs) != 3 || evs[2].Type != "action_start" || evs[2].Data["action"] != "a > b && c" {
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

func TestSegmentCache(t *testing.T) {
	var c segmentCache
	cm := func(n int) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{EventsKey: strings.Repeat("x", n)}}
	}
	c.put("a", 1, cm(10))
	if got := c.get("a", 1); got == nil || len(got.Data[EventsKey]) != 10 {
		t.Fatalf("get = %v", got)
	}
	if c.get("a", 2) != nil {
		t.Error("another segment number must miss")
	}
	got := c.get("a", 1)
	got.Data[EventsKey] = "changed"
	if c.get("a", 1).Data[EventsKey] == "changed" {
		t.Error("the cache handed out its own copy")
	}
	c.forget("a")
	if c.get("a", 1) != nil || c.bytes != 0 {
		t.Errorf("after forget: %d bytes", c.bytes)
	}
	// The byte bound evicts the least recently used.
	c.put("old", 1, cm(segmentCacheBytes/2))
	c.put("mid", 1, cm(segmentCacheBytes/2))
	_ = c.get("old", 1)
	c.put("new", 1, cm(segmentCacheBytes/2))
	if c.get("mid", 1) != nil || c.get("old", 1) == nil || c.get("new", 1) == nil || c.bytes > segmentCacheBytes {
		t.Errorf("eviction kept the wrong entries (%d bytes)", c.bytes)
	}
}
