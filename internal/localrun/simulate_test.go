package localrun

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/loopfile"
)

// walk is how a simulated walk went: the states entered, where it ended,
// how, and the actions that would have run.
type walk struct {
	entered []string
	final   string
	by      v1alpha1.TerminationReason
	would   []string
}

// simulate walks the little-loops file src under the scenario.
func simulate(t *testing.T, src, scenario string) walk {
	t.Helper()
	lf, err := loopfile.Parse([]byte(src), t.TempDir(), loopfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{LittleLoops: lf.LittleLoops()})
	if err != nil {
		t.Fatal(err)
	}
	var w walk
	sim := &Simulation{Machine: m, Scenario: scenario,
		WouldRun: func(a *executor.Action) { w.would = append(w.would, a.Command) },
		Observers: []executor.Observer{executor.ObserverFunc(func(_ *v1alpha1.RunState, evs []executor.Event) {
			for _, e := range evs {
				if e.Type == executor.EventStateEnter && executor.DepthOf(e) == 0 {
					w.entered = append(w.entered, executor.StateEnterOf(e).State)
				}
			}
		})}}
	run, err := sim.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.final, w.by = run.CurrentState, run.TerminatedBy
	return w
}

// A sub-loop state, as ll-loop simulate has it: its child does not run
// (the loop need not exist); the scenario's next result stands for how it
// ended (0 completed, 1 a failure state, 2 an error, which goes to on_no
// without on_error), and it counts as an action that would run.
const subLoopFile = `name: parent
initial: prepare
states:
  prepare:
    action: "echo prepare"
    next: delegate
  delegate:
    loop: no-such-loop
    on_yes: passed
    on_no: failed
    on_error: errored
  passed: {terminal: true}
  failed: {terminal: true}
  errored: {terminal: true}
`

func TestSimulateSubLoopTakesTheScenario(t *testing.T) {
	for scenario, final := range map[string]string{
		"all-pass": "passed", "all-fail": "failed", "all-error": "errored",
		// prepare's action fails, delegate passes
		"first-fail": "passed",
		// prepare's action is the 1st (a failure), delegate the 2nd (a pass)
		"alternating": "passed",
	} {
		w := simulate(t, subLoopFile, scenario)
		if w.final != final || w.by != v1alpha1.TerminatedTerminal || !slices.Equal(w.entered, []string{"prepare", "delegate"}) {
			t.Errorf("%s: ended %s in %s after %v, want %s", scenario, w.by, w.final, w.entered, final)
		}
		if want := []string{"echo prepare", "[sub-loop: no-such-loop]"}; !slices.Equal(w.would, want) {
			t.Errorf("%s: would run %q, want %q", scenario, w.would, want)
		}
	}
	// Without on_error, a child's error goes to on_no.
	noError := `name: parent
initial: delegate
states:
  delegate:
    loop: child
    on_yes: passed
    on_no: failed
  passed: {terminal: true}
  failed: {terminal: true}
`
	if w := simulate(t, noError, "all-error"); w.final != "failed" {
		t.Errorf("all-error without on_error: ended in %s", w.final)
	}
}

// TestSimulateSubLoopCapturesNothing: a child that did not run leaves
// nothing to capture, as in ll-loop simulate: a state that reads its
// capture (or the sub-loop state's own entry) cannot expand its action and
// takes on_error. Its with and worktree are not expanded, and a loop name
// that does not expand stands as written: none of them stops the walk.
func TestSimulateSubLoopCapturesNothing(t *testing.T) {
	src := `name: parent
initial: delegate
states:
  delegate:
    loop: "${context.which}"
    with:
      input: "${captured.never.output}"
    worktree: "${captured.never.output}"
    capture: events
    on_yes: read
    on_no: failed
  read:
    action: "echo ${captured.events.output} ${captured.delegate.terminated_by}"
    on_yes: done
    on_no: failed
    on_error: nothing_captured
  done: {terminal: true}
  failed: {terminal: true}
  nothing_captured: {terminal: true}
`
	w := simulate(t, src, "all-pass")
	if w.final != "nothing_captured" || !slices.Equal(w.entered, []string{"delegate", "read"}) {
		t.Errorf("ended %s in %s after %v", w.by, w.final, w.entered)
	}
	if want := []string{"[sub-loop: ${context.which}]"}; !slices.Equal(w.would, want) {
		t.Errorf("would run %q, want %q", w.would, want)
	}
}

// TestSimulateLearningGate: a learning state's gate is played as ll-loop
// simulate plays it: a target whose record in .ll/learning-tests says
// proven passes, a missing one is explored up to its retries (each an
// action that would run, taking a scripted result) and then blocks; no
// targets pass at once.
func TestSimulateLearningGate(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join(".ll", "learning-tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(".ll", "learning-tests", "known-api.md"), []byte("---\nstatus: \"proven\"\n---\nnotes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(".ll", "learning-tests", "bad-api.md"), []byte("---\nstatus: refuted\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gate := func(targets string) string {
		return `name: gate
initial: prove
context:
  targets: "` + targets + `"
states:
  prove:
    type: learning
    learning:
      targets_csv: "${context.targets}"
      max_retries: 2
    on_yes: done
    on_blocked: blocked
  done: {terminal: true}
  blocked: {terminal: true}
`
	}
	for _, c := range []struct {
		targets, final string
		would          []string
	}{
		{"", "done", nil},
		{"Known API", "done", nil},
		{"Known API, New API", "blocked", []string{"/ll:explore-api New API", "/ll:explore-api New API"}},
		{"Bad API, New API", "blocked", nil},
	} {
		w := simulate(t, gate(c.targets), "all-pass")
		if w.final != c.final || w.by != v1alpha1.TerminatedTerminal || !slices.Equal(w.would, c.would) {
			t.Errorf("targets %q: ended %s in %s, would run %q; want %s, %q", c.targets, w.by, w.final, w.would, c.final, c.would)
		}
	}
}

func TestLearningRecordStatus(t *testing.T) {
	t.Chdir(t.TempDir())
	dir := filepath.Join(".ll", "learning-tests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		"---\nstatus: stale\n---\n":            "stale",
		"---\nstatus:   'refuted'  \n---\n":    "refuted",
		"---\ntitle: x\n---\n":                 "proven",
		"---\nstatus:\n---\n":                  "proven",
		"no front matter\n":                    "missing",
		"---\nstatus: proven\nno end of it\n":  "missing",
		"---\n---\nstatus: refuted\n---\n":     "refuted", // the gate reads from line 2 to the next ---
		"---\nstatus: stale\nstatus: x\n---\n": "stale",
	} {
		if err := os.WriteFile(filepath.Join(dir, "t.md"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := learningRecordStatus("t"); got != want {
			t.Errorf("%q: %s, want %s", body, got, want)
		}
	}
	if got := learningRecordStatus("none"); got != "missing" {
		t.Errorf("no file: %s", got)
	}
}
