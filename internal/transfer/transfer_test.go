package transfer

import (
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// Imported under another name, a run's child in flight is named as the
// imported parent will look for it, in the map and in the run state, even
// when the export does not carry that child; finished children keep their
// names.
func TestNameChildren(t *testing.T) {
	state := &v1alpha1.RunState{RunID: "r1", Action: &v1alpha1.ActionStatus{State: "run", Iteration: 3, Child: "old-run-1"}}
	want := executor.ChildName("moved", "r1", "run", 3)
	run := &history.Run{Children: []history.Run{{Loop: v1alpha1.Loop{}}, {Loop: v1alpha1.Loop{}}}}
	run.Children[0].Loop.Name, run.Children[1].Loop.Name = "old-run-1", "old-done-0"
	names := nameChildren(run, "moved", state.DeepCopy())
	if names["old-run-1"] != want || names["old-done-0"] != "old-done-0" {
		t.Errorf("names %v", names)
	}
	alone := state.DeepCopy()
	nameChildren(&history.Run{}, "moved", alone)
	if alone.Action.Child != want {
		t.Errorf("the run state's child %q, want %q", alone.Action.Child, want)
	}
}
