package localrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// ErrNothingToResume is returned when the saved run has completed or failed.
var ErrNothingToResume = errors.New("nothing to resume")

// ActionRunner runs one action and waits for it.
type ActionRunner interface {
	Run(ctx context.Context, a *executor.Action) executor.ActionResult
}

// Driver runs a loop locally from start to end.
type Driver struct {
	Machine *executor.Machine
	Runner  ActionRunner
	Store   *Store
	// LoopFile and Context are saved in the state file so resume finds them.
	LoopFile string
	Context  map[string]any
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnEvents, when set, sees every event as it happens (progress display).
	OnEvents func([]executor.Event)
}

func (d *Driver) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Start clears the previous run's files and runs the loop from its initial
// state. The returned run state is the final one.
func (d *Driver) Start(ctx context.Context, runID string) (*v1alpha1.RunState, error) {
	if err := d.Store.Clear(); err != nil {
		return nil, err
	}
	w, err := d.Store.openWriter(d.LoopFile, d.Context)
	if err != nil {
		return nil, err
	}
	run := &v1alpha1.RunState{}
	events := d.Machine.Start(run, runID, d.now())
	err = d.drive(ctx, w, run, events)
	return run, errors.Join(err, w.close())
}

// Resume continues the saved run. ErrNothingToResume when it completed or failed.
func (d *Driver) Resume(ctx context.Context, run *v1alpha1.RunState) error {
	saved := run.LastSeq
	events, ok := d.Machine.Resume(run, d.now())
	if !ok {
		return fmt.Errorf("%w: loop %q %s", ErrNothingToResume, d.Machine.Name(), phaseToStatus(run.Phase))
	}
	// Events after the saved state belong to a step that never finished
	// saving; it runs again, so they go.
	if err := eventlog.TruncateAfter(d.Store.EventsPath(), saved); err != nil {
		return err
	}
	w, err := d.Store.openWriter(d.LoopFile, d.Context)
	if err != nil {
		return err
	}
	return errors.Join(d.drive(ctx, w, run, events), w.close())
}

// drive steps the machine until the run ends or ctx is cancelled. Saving the
// step that starts an action overlaps with the action; a save always
// completes before the next one starts, so they reach the disk in order.
func (d *Driver) drive(ctx context.Context, w *writer, run *v1alpha1.RunState, batch []executor.Event) error {
	notify := d.notify
	notify(batch)
	w.cps.max = d.Machine.Spec().GetMaxCheckpoints()
	var cp *history.Checkpoint // taken after the last completed state, saved with the next save
	var lastCheckpoint *time.Time
	for {
		if ctx.Err() != nil {
			return d.interrupt(w, run, batch, cp)
		}
		step, evs := d.Machine.Plan(run, d.now())
		notify(evs)
		batch = append(batch, evs...)
		switch step.Kind {
		case executor.StepDone:
			return w.save(run, batch, cp)
		case executor.StepEvaluate:
			evs = d.Machine.Complete(ctx, run, nil, d.now())
		case executor.StepWait:
			if err := w.save(run, batch, cp); err != nil {
				return err
			}
			batch, cp = nil, nil
			sleepUntil(ctx, step.WaitUntil, d.now()) // if cancelled, the loop head interrupts
			continue
		case executor.StepAction:
			if err := w.saveAsync(run, batch, cp); err != nil {
				return err
			}
			batch, cp = nil, nil
			res := d.Runner.Run(ctx, step.Action)
			if ctx.Err() != nil {
				return d.interrupt(w, run, nil, nil)
			}
			evs = d.Machine.Complete(ctx, run, &res, d.now())
		}
		notify(evs)
		batch = append(batch, evs...)
		if now := d.now(); !run.Phase.IsFinished() && d.Machine.Spec().CheckpointDue(run.Iteration, lastCheckpoint, now) {
			taken, err := history.Take(d.Machine.Name(), run, now)
			if err != nil {
				return err
			}
			cp, lastCheckpoint = taken, &now
		}
	}
}

// interrupt records that the run was stopped; the action in flight runs again on resume.
func (d *Driver) interrupt(w *writer, run *v1alpha1.RunState, batch []executor.Event, cp *history.Checkpoint) error {
	evs := d.Machine.Interrupt(run, d.now(), "interrupted")
	d.notify(evs)
	return w.save(run, append(batch, evs...), cp)
}

// notify shows events to OnEvents.
func (d *Driver) notify(evs []executor.Event) {
	if d.OnEvents != nil && len(evs) > 0 {
		d.OnEvents(evs)
	}
}

// sleepUntil waits until the time or the cancellation of ctx.
func sleepUntil(ctx context.Context, until, now time.Time) {
	t := time.NewTimer(until.Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
