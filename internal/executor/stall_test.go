package executor

import (
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

func TestPlateau(t *testing.T) {
	cases := []struct {
		name, history string
		maxStall      int32
		epsilon       float64
		lower         bool
		want          string
		stall         int32
	}{
		{"no history", "", 1, 0.5, false, "success", 0},
		{"one score", "7\n", 1, 0.5, false, "success", 0},
		{"rising", "5\n6\n7.1\n", 1, 0.5, false, "success", 0},
		{"small rises are no progress", "5\n5.2\n5.4\n", 2, 0.5, false, "failure", 2},
		{"one flat round under max", "5\n6\n6\n", 2, 0.5, false, "success", 1},
		{"junk lines skipped", "5\nn/a\n\n5\n", 1, 0.5, false, "failure", 1},
		{"open questions fall", "9\n6\n3\n", 1, 0, true, "success", 0},
		{"open questions stuck", "9\n6\n6\n7\n", 2, 0, true, "failure", 2},
	}
	for _, c := range cases {
		r := plateau(c.history, c.maxStall, c.epsilon, c.lower)
		if r.Verdict != c.want || r.Details["stall_count"] != c.stall {
			t.Errorf("%s: %s %v, want %s with stall %d", c.name, r.Verdict, r.Details, c.want, c.stall)
		}
	}
}

// stallSpec is one state judged by evaluator e, looping on success.
func stallSpec(e v1alpha1.Evaluate) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "check", MaxIterations: i32(100), Context: map[string]apiextensionsJSON{"run_dir": jsonValue("/r")},
		States: map[string]v1alpha1.State{
			"check":   {Action: "echo ${state.iteration}", Evaluate: &e, OnSuccess: "$current", OnFailure: "stalled", OnError: "broken"},
			"stalled": {Terminal: true}, "broken": {Terminal: true},
		}}
}

// stepStall runs the state once with the probe output given; it returns
// the verdict and the action's probe command.
func stepStall(t *testing.T, m *Machine, run *v1alpha1.RunState, probe *ProbeResult) (string, string) {
	t.Helper()
	step, _ := m.Plan(run, t0)
	if step.Kind != StepAction {
		t.Fatalf("step %v", step.Kind)
	}
	m.Complete(run, &ActionResult{ExitCode: 3, Probe: probe}, t0)
	return run.LastResult.Verdict, step.Action.Probe
}

func TestDiffStallCountsUnchangedDiffs(t *testing.T) {
	m, run := startRun(t, "l", stallSpec(v1alpha1.Evaluate{Type: v1alpha1.EvalDiffStall, MaxStall: i32(2), Scope: []string{"src dir", "b"}}), Options{})
	var got []string
	var probe string
	for _, h := range []string{"a", "b", "b", "c", "c", "c"} {
		v, p := stepStall(t, m, run, &ProbeResult{SHA256: h})
		got, probe = append(got, v), p
		if run.Phase.IsFinished() {
			break
		}
	}
	// changed, changed, same once (under 2), changed, same, same: stalled.
	if strings.Join(got, ",") != "success,success,success,success,success,failure" || run.CurrentState != "stalled" {
		t.Fatalf("verdicts %v, state %s", got, run.CurrentState)
	}
	if probe != "git diff --stat -- 'src dir' b" {
		t.Fatalf("probe %q", probe)
	}
	m2, _ := New("l", stallSpec(v1alpha1.Evaluate{Type: v1alpha1.EvalDiffStall}), Options{})
	run = &v1alpha1.RunState{}
	m2.Start(run, "r", t0)
	if v, _ := stepStall(t, m2, run, &ProbeResult{ExitCode: 128, Stderr: "not a git repository"}); v != "error" || !strings.Contains(string(run.LastResult.Details.Raw), "not a git repository") {
		t.Fatalf("git failing: %s %s", v, run.LastResult.Details.Raw)
	}
}

func TestScoreStallReadsTheHistoryFile(t *testing.T) {
	m, run := startRun(t, "l", stallSpec(v1alpha1.Evaluate{Type: v1alpha1.EvalScoreStall}), Options{})
	v, probe := stepStall(t, m, run, &ProbeResult{ExitCode: 1}) // no file yet
	if v != "success" || probe != "cat -- /r/.score_history" {
		t.Fatalf("%s %q", v, probe)
	}
	if v, _ := stepStall(t, m, run, &ProbeResult{Output: "4\n4.2\n"}); v != "failure" {
		t.Fatalf("a flat history: %s", v)
	}
}

func TestActionStallComparesTrackedValues(t *testing.T) {
	spec := stallSpec(v1alpha1.Evaluate{Type: v1alpha1.EvalActionStall, Track: []string{"context.mode"}, MaxRepeat: i32(2)})
	spec.Context["mode"] = jsonValue("same")
	m, run := startRun(t, "l", spec, Options{})
	var got []string
	for range 3 {
		v, _ := stepStall(t, m, run, nil)
		got = append(got, v)
	}
	if strings.Join(got, ",") != "success,success,failure" {
		t.Fatalf("verdicts %v", got)
	}
	// The default tracks the action, which changes with the iteration.
	m, run = startRun(t, "l", stallSpec(v1alpha1.Evaluate{Type: v1alpha1.EvalActionStall}), Options{})
	for range 4 {
		if v, _ := stepStall(t, m, run, nil); v != "success" {
			t.Fatalf("a changing action stalled: %v", run.LastResult)
		}
	}
}
