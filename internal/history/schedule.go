package history

import (
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Schedule takes a run's checkpoints when spec.history says one is due
// (checkpointEvery, checkpointInterval), remembering when it took the last:
// the one piece of checkpoint timing, shared by the operator and local runs.
type Schedule struct {
	Spec *v1alpha1.LoopSpec
	// Loop names the checkpoints.
	Loop string
	// Last is when the newest checkpoint was taken; nil: none yet. A run
	// that goes on (a resumed one, an operator restart) starts from the
	// time of its newest kept checkpoint.
	Last *time.Time
}

// Take returns a checkpoint of run, after a completed state, when one is
// due; nil when none is, or the run has ended.
func (s *Schedule) Take(run *v1alpha1.RunState, now time.Time) (*Checkpoint, error) {
	return s.Snapshot(run, now).Checkpoint()
}

// Snapshot is Take with the encoding left for later (a local run encodes
// it while the next action's process starts): the run state is copied
// now. nil when no checkpoint is due.
func (s *Schedule) Snapshot(run *v1alpha1.RunState, now time.Time) *Snapshot {
	if run.Phase.IsFinished() || !s.Spec.CheckpointDue(run.Iteration, s.Last, now) {
		return nil
	}
	s.Last = &now
	return &Snapshot{loop: s.Loop, run: snapshot(run), at: now}
}

// Snapshot is a checkpoint due, not yet encoded.
type Snapshot struct {
	loop string
	run  *v1alpha1.RunState
	at   time.Time
}

// Checkpoint encodes the snapshot; nil for a nil one.
func (s *Snapshot) Checkpoint() (*Checkpoint, error) {
	if s == nil {
		return nil, nil
	}
	return encode(s.loop, s.run, s.at)
}
