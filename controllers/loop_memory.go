package controllers

import (
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// memories is what this process keeps per Loop between reconciles, keyed by
// namespace and name: one loopMemory each. Nothing in it is needed for
// correctness after a restart; it saves reads and writes, and counts the
// running Loops for the metric. One Loop is never reconciled by two workers
// at once.
type memories struct {
	byKey sync.Map // types.NamespacedName → loopMemory
	// running is how many remembered Loops are in progress.
	running atomic.Int64
}

// loopMemory is what the reconciler keeps of one Loop. An entry whose UID
// is not the Loop's belongs to a deleted Loop of the same name, and counts
// as none.
type loopMemory struct {
	uid types.UID
	// lastSeq is the last sequence number this process saved, so that a
	// Loop read from a stale cache is read again from the API server.
	lastSeq int64
	// running: the Loop is in progress (the running-loops metric).
	running bool
	// nextStepAt is the status's nextStepAt as this process saved it, to
	// the nanosecond (see exactNextStepAt).
	nextStepAt time.Time
	// unsaved is a new run whose first action runs and whose first status
	// write waits (see deferStart); nil when none.
	unsaved *unsavedStart
}

// recall is what is kept of the Loop; zero when nothing.
func (m *memories) recall(loop *v1alpha1.Loop) loopMemory {
	if v, ok := m.byKey.Load(client.ObjectKeyFromObject(loop)); ok && v.(loopMemory).uid == loop.UID {
		return v.(loopMemory)
	}
	return loopMemory{uid: loop.UID}
}

// keep keeps lm for the Loop, and counts it in the running-loops metric
// while it runs.
func (m *memories) keep(loop *v1alpha1.Loop, lm loopMemory) {
	prev, had := m.byKey.Swap(client.ObjectKeyFromObject(loop), lm)
	m.count(had && prev.(loopMemory).running, lm.running)
}

// drop forgets the Loop (it is gone).
func (m *memories) drop(key types.NamespacedName) {
	if prev, had := m.byKey.LoadAndDelete(key); had {
		m.count(prev.(loopMemory).running, false)
	}
}

// saved keeps what a status write saved: its sequence number, whether the
// run goes on, its exact nextStepAt. A start still waiting stays.
func (m *memories) saved(loop *v1alpha1.Loop) {
	lm := loopMemory{uid: loop.UID, lastSeq: loop.Status.LastSeq, running: !loop.Status.Phase.IsFinished() && loop.Status.Phase != ""}
	if next := loop.Status.NextStepAt; next != nil {
		lm.nextStepAt = next.Time
	}
	if loop.Status.Phase == "" {
		lm.unsaved = m.recall(loop).unsaved // the run's start is still not saved
	}
	m.keep(loop, lm)
}

// finished notes that the Loop's run is over.
func (m *memories) finished(loop *v1alpha1.Loop) {
	if lm := m.recall(loop); lm.running {
		lm.running = false
		m.keep(loop, lm)
	}
}

// stale reports whether the Loop was read from a cache behind what this
// process saved: a step is never planned from a status it moved past.
func (m *memories) stale(loop *v1alpha1.Loop) bool {
	return loop.Status.LastSeq < m.recall(loop).lastSeq
}

// exactNextStepAt gives back to the Loop's nextStepAt (when a retry's or an
// edge's backoff lets the next step start) the fraction of a second the
// status does not keep, when this process saved it: a look at the Loop
// before the wait is up (a spec change, the end of a start's grace) must not
// find it up early. An operator that restarts may start such a step up to a
// second early.
func (m *memories) exactNextStepAt(loop *v1alpha1.Loop) {
	next, saved := loop.Status.NextStepAt, m.recall(loop).nextStepAt
	if next != nil && !saved.IsZero() && next.Time.Equal(saved.Truncate(time.Second)) {
		loop.Status.NextStepAt = &metav1.Time{Time: saved}
	}
}

func (m *memories) count(was, is bool) {
	switch {
	case is && !was:
		runningLoops.Set(float64(m.running.Add(1)))
	case was && !is:
		runningLoops.Set(float64(m.running.Add(-1)))
	}
}

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
	if u := r.memory.recall(loop).unsaved; u != nil {
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
func (s *step) deferStart(waiting *unsavedStart, err error, recheck time.Duration) (time.Duration, bool) {
	run := &s.loop.Status.RunState
	if waiting == nil || err != nil || s.completedState || s.cp != nil || s.out.health != (health{}) ||
		run.Phase != v1alpha1.PhaseRunning || !run.Action.IsAction() {
		return 0, false
	}
	saveBy := waiting.saveBy
	if saveBy.IsZero() {
		saveBy = s.now.Add(s.r.startGrace())
	}
	wait := saveBy.Sub(s.now)
	if wait <= 0 {
		return 0, false
	}
	s.loop.Status.ObservedGeneration = s.loop.Generation
	lm := s.r.memory.recall(s.loop)
	lm.running = true
	lm.unsaved = &unsavedStart{status: *s.loop.Status.DeepCopy(), events: s.events, saveBy: saveBy}
	s.r.memory.keep(s.loop, lm)
	if recheck > 0 && recheck < wait {
		wait = recheck
	}
	return wait, true
}
