package localrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/safefile"
)

// A reader racing the writer only ever sees a whole state file.
func TestAtomicFileNeverHalfWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.state.json")
	a := safefile.NewAtomic(path)
	if err := a.Write([]byte(`{"n":0}`), nil); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, bad, whole atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			// A read that finds the file saved again under each of its
			// tries says so; it never returns part of one.
			switch _, err := ReadStateFile(path); {
			case err == nil:
				whole.Add(1)
			case !errors.Is(err, errKeptChanging):
				if bad.Add(1) == 1 {
					t.Logf("first bad read: %v", err)
				}
			}
			reads.Add(1)
		}
	}()
	for i := 1; i <= 300; i++ {
		// Sizes vary so a torn write would show.
		data := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", (i*37)%900))
		if err := a.Write([]byte(data), nil); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	<-done
	if bad.Load() > 0 {
		t.Errorf("%d of %d reads saw a partial file", bad.Load(), reads.Load())
	}
	if reads.Load() > 0 && whole.Load() == 0 {
		t.Errorf("none of %d reads racing the saves read the file", reads.Load())
	}
	var last struct{ N int }
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &last); err != nil || last.N != 300 {
		t.Errorf("final content %s", b)
	}
	if err := a.SyncDir(); err != nil {
		t.Error(err)
	}
	// The temporary files hold earlier states, whole.
	for _, p := range safefile.Slots(path) {
		b, err := os.ReadFile(p)
		var v map[string]any
		if err != nil || json.Unmarshal(b, &v) != nil {
			t.Errorf("%s: %v %q", p, err, b)
		}
	}
}

func TestAtomicFileBeforeFailureKeepsOldContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.state.json")
	a := safefile.NewAtomic(path)
	if err := a.Write([]byte("old"), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Write([]byte("new"), func() error { return fmt.Errorf("log sync failed") }); err == nil {
		t.Fatal("want the error of before")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("content %q after a failed save", b)
	}
}

// A little-loops state file has no run id; the one it is given keeps
// started_at to the microsecond, so runs started in the same second get
// different ids (and so different sub-loop children), and has no zone
// sign or other character a run id does not hold.
func TestLegacyRunID(t *testing.T) {
	for _, tc := range []struct{ startedAt, want string }{
		{"2026-01-02T03:04:05.123456+00:00", "fixer-20260102T030405.123456"},
		{"2026-01-02T03:04:05.654321+00:00", "fixer-20260102T030405.654321"},
		{"2026-01-02T03:04:05+00:00", "fixer-20260102T030405.000000"},
		{"2026-01-02T03:04:05.5Z", "fixer-20260102T030405.500000"},
		{"2026-01-02T03:04:05.123456", "fixer-20260102T030405123456"}, // no zone: as written
	} {
		if got := legacyRunID("fixer", tc.startedAt); got != tc.want {
			t.Errorf("legacyRunID(%q) = %q, want %q", tc.startedAt, got, tc.want)
		}
	}
}

// writeState is run as the state file of a run named demo holds it.
func writeState(t *testing.T, run *v1alpha1.RunState) []byte {
	t.Helper()
	b, err := json.Marshal(encodeState("demo", "loop.yaml", nil, run))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readState reads a state file back into a run state.
func readState(t *testing.T, b []byte) *v1alpha1.RunState {
	t.Helper()
	var sf StateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		t.Fatal(err)
	}
	run, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// A grandchild's captures are nested in the state file as little-loops
// nests them (captured.STATE.INNER.NAME), and read back as they were.
func TestStateFileNestsGrandchildCaptures(t *testing.T) {
	run := &v1alpha1.RunState{Captured: map[string]v1alpha1.CapturedResult{
		"run": {Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal", Captured: map[string]v1alpha1.ChildCapture{
			"inner":          {TerminatedBy: "terminal"},
			"inner.greeting": {Output: "hello", Verdict: "yes"},
			"bare":           {TerminatedBy: "error", Error: "boom"},
		}}},
	}}
	b := writeState(t, run)
	var m struct {
		Captured map[string]map[string]any `json:"captured"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	inner, _ := m.Captured["run"]["inner"].(map[string]any)
	greeting, _ := inner["greeting"].(map[string]any)
	bare, _ := m.Captured["run"]["bare"].(map[string]any)
	if inner["terminated_by"] != "terminal" || greeting["output"] != "hello" || bare["error"] != "boom" {
		t.Fatalf("captured in the state file: %s", b)
	}
	back := readState(t, b)
	if !equality.Semantic.DeepEqual(run.Captured, back.Captured) {
		t.Fatalf("read back %+v, want %+v", back.Captured, run.Captured)
	}
}

// The run's usage is kept in the state file (snake_case, as the rest of it)
// and read back as it was, so a resumed run goes on adding to it.
func TestStateFileKeepsUsage(t *testing.T) {
	run := &v1alpha1.RunState{Phase: v1alpha1.PhaseRunning, Usage: &v1alpha1.UsageStatus{
		UsageTotals: v1alpha1.UsageTotals{Calls: 2, InputTokens: 10, OutputTokens: 20, CostMicroUSD: 330, UnpricedCalls: 1, CLICostMicroUSD: 400, Model: "m"},
		States:      map[string]v1alpha1.UsageTotals{"fix": {Calls: 2, InputTokens: 10, CacheReadTokens: 7}},
	}}
	b := writeState(t, run)
	if !strings.Contains(string(b), `"usage":{"calls":2,"input_tokens":10,"output_tokens":20,"cost_micro_usd":330,"unpriced_calls":1,"cli_cost_micro_usd":400,"model":"m","states":{"fix":{"calls":2,"input_tokens":10,"cache_read_tokens":7}}}`) {
		t.Fatalf("state file %s", b)
	}
	back := readState(t, b)
	if !equality.Semantic.DeepEqual(run.Usage, back.Usage) {
		t.Fatalf("read back %+v, want %+v", back.Usage, run.Usage)
	}
}
