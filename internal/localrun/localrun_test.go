package localrun

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/local"
)

func spec(states map[string]v1alpha1.State) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "check", States: states}
}

func newDriver(t *testing.T, dir string, s *v1alpha1.LoopSpec) *Driver {
	t.Helper()
	m, err := executor.New("demo", s, executor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &Driver{Machine: m, Runner: &local.Runner{Dir: dir}, Store: mustStore(t, filepath.Join(dir, ".loops"), "demo"), LoopFile: "loop.yaml"}
}

func mustStore(t *testing.T, dir, name string) *Store {
	t.Helper()
	s, err := NewStore(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fixStates() map[string]v1alpha1.State {
	return map[string]v1alpha1.State{
		"check": {Action: "test -f fixed", Capture: "check", OnSuccess: "done", OnFailure: "fix"},
		"fix":   {Action: "touch fixed; echo fixed it", Next: "check"},
		"done":  {Terminal: true},
	}
}

func readEvents(t *testing.T, d *Driver) []executor.Event {
	t.Helper()
	evs, err := eventlog.Read(d.Store.EventsPath())
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d (%s) has seq %d", i, e.Type, e.Seq)
		}
	}
	return evs
}

func types(evs []executor.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// The state file has little-loops' field names and the run's final values.
func TestStateFileFormat(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	run, err := d.Start(context.Background(), "demo-1")
	if err != nil {
		t.Fatal(err)
	}
	if run.Phase != v1alpha1.PhaseCompleted || run.Iteration != 3 {
		t.Fatalf("phase %s iteration %d", run.Phase, run.Iteration)
	}
	raw, err := os.ReadFile(d.Store.StatePath())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"loop_name", "current_state", "iteration", "captured", "prev_result", "last_result", "started_at", "updated_at", "status"} {
		if _, ok := m[k]; !ok {
			t.Errorf("state file has no %q", k)
		}
	}
	if m["loop_name"] != "demo" || m["current_state"] != "done" || m["status"] != "completed" || m["iteration"] != 3.0 {
		t.Errorf("state file %s", raw)
	}
	c := m["captured"].(map[string]any)["check"].(map[string]any)
	if c["exit_code"] != 0.0 || c["output"] != "" || c["verdict"] != "success" {
		t.Errorf("captured %v", c)
	}
	if p := m["prev_result"].(map[string]any); p["state"] != "check" || p["exit_code"] != 0.0 {
		t.Errorf("prev_result %v", p)
	}
	if l := m["last_result"].(map[string]any); l["verdict"] != "success" {
		t.Errorf("last_result %v", l)
	}
	evs := readEvents(t, d)
	if evs[0].Type != executor.EventLoopStart || evs[len(evs)-1].Type != executor.EventLoopComplete {
		t.Errorf("events %v", types(evs))
	}
	if got, _ := ReadStateFile(d.Store.StatePath()); got.LastSeq != int64(len(evs)) {
		t.Errorf("state says last seq %d, log has %d events", got.LastSeq, len(evs))
	}
	// The file reads back into the same run state.
	sf, _ := ReadStateFile(d.Store.StatePath())
	back, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if back.CurrentState != run.CurrentState || back.Captured["check"] != run.Captured["check"] || back.LastSeq != run.LastSeq || !back.StartedAt.Equal(run.StartedAt) {
		t.Errorf("round trip %+v", back)
	}
}

func TestNewRunClearsOldFiles(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	if _, err := d.Start(context.Background(), "one"); err != nil {
		t.Fatal(err)
	}
	first := len(readEvents(t, d))
	if _, err := d.Start(context.Background(), "two"); err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, d)
	if evs[0].Seq != 1 || len(evs) >= first {
		t.Errorf("second run: %d events (first had %d)", len(evs), first)
	}
	sf, _ := d.Store.Load()
	if sf.RunID != "two" {
		t.Errorf("run id %q", sf.RunID)
	}
}

