package eventlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Decoding untrusted bytes (an event-log segment, a local log) never
// panics, and what it returns is in order of the lines it read.
func FuzzDecode(f *testing.F) {
	f.Add("{\"event\":\"loop_start\",\"seq\":1,\"ts\":\"2026-01-01T00:00:00Z\"}\n")
	f.Add("{\"seq\":2}\n{\"seq\":1}\nnot json\n")
	f.Add("{\"event\":\"x\",\"seq\":1e400}\n{\"seq\":\n")
	f.Fuzz(func(t *testing.T, data string) {
		evs, err := Decode(data)
		if err == nil && strings.Count(data, "\n") < len(evs) {
			t.Fatalf("%d events from %d lines", len(evs), strings.Count(data, "\n"))
		}
		_, _ = LastSeq(data)
		for _, line := range strings.Split(data, "\n") {
			_, _ = EventSeq([]byte(line))
		}
	})
}

// Truncation keeps a prefix of whole lines, none numbered past the bound.
func FuzzKeepThrough(f *testing.F) {
	f.Add("{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n", int64(2))
	f.Add("{\"seq\":1}\n{\"se", int64(5))
	f.Add("\n\n{\"seq\":-1}\nx\n", int64(0))
	f.Fuzz(func(t *testing.T, data string, seq int64) {
		kept, removed := KeepThrough(data, seq, EventSeq)
		if !strings.HasPrefix(data, kept) || (kept != "" && !strings.HasSuffix(kept, "\n")) || removed != (kept != data) {
			t.Fatalf("KeepThrough(%q, %d) = %q, %v", data, seq, kept, removed)
		}
		for _, line := range strings.Split(strings.TrimSuffix(kept, "\n"), "\n") {
			if n, ok := EventSeq([]byte(line)); ok && n > seq {
				t.Fatalf("kept seq %d past %d", n, seq)
			}
		}
	})
}

// TruncateAfter on a file of any bytes leaves a prefix of it, or refuses.
func FuzzTruncateAfter(f *testing.F) {
	f.Add([]byte("{\"event\":\"a\",\"seq\":1}\n{\"event\":\"b\",\"seq\":2}\n{\"ev"), int64(1))
	f.Add([]byte("garbage\n"), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, seq int64) {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := TruncateAfter(path, seq)
		after, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !bytes.HasPrefix(data, after) {
			t.Fatalf("truncation left %q, not a prefix of %q", after, data)
		}
		if err == nil {
			if _, err := Read(path); err != nil {
				t.Fatalf("a truncated log does not read: %v", err)
			}
		}
	})
}
