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
	if run.Phase.IsFinished() || !s.Spec.CheckpointDue(run.Iteration, s.Last, now) {
		return nil, nil
	}
	cp, err := Take(s.Loop, run, now)
	if err != nil {
		return nil, err
	}
	s.Last = &now
	return cp, nil
}
