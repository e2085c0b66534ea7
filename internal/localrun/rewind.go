package localrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/safefile"
)

// Rewind puts the saved run back to its checkpoint of iteration (the
// newest good checkpoint when iteration is nil), records a loop_rewind
// event, and saves it stopped (Interrupted): `looprun resume` then
// continues from there. It works
// when the state file itself is unreadable: the run is rebuilt from the
// checkpoint, the event log and loopFile.
func (s *Store) Rewind(m *executor.Machine, iteration *int32, loopFile string, ctxValues map[string]any, now time.Time) (*v1alpha1.RunState, error) {
	unlock, err := s.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	good, bad, err := s.Checkpoints()
	if err != nil {
		return nil, err
	}
	cp, err := pickGood(good, bad, iteration)
	if err != nil {
		return nil, err
	}
	from, err := cp.RunState()
	if err != nil {
		return nil, err
	}
	run := &v1alpha1.RunState{RunID: from.RunID, StartedAt: from.StartedAt}
	if sf, err := ReadStateFile(s.StatePath()); err == nil {
		if saved, err := sf.RunState(); err == nil {
			run = saved
			if loopFile == "" {
				loopFile = sf.LoopFile
			}
			if ctxValues == nil {
				ctxValues = sf.Context
			}
		}
	}
	events, err := eventlog.Read(s.EventsPath())
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		run.LastSeq = max(run.LastSeq, e.Seq)
	}
	evs := m.Restore(run, from, now, executor.EventLoopRewind, nil)
	run.RunID = executor.RewoundRunID(run.RunID)
	// Nothing runs a rewound local run until looprun resume: it is saved
	// stopped where it was put back, not running.
	run.Phase, run.TerminatedBy = v1alpha1.PhaseInterrupted, v1alpha1.TerminatedInterrupted
	run.Message = fmt.Sprintf("rewound to iteration %d: looprun resume goes on from there", run.Iteration)
	w, err := s.openWriter(loopFile, ctxValues)
	if err != nil {
		return nil, err
	}
	return run, errors.Join(w.save(run, evs, nil), w.close())
}

func pickGood(good []history.Checkpoint, bad []error, iteration *int32) (*history.Checkpoint, error) {
	for i := len(good) - 1; i >= 0; i-- {
		if iteration == nil || good[i].Iteration == *iteration {
			return &good[i], nil
		}
	}
	for _, err := range bad {
		var c *history.CorruptError
		if errors.As(err, &c) && (iteration == nil || c.Iteration == *iteration || c.Iteration < 0) {
			return nil, fmt.Errorf("cannot rewind: %w", err)
		}
	}
	if iteration == nil {
		return nil, fmt.Errorf("cannot rewind: %w: the run has no checkpoints", history.ErrMissing)
	}
	return nil, fmt.Errorf("cannot rewind: %w: no checkpoint of iteration %d is kept", history.ErrMissing, *iteration)
}

// PruneResult is a run Prune removed (or would remove).
type PruneResult struct {
	Name    string
	Status  string
	Updated time.Time
	Files   []string
}

// Prune removes the local runs under loopsDir last updated before cutoff:
// their state, events, checkpoints and output logs. A run that is running
// now (its lock is held) is kept whatever its age. With dryRun nothing is
// removed.
func Prune(loopsDir string, cutoff time.Time, dryRun bool) ([]PruneResult, error) {
	paths, err := filepath.Glob(filepath.Join(loopsDir, ".running", "*.state.json"))
	if err != nil {
		return nil, err
	}
	var out []PruneResult
	var errs []error
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".state.json")
		s, err := NewStore(loopsDir, name)
		if err != nil {
			continue // not a run of looprun's
		}
		updated, status := lastUpdate(p)
		if !updated.Before(cutoff) {
			continue
		}
		unlock, err := s.Lock()
		if err != nil {
			continue // running now
		}
		res := PruneResult{Name: name, Status: status, Updated: updated}
		for _, f := range append([]string{s.StatePath(), s.EventsPath(), s.CheckpointsPath(), s.StdoutPath(), s.StderrPath(), s.LoopPath()}, safefile.Slots(s.StatePath())...) {
			if _, err := os.Stat(f); err != nil {
				continue
			}
			res.Files = append(res.Files, f)
			if !dryRun {
				errs = append(errs, os.Remove(f))
			}
		}
		if !dryRun {
			errs = append(errs, os.Remove(s.lockPath()))
		}
		unlock()
		out = append(out, res)
	}
	return out, errors.Join(errs...)
}

// lastUpdate is when a run last changed: updated_at, or the file's time
// when the state file cannot be read.
func lastUpdate(path string) (time.Time, string) {
	if sf, err := ReadStateFile(path); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, sf.UpdatedAt); err == nil {
			return t, sf.Status
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}, "unreadable"
	}
	return fi.ModTime(), "unreadable"
}
