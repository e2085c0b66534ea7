package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A grandchild's captures and how it ended come back to the parent inside
// the child's entry, as little-loops nests a child's captured into its
// parent's: ${captured.STATE.INNER.NAME.output}, however deep.
func TestSubLoopGrandchildCapturesComeBack(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) { st.ContextPassthrough = true })
	spec.States["done"] = v1alpha1.State{Action: "echo ${captured.run.inner.greeting.output} ${captured.run.inner.terminated_by}" +
		" ${captured.run.inner.deeper.x.output} ${captured.run.inner.deeper.terminated_by} ${captured.run.bare.failure_terminal}" +
		" ${captured.run.bare.error:default=none}", Next: "late"}
	m, run, _ := startSubLoop(t, spec)
	// The child: its state inner ran a loop (with captures, which ran one
	// more: deeper), its state bare ran one that failed (no captures).
	child := &ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, Captured: map[string]v1alpha1.CapturedResult{
		"inner": {Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal", Captured: map[string]v1alpha1.ChildCapture{
			"greeting": {Output: "hello"},
			"deeper":   {TerminatedBy: "max_steps"},
			"deeper.x": {Output: "deep", Verdict: "yes"},
		}}},
		"bare": {Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal", FailureTerminal: true}},
	}}
	m.Complete(run, &ActionResult{Child: child}, t0)
	step, _ := m.Plan(run, t0)
	if want := "echo hello terminal deep max_steps True none"; step.Kind != StepAction || step.Action.Command != want {
		t.Fatalf("next action %+v, want %q", step.Action, want)
	}
	got := run.Captured["run"].Loop.Captured
	if got["inner"].TerminatedBy != "terminal" || got["inner.greeting"].Output != "hello" || got["inner.deeper.x"].Output != "deep" ||
		!got["bare"].FailureTerminal {
		t.Fatalf("the child's captures as kept: %+v", got)
	}
}

// Without contextPassthrough or with, only how the child ended comes back.
func TestSubLoopWithoutBindingKeepsOnlyTheEnding(t *testing.T) {
	m, run, _ := startSubLoop(t, parentSpec(nil))
	child := &ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, Captured: map[string]v1alpha1.CapturedResult{"fix": {Output: "patched"}}}
	m.Complete(run, &ActionResult{Child: child}, t0)
	if l := run.Captured["run"].Loop; l == nil || l.TerminatedBy != "terminal" || l.Captured != nil {
		t.Fatalf("captured[run].loop = %+v", l)
	}
}

// captured.STATE.error is there only when the child ended in error, as in
// little-loops: a child cut off by a limit, or by a cycle, has a message
// but leaves no error.
func TestSubLoopErrorOnlyForAnErrorEnding(t *testing.T) {
	cases := []struct {
		by   v1alpha1.TerminationReason
		want string
	}{
		{v1alpha1.TerminatedError, "boom"},
		{v1alpha1.TerminatedTimeout, ""},
		{v1alpha1.TerminatedMaxIterations, ""},
		{v1alpha1.TerminatedCycleDetected, ""},
		{v1alpha1.TerminatedTerminal, ""},
	}
	for _, c := range cases {
		t.Run(string(c.by), func(t *testing.T) {
			m, run, _ := startSubLoop(t, parentSpec(nil))
			m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: c.by, Error: "boom"}}, t0.Add(time.Second))
			if got := run.Captured["run"].Loop.Error; got != c.want {
				t.Fatalf("captured[run].loop.error = %q, want %q", got, c.want)
			}
		})
	}
}

// With contextPassthrough, an earlier sub-loop state's entry reaches the
// next child whole (how its loop ended, its captures), as little-loops
// passes a capture that is not an action's; an action's capture gives its
// output.
func TestSubLoopPassthroughGivesEarlierSubLoopEntries(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) { st.ContextPassthrough = true })
	m, run, _ := startSubLoop(t, spec)
	run.Captured = map[string]v1alpha1.CapturedResult{
		"first": {Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal", Captured: map[string]v1alpha1.ChildCapture{"greeting": {Output: "hello"}}}},
		"issue": {Output: "ENH-1", ExitCode: 0},
	}
	step, _ := m.Plan(run, t0)
	got, err := ChildContext(step.Loop, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := got["first"].(map[string]any)
	if !ok || first["terminated_by"] != "terminal" || got["issue"] != "ENH-1" {
		t.Fatalf("passthrough context %v", got)
	}
	if greeting, _ := first["greeting"].(map[string]any); greeting["output"] != "hello" {
		t.Fatalf("the earlier child's capture: %v", first)
	}
}