// A run stopped in the middle of an action resumes: the action runs again,
// the iteration count carries on, the log has no duplicate.
func TestInterruptAndResume(t *testing.T) {
	dir := t.TempDir()
	states := map[string]v1alpha1.State{
		"check": {Action: "echo once >> trace", Next: "slow"},
		"slow":  {Action: "echo slow >> trace; echo started; test -f go-on || sleep 30", Next: "done"},
		"done":  {Terminal: true},
	}
	d := newDriver(t, dir, spec(states))
	ctx, cancel := context.WithCancel(context.Background())
	d.Runner = &interruptAt{ActionRunner: d.Runner, state: "slow", cancel: cancel}
	run, err := d.Start(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if run.Phase != v1alpha1.PhaseInterrupted || run.Action == nil || run.Action.State != "slow" {
		t.Fatalf("phase %s action %+v", run.Phase, run.Action)
	}
	if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := d.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir, spec(states))
	if err := d2.Resume(context.Background(), saved); err != nil {
		t.Fatal(err)
	}
	if saved.Phase != v1alpha1.PhaseCompleted || saved.Iteration != 2 {
		t.Errorf("phase %s iteration %d", saved.Phase, saved.Iteration)
	}
	trace, _ := os.ReadFile(filepath.Join(dir, "trace"))
	if string(trace) != "once\nslow\nslow\n" {
		t.Errorf("trace %q", trace)
	}
	evs := readEvents(t, d2)
	tt := types(evs)
	if !slices.Contains(tt, executor.EventLoopResume) || !slices.Contains(tt, executor.EventActionRestarted) {
		t.Errorf("events %v", tt)
	}
	if err := d2.Resume(context.Background(), saved); !errors.Is(err, ErrNothingToResume) {
		t.Errorf("resuming a completed run: %v", err)
	}
}

