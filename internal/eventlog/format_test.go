package eventlog

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/looprun/looprun/internal/executor"
)

func evd(seq int64, typ string, data map[string]any) executor.Event {
	return executor.Event{Seq: seq, Type: typ, Data: data}
}

func TestEncodeDecodeLastSeq(t *testing.T) {
	events := []executor.Event{evd(1, "loop_start", nil), evd(2, "state_enter", map[string]any{"state": "a<b>"}), evd(3, "route", nil)}
	lines, last, n, err := Encode(events, 1)
	if err != nil || last != 3 || n != 2 || strings.Count(lines, "\n") != 2 || !strings.Contains(lines, "a<b>") {
		t.Fatalf("Encode after 1: %q last %d n %d %v", lines, last, n, err)
	}
	back, err := Decode(lines)
	if err != nil || len(back) != 2 || back[0].Seq != 2 || back[1].Seq != 3 {
		t.Errorf("Decode: %+v %v", back, err)
	}
	if seq, ok := LastSeq(lines); !ok || seq != 3 {
		t.Errorf("LastSeq = %d %v", seq, ok)
	}
	if _, ok := LastSeq(""); ok {
		t.Error("LastSeq of nothing")
	}
	if _, err := Decode(lines + `{"seq":4`); err == nil {
		t.Error("Decode took a line cut short")
	}
	if _, err := Decode("not json\n"); err == nil {
		t.Error("Decode took garbage")
	}
}

func TestFilter(t *testing.T) {
	events := []executor.Event{
		evd(1, "loop_start", nil),
		evd(2, "state_enter", map[string]any{"state": "check"}),
		evd(3, "action_complete", nil),
		evd(4, "route", map[string]any{"from": "check", "to": "fix"}),
		evd(5, "state_enter", map[string]any{"state": "fix"}),
		evd(6, "action_complete", nil),
		evd(7, "route", map[string]any{"from": "fix", "to": "check"}),
	}
	seqs := func(evs []executor.Event) (out []int64) {
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	tests := []struct {
		types []string
		state string
		want  []int64
	}{
		{nil, "", []int64{1, 2, 3, 4, 5, 6, 7}},
		{[]string{"route"}, "", []int64{4, 7}},
		{nil, "fix", []int64{4, 5, 6, 7}},
		{[]string{"action_complete"}, "check", []int64{3}},
	}
	for _, tt := range tests {
		if got := seqs(Filter(events, tt.types, tt.state)); !slices.Equal(got, tt.want) {
			t.Errorf("Filter(%v, %q) = %v, want %v", tt.types, tt.state, got, tt.want)
		}
	}
}

func TestReadFromFollowsAGrowingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	write := func(evs ...executor.Event) {
		lines, _, _, err := Encode(evs, 0)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(lines)
		_ = f.Close()
	}
	var got []int64
	collect := func(e executor.Event) { got = append(got, e.Seq) }
	off, err := ReadFrom(path, 0, collect)
	if err != nil || off != 0 || len(got) != 0 {
		t.Fatalf("a missing log: %d %v %v", off, err, got)
	}
	write(evd(1, "a", nil), evd(2, "b", nil))
	if off, err = ReadFrom(path, off, collect); err != nil || len(got) != 2 {
		t.Fatalf("first read: %v %v", got, err)
	}
	write(evd(3, "c", nil))
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644)
	_, _ = f.WriteString(`{"event":"cut`) // a line still being written
	_ = f.Close()
	if off, err = ReadFrom(path, off, collect); err != nil || len(got) != 3 || got[2] != 3 {
		t.Fatalf("second read: %v %v", got, err)
	}
	if again, _ := ReadFrom(path, off, collect); again != off || len(got) != 3 {
		t.Fatalf("the cut line was taken: %d %v", again, got)
	}
}
