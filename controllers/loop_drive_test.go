package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
)

// An action lost with the operator (or never started) is planned again as
// the loop says now: when the spec changed meanwhile so that its state runs
// no action, the run ends with that reason, and the event that says so is
// kept in order (the step once dereferenced a nil action and dropped it).
func TestLostActionAfterSpecEdit(t *testing.T) {
	f := newStartFixture(t)
	r := f.reconciler()
	r.StartGrace = -1
	f.reconcile(t, r) // the start and the first action, saved
	got, _ := f.saved(t)
	if got.Status.Action == nil {
		t.Fatalf("no action in flight: %+v", got.Status.RunState)
	}
	got.Spec.States["a"] = v1alpha1.State{Next: "b"}
	if err := f.c.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	f.actions = newHeldActions() // a new operator process: the action is lost
	r = f.reconciler()
	f.reconcile(t, r)
	got, kinds := f.saved(t)
	if got.Status.Phase != v1alpha1.PhaseFailed || got.Status.TerminatedBy != v1alpha1.TerminatedError ||
		!strings.Contains(got.Status.Message, "has no action") {
		t.Fatalf("status %+v", got.Status.RunState)
	}
	if kinds[len(kinds)-1] != "loop_complete" {
		t.Errorf("event log %v does not end with loop_complete", kinds)
	}
	evs, err := configmaps.Read(context.Background(), f.c, got)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: a gap", i, e.Seq)
		}
	}
	if n := int64(len(evs)); got.Status.LastSeq != n {
		t.Errorf("lastSeq %d, %d events logged", got.Status.LastSeq, n)
	}
}

// An action in flight that its runner lost runs again and the event log
// says so (action_restarted); one whose Pod was never made just starts:
// nothing was restarted.
func TestRestartedOnlyWhenLost(t *testing.T) {
	for _, tc := range []struct {
		name          string
		neverStarted  bool
		wantRestarted bool
	}{{"lost", false, true}, {"never started", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStartFixture(t)
			r := f.reconciler()
			r.StartGrace = -1
			f.reconcile(t, r) // the start and the first action, saved
			f.actions = newHeldActions()
			f.actions.neverStarted = tc.neverStarted
			r = f.reconciler()
			f.reconcile(t, r)
			got, kinds := f.saved(t)
			restarted := slices.Contains(kinds, "action_restarted")
			if restarted != tc.wantRestarted {
				t.Errorf("action_restarted in %v: %v, want %v", kinds, restarted, tc.wantRestarted)
			}
			if got.Status.Action == nil || f.actions.started[f.key(got.Status.Action.Iteration)] != 1 {
				t.Errorf("the action was not started again: %+v, started %v", got.Status.Action, f.actions.started)
			}
		})
	}
}