// Events written for a step whose state never made it to disk are dropped on resume.
func TestResumeDropsUnsavedEvents(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Start(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	sf, _ := d.Store.Load()
	log, _ := eventlog.Open(d.Store.EventsPath())
	ghost := executor.Event{Seq: sf.LastSeq + 1, Type: "state_enter", Time: time.Now(), Data: map[string]any{"state": "ghost"}}
	if err := log.Append([]executor.Event{ghost}); err != nil {
		t.Fatal(err)
	}
	_ = log.Close()
	f, _ := os.OpenFile(d.Store.EventsPath(), os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString(`{"event":"route","seq":`) // a line cut short by a crash
	_ = f.Close()
	run, _ := sf.RunState()
	if err := newDriver(t, dir, spec(fixStates())).Resume(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	for _, e := range readEvents(t, d) {
		if slices.Contains(executor.StatesNamed(e), "ghost") {
			t.Error("the unsaved event is still in the log")
		}
	}
}

func TestLock(t *testing.T) {
	s := mustStore(t, t.TempDir(), "x")
	unlock, err := s.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second lock: %v", err)
	}
	unlock()
	unlock2, err := s.Lock()
	if err != nil {
		t.Errorf("after unlock: %v", err)
	} else {
		unlock2()
	}
}

func TestListStates(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	if _, err := d.Start(context.Background(), "r"); err != nil {
		t.Fatal(err)
	}
	loops := filepath.Join(dir, ".loops")
	states, bad, err := ListStates(loops)
	if err != nil || len(bad) != 0 || len(states) != 1 || states[0].LoopName != "demo" || states[0].Status != StatusCompleted {
		t.Errorf("states %v bad %v err %v", states, bad, err)
	}
	// One damaged file does not hide the others.
	broken := filepath.Join(loops, ".running", "broken.state.json")
	if err := os.WriteFile(broken, []byte(`{"loop_name": "broken", "current_st`), 0o644); err != nil {
		t.Fatal(err)
	}
	states, bad, err = ListStates(loops)
	if err != nil || len(states) != 1 || states[0].LoopName != "demo" || len(bad) != 1 || bad[0].Path != broken {
		t.Errorf("with a damaged file: states %v bad %v err %v", states, bad, err)
	}
}

func TestBackoffIsSleptAndSaved(t *testing.T) {
	dir := t.TempDir()
	s := spec(fixStates())
	s.Backoff = &metav1.Duration{Duration: 150 * time.Millisecond}
	d := newDriver(t, dir, s)
	start := time.Now()
	if _, err := d.Start(context.Background(), "r"); err != nil {
		t.Fatal(err)
	}
	// check -> fix -> check -> done: three routed transitions, three pauses.
	if el := time.Since(start); el < 450*time.Millisecond {
		t.Errorf("finished in %v, want at least 3 backoffs", el)
	}
}

// interruptAt interrupts a run (as Ctrl-C would) once the action of state
// printed "started"; the cancellation kills it.
type interruptAt struct {
	ActionRunner
	state  string
	cancel context.CancelFunc
}

func (i *interruptAt) RunWhenReady(ctx context.Context, a *executor.Action, ready func(int) error) executor.ActionResult {
	if a.State == i.state {
		r := *i.ActionRunner.(*local.Runner)
		r.Stdout = cancelOn{word: "started", cancel: i.cancel}
		return r.RunWhenReady(ctx, a, ready)
	}
	return i.ActionRunner.RunWhenReady(ctx, a, ready)
}

// cancelOn cancels once word goes by (in one write: the action prints it
// on a line of its own).
type cancelOn struct {
	word   string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.word) {
		c.cancel()
	}
	return len(p), nil
}

// A resumed run keeps to its checkpoint schedule: with checkpointInterval,
// the checkpoint taken before the interruption counts, and resuming does
// not take another before the interval is up.
func TestResumeKeepsTheCheckpointSchedule(t *testing.T) {
	dir := t.TempDir()
	s := spec(map[string]v1alpha1.State{
		"check": {Action: "true", Next: "more"},
		"more":  {Action: "true", Next: "last"},
		"last":  {Action: "echo started; test -f go-on || sleep 30", Next: "done"},
		"done":  {Terminal: true},
	})
	s.History = &v1alpha1.HistorySpec{CheckpointInterval: ptr.To[int32](3600)}
	d := newDriver(t, dir, s)
	ctx, cancel := context.WithCancel(context.Background())
	d.Runner = &interruptAt{ActionRunner: d.Runner, state: "last", cancel: cancel}
	run, err := d.Start(ctx, "r")
	if err != nil || run.Phase != v1alpha1.PhaseInterrupted {
		t.Fatalf("phase %s: %v", run.Phase, err)
	}
	if good, _, _ := d.Store.Checkpoints(); len(good) != 1 {
		t.Fatalf("%d checkpoints before the interruption, want 1 (the first completed state)", len(good))
	}
	sf, err := d.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	state, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir, s)
	if err := d2.Resume(context.Background(), state); err != nil || state.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("resume: phase %s, %v", state.Phase, err)
	}
	if good, _, _ := d2.Store.Checkpoints(); len(good) != 1 {
		t.Errorf("%d checkpoints after resuming, want still 1: the interval is not up", len(good))
	}
}

// A name that is not a word names no store: nothing is written outside
// the loops directory.
func TestStoreNames(t *testing.T) {
	for _, bad := range []string{"", "../../x", "a/b", "..", ".hidden", "new\nline", "tab\tname", "nul\x00", strings.Repeat("n", MaxNameLength+1), "spa ce"} {
		if _, err := NewStore(t.TempDir(), bad); err == nil {
			t.Errorf("NewStore(%q) was accepted", bad)
		}
	}
	for _, good := range []string{"fix-types", "fix_types.v2", "A1", strings.Repeat("n", MaxNameLength)} {
		if _, err := NewStore(t.TempDir(), good); err != nil {
			t.Errorf("NewStore(%q): %v", good, err)
		}
	}
}
