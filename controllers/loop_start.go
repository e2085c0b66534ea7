package controllers

import (
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// DefaultStartGrace is how long a new run's first status write waits for
// its first action to end.
const DefaultStartGrace = time.Second

// unsavedStart is the first step of a new run while its status write
// waits: the run started and its first action runs, and nothing of it is
// saved yet. When the action ends within the grace, one status write and
// one event-log append save the start and the first transition together;
// otherwise the start is saved when the grace is up, as it would have been
// at once. Nothing is lost meanwhile: an action is known by its Loop, run
// and iteration, so a restarted operator that starts the run again finds
// the same action (a Pod is adopted; a local process left running is
// killed and run again).
type unsavedStart struct {
	status v1alpha1.LoopStatus
	events []executor.Event
	// saveBy is when the start is written, the action ended or not.
	saveBy time.Time
}

// neverSaved reports whether nothing of a run was written to the status.
func neverSaved(loop *v1alpha1.Loop) bool {
	return loop.Status.Phase == "" && loop.Status.EventLog == nil
}

// resumeUnsaved puts back the status of a run whose start waits to be
// saved and returns it; for a Loop nothing was saved of, it returns an
// empty one (the step may wait), and nil for any other.
func (r *LoopReconciler) resumeUnsaved(loop *v1alpha1.Loop) *unsavedStart {
	if !neverSaved(loop) || loop.Spec.ResumeFrom != nil || r.startGrace() <= 0 {
		return nil
	}
	if u := r.remembered(loop).unsaved; u != nil {
		loop.Status = *u.status.DeepCopy()
		return u
	}
	return &unsavedStart{}
}

func (r *LoopReconciler) startGrace() time.Duration {
	if r.StartGrace == 0 {
		return DefaultStartGrace
	}
	return r.StartGrace
}

// deferStart keeps the step in memory instead of writing it when it is
// the start of a run whose first action now runs, and the grace is not
// up. It reports whether it did, and when to look again at the latest.
func (s *step) deferStart(carried *unsavedStart, err error, recheck time.Duration) (time.Duration, bool) {
	run := &s.loop.Status.RunState
	if carried == nil || err != nil || s.completed || s.cp != nil || !s.health.plain() ||
		run.Phase != v1alpha1.PhaseRunning || run.Action == nil || run.Action.Child != "" {
		return 0, false
	}
	saveBy := carried.saveBy
	if saveBy.IsZero() {
		saveBy = s.now.Add(s.r.startGrace())
	}
	wait := saveBy.Sub(s.now)
	if wait <= 0 {
		return 0, false
	}
	s.loop.Status.ObservedGeneration = s.loop.Generation
	m := s.r.remembered(s.loop)
	m.running = true
	m.unsaved = &unsavedStart{status: *s.loop.Status.DeepCopy(), events: s.events, saveBy: saveBy}
	s.r.remember(s.loop, m)
	if recheck > 0 && recheck < wait {
		wait = recheck
	}
	return wait, true
}
