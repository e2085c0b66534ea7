package localrun

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner/process"
)

func TestCheckpointsEveryIterationAndRetention(t *testing.T) {
	dir := t.TempDir()
	s := spec(fixStates())
	s.History = &v1alpha1.HistorySpec{MaxCheckpoints: new(int32(1))}
	d := newDriver(t, dir, s)
	run, err := d.Start(t.Context(), "r1")
	if err != nil || run.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("%v %s", err, run.Phase)
	}
	good, bad, err := d.Store.Checkpoints()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	// Three iterations; a file holding 2*max is cut back to max.
	var its []int32
	for _, c := range good {
		its = append(its, c.Iteration)
	}
	if len(its) == 0 || len(its) > 2 || its[len(its)-1] != 3 {
		t.Errorf("checkpoints of iterations %v", its)
	}
}

func TestRewindLocal(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	first, err := d.Start(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	run, err := d.Store.Rewind(d.Machine, &two, "", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Saved stopped where it was put back: nothing runs it until resume.
	if run.Iteration != 2 || run.CurrentState != "check" || run.Phase != v1alpha1.PhaseInterrupted || run.RunID != "r1-w1" {
		t.Fatalf("rewound to %+v", run)
	}
	evs := readEvents(t, d)
	last := evs[len(evs)-1]
	if last.Type != executor.EventLoopRewind || last.Seq != first.LastSeq+1 {
		t.Errorf("last event %+v", last)
	}
	sf, err := d.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Resume(t.Context(), saved); err != nil {
		t.Fatal(err)
	}
	if saved.Phase != v1alpha1.PhaseCompleted || saved.Iteration != 3 {
		t.Errorf("after rewind and resume: %s at %d", saved.Phase, saved.Iteration)
	}
}

func TestUnreadableStateFileOffersTheLastGoodCheckpoint(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	if _, err := d.Start(t.Context(), "r1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Store.StatePath(), []byte(`{"loop_name": "demo", "iter`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := d.Store.Load()
	if err == nil || !strings.Contains(err.Error(), d.Store.StatePath()) || !strings.Contains(err.Error(), "iteration 3") ||
		!strings.Contains(err.Error(), "looprun rewind --local demo --iteration 3") {
		t.Fatalf("error: %v", err)
	}
	// Rewinding works without the state file.
	run, err := d.Store.Rewind(d.Machine, nil, "loop.yaml", nil, time.Now())
	if err != nil || run.Iteration != 3 {
		t.Fatalf("rewind: %v %+v", err, run)
	}
	if _, err := d.Store.Load(); err != nil {
		t.Errorf("state file after the rewind: %v", err)
	}
}

func TestCorruptCheckpointIsNotUsed(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	if _, err := d.Start(t.Context(), "r1"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(d.Store.CheckpointsPath())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	lines[1] = strings.Replace(lines[1], `"currentState":"check"`, `"currentState":"fix"`, 1)
	if err := os.WriteFile(d.Store.CheckpointsPath(), []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	_, bad, err := d.Store.Checkpoints()
	if err != nil || len(bad) != 1 || !errors.Is(bad[0], history.ErrCorrupt) {
		t.Fatalf("bad %v, err %v", bad, err)
	}
	two := int32(2)
	if _, err := d.Store.Rewind(d.Machine, &two, "", nil, time.Now()); !errors.Is(err, history.ErrCorrupt) {
		t.Errorf("rewind to a corrupt checkpoint: %v", err)
	}
}

func TestMigratesLittleLoopsStateFile(t *testing.T) {
	dir := t.TempDir()
	store := mustStore(t, dir, "fixer")
	if err := os.MkdirAll(filepath.Dir(store.StatePath()), 0o755); err != nil {
		t.Fatal(err)
	}
	v1 := `{"loop_name": "fixer", "current_state": "fix", "iteration": 2, "captured": {}, "prev_result": null,
  "last_result": {"verdict": "no", "details": {}}, "started_at": "2026-01-02T03:04:05.123456+00:00",
  "updated_at": "2026-01-02T03:05:00+00:00", "status": "running", "accumulated_ms": 0}`
	if err := os.WriteFile(store.StatePath(), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if sf.FormatVersion != FormatVersion || sf.RunID != "fixer-20260102T030405.123456" || sf.CurrentState != "fix" {
		t.Errorf("migrated: version %d, run id %q, state %q", sf.FormatVersion, sf.RunID, sf.CurrentState)
	}
	if err := os.WriteFile(store.StatePath(), []byte(`{"loop_name": "fixer", "status": "running", "format_version": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Load(); err == nil || !strings.Contains(err.Error(), "format 99") {
		t.Errorf("newer format: %v", err)
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, spec(fixStates()))
	if _, err := d.Start(t.Context(), "r1"); err != nil {
		t.Fatal(err)
	}
	loops := filepath.Join(dir, ".loops")
	if got, err := Prune(loops, time.Now().Add(-time.Hour), false); err != nil || len(got) != 0 {
		t.Fatalf("a fresh run was pruned: %v %v", got, err)
	}
	unlock, err := d.Store.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Prune(loops, time.Now().Add(time.Hour), false); len(got) != 0 {
		t.Errorf("a running (locked) run was pruned")
	}
	unlock()
	got, err := Prune(loops, time.Now().Add(time.Hour), true)
	if err != nil || len(got) != 1 || len(got[0].Files) < 4 {
		t.Fatalf("dry run: %+v %v", got, err)
	}
	if _, err := os.Stat(d.Store.StatePath()); err != nil {
		t.Error("a dry run deleted the state file")
	}
	if _, err := Prune(loops, time.Now().Add(time.Hour), false); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(loops, ".running", "demo.*"))
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A checkpoints file whose last line was cut short (a full disk) is
// repaired on resume, as the event log is, and exports again.
func TestResumeRepairsATornCheckpointsFile(t *testing.T) {
	dir := t.TempDir()
	s := spec(map[string]v1alpha1.State{
		"check": {Action: "true", Next: "more"},
		"more":  {Action: "echo started; test -f go-on || sleep 30", Next: "done"},
		"done":  {Terminal: true},
	})
	d := newDriver(t, dir, s)
	ctx, cancel := context.WithCancel(t.Context())
	d.Runner = &interruptAt{ActionRunner: d.Runner, state: "more", cancel: cancel}
	run, err := d.Start(ctx, "r")
	if err != nil || run.Phase != v1alpha1.PhaseInterrupted {
		t.Fatalf("phase %s: %v", run.Phase, err)
	}
	f, err := os.OpenFile(d.Store.CheckpointsPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"version":1,"loop":"demo","iteration":9,"seq":99,"run":{"cut`)
	_ = f.Close()
	if _, bad, _ := d.Store.Checkpoints(); len(bad) == 0 {
		t.Fatal("the torn line is not seen as damaged")
	}
	if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := d.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	state, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if err := newDriver(t, dir, s).Resume(t.Context(), state); err != nil || state.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("resume: %s %v", state.Phase, err)
	}
	good, bad, err := d.Store.Checkpoints()
	if err != nil || len(bad) > 0 || len(good) < 2 {
		t.Errorf("after resume: %d good, bad %v, %v", len(good), bad, err)
	}
}

// Resume runs the loop's command, not the one a state file says: a state
// file is data, and an edited one runs nothing it names.
func TestResumeRunsTheLoopsCommand(t *testing.T) {
	dir := t.TempDir()
	s := spec(map[string]v1alpha1.State{
		"check": {Action: "echo started; test -f go-on || sleep 30; echo loop >> ran", Next: "done"},
		"done":  {Terminal: true},
	})
	d := newDriver(t, dir, s)
	ctx, cancel := context.WithCancel(t.Context())
	d.Runner = &interruptAt{ActionRunner: d.Runner, state: "check", cancel: cancel}
	if run, err := d.Start(ctx, "r"); err != nil || run.Phase != v1alpha1.PhaseInterrupted {
		t.Fatalf("phase %s: %v", run.Phase, err)
	}
	raw, err := os.ReadFile(d.Store.StatePath())
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.Replace(string(raw), `"command": "echo started;`, `"command": "touch pwned; echo started;`, 1))
	if err := os.WriteFile(d.Store.StatePath(), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := d.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sf.ActiveAction.Command, "pwned") {
		t.Fatalf("the state file was not edited: %q", sf.ActiveAction.Command)
	}
	state, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if err := newDriver(t, dir, s).Resume(t.Context(), state); err != nil || state.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("resume: %s %v", state.Phase, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("resume ran the command the state file named")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ran")); string(b) != "loop\n" {
		t.Errorf("the loop's command ran %q", b)
	}
}

// Resume kills the process group a killed run left behind.
func TestResumeKillsTheActionLeftBehind(t *testing.T) {
	dir := t.TempDir()
	s := spec(map[string]v1alpha1.State{
		"check": {Action: "echo started; test -f go-on || sleep 30", Next: "done"},
		"done":  {Terminal: true},
	})
	d := newDriver(t, dir, s)
	ctx, cancel := context.WithCancel(t.Context())
	d.Runner = &interruptAt{ActionRunner: d.Runner, state: "check", cancel: cancel}
	if _, err := d.Start(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	// A process group as a killed run would leave it, noted where it notes.
	orphan := exec.Command("sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- orphan.Wait() }()
	if err := process.RecordGroup(d.Store.ActionPath(), orphan.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sf, _ := d.Store.Load()
	state, _ := sf.RunState()
	if err := newDriver(t, dir, s).Resume(t.Context(), state); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		_ = err // killed, as it should be
	case <-time.After(10 * time.Second):
		t.Fatal("the action left behind still runs after resume")
	}
}

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		data string
		n    int
		want string
		kept int
	}{
		{"a\nb\nc\n", 2, "b\nc\n", 2},
		{"a\nb\nc\n", 5, "a\nb\nc\n", 3},
		{"a\nb\nc", 1, "b\n", 1}, // a line cut short at the end goes
		{"", 3, "", 0},
		{"a\n", 0, "", 0},
	} {
		got, kept := lastLines([]byte(c.data), c.n)
		if string(got) != c.want || kept != c.kept {
			t.Errorf("lastLines(%q, %d) = %q, %d; want %q, %d", c.data, c.n, got, kept, c.want, c.kept)
		}
	}
}
