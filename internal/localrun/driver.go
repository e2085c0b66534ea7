package localrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner/process"
	"github.com/looprun/looprun/internal/tracing"
)

// ErrNothingToResume is returned when the saved run has completed or failed.
var ErrNothingToResume = errors.New("nothing to resume")

// ActionRunner runs one action and waits for it. The action may begin
// only once ready returns nil (the step that starts it is on disk); ready
// is told the action's process group.
type ActionRunner interface {
	RunWhenReady(ctx context.Context, a *executor.Action, ready func(pgid int) error) executor.ActionResult
}

// Clock is the driver's time: now, and waiting out a backoff.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t, or when ctx ends.
	SleepUntil(ctx context.Context, t time.Time)
}

// recorder keeps the steps a driver takes: the Store's writer for a local
// run; nothing for a simulation.
type recorder interface {
	// save keeps the run state, the step's events and its checkpoint, and
	// returns once they are on disk.
	save(run *v1alpha1.RunState, events []executor.Event, cp *history.Snapshot) error
	// saveAsync starts keeping them while the next action's process
	// starts; wait returns once they are on disk (or why not). run must
	// not change until then.
	saveAsync(run *v1alpha1.RunState, events []executor.Event, cp *history.Snapshot) error
	wait() error
	// recordAction notes the running action's process group, for a
	// resume to kill should this process die; forgetAction drops it.
	recordAction(pgid int)
	forgetAction()
	close() error
}

// Driver runs a loop locally from start to end: the one loop over Plan and
// Complete that local runs, resumed runs and simulations share.
type Driver struct {
	Machine *executor.Machine
	Runner  ActionRunner
	Store   *Store
	// LoopFile and Context are saved in the state file so resume finds them.
	LoopFile string
	Context  map[string]any
	// Clock is the time; nil means the real one.
	Clock Clock
	// Decide, when set, gives the result of a state that runs no action
	// (simulate scripts it); nil lets the machine judge it.
	Decide func(run *v1alpha1.RunState) *executor.ActionResult
	// Judge answers the LLM judge's questions; nil answers each with an
	// error verdict saying no judge is configured.
	Judge evaluate.Judge
	// Approver answers approval states; nil waits for the answer file
	// that looprun approve and reject write beside the state file.
	Approver Approver
	// Terminal, when set, is where approval states also ask (looprun run
	// on a terminal).
	Terminal *Terminal
	// Observers see every batch of events as it happens (a progress
	// display); the Tracer's spans are made the same way.
	Observers []executor.Observer
	// SubLoops runs the states with loop:; nil (a simulation) runs none:
	// ScriptSubLoop gives the result that stands for the child's ending
	// (nil: every child completed).
	SubLoops      *SubLoops
	ScriptSubLoop func(*executor.SubLoop) executor.ActionResult
	// Depth is 0 for a run, n for a sub-loop n levels down; Ancestors are
	// the loop files of the runs above it, where a cycle is found.
	Depth     int
	Ancestors []string
	// MaxCost, when set, is the run's own cost ceiling in millionths of a
	// dollar (looprun run/resume --max-cost), kept in its state.
	MaxCost *int64
	// OnExitHook, when set, is told when the exit hook starts and ends.
	OnExitHook func(*v1alpha1.ExitHookStatus)
	// OnGit, when set, is told how the run's clone (gitws.OpClone) or
	// push ended.
	OnGit func(op string, st *v1alpha1.GitOpStatus)
	// Tracer, when set, makes spans of the run's events (TraceParent, a
	// W3C traceparent, is where a new run's trace hangs: $TRACEPARENT).
	Tracer      *tracing.Tracer
	TraceParent string
	// forward, for a sub-loop's driver, gets each batch of its events once
	// it is on disk (for the parent's log).
	forward func([]executor.Event)
}

func (d *Driver) now() time.Time { return d.clock().Now() }

func (d *Driver) clock() Clock {
	if d.Clock != nil {
		return d.Clock
	}
	return realClock{}
}

// Start clears the previous run's files and runs the loop from its initial
// state. The returned run state is the final one.
func (d *Driver) Start(ctx context.Context, runID string) (*v1alpha1.RunState, error) {
	if err := d.Store.Clear(); err != nil {
		return nil, err
	}
	w, err := d.openWriter()
	if err != nil {
		return nil, err
	}
	run := &v1alpha1.RunState{}
	events := d.Machine.Start(run, runID, d.now())
	d.Tracer.Begin(run, d.TraceParent)
	d.setMaxCost(run)
	sched := d.schedule(nil)
	err = d.drive(ctx, d.recorder(w), sched, run, events)
	return run, errors.Join(err, w.close())
}

// setMaxCost gives the run its own cost ceiling, when one was asked for.
func (d *Driver) setMaxCost(run *v1alpha1.RunState) {
	if d.MaxCost == nil {
		return
	}
	if run.Budget == nil {
		run.Budget = &v1alpha1.BudgetStatus{}
	}
	run.Budget.RunMaxCostMicroUSD = ptr.To(*d.MaxCost)
}

// Resume continues the saved run. ErrNothingToResume when it completed or failed.
func (d *Driver) Resume(ctx context.Context, run *v1alpha1.RunState) error {
	saved := run.LastSeq
	d.setMaxCost(run)
	events, ok := d.Machine.Resume(run, d.now())
	if !ok {
		return fmt.Errorf("%w: loop %q %s", ErrNothingToResume, d.Machine.Name(), runStatus(run))
	}
	// An action a killed run left behind goes before it runs again.
	if _, err := process.KillRecordedGroup(d.Store.ActionPath()); err != nil {
		return fmt.Errorf("stop the action a killed run left running: %w", err)
	}
	// Events and checkpoints after the saved state belong to a step that
	// never finished saving; it runs again, so they go (and a line cut
	// short by a full disk with them).
	if err := eventlog.TruncateAfter(d.Store.EventsPath(), saved); err != nil {
		return err
	}
	if err := d.Store.repairCheckpoints(saved); err != nil {
		return err
	}
	// The checkpoint schedule goes on from the newest kept checkpoint.
	var last *time.Time
	if cp, err := d.Store.LastGoodCheckpoint(); err == nil {
		last = &cp.Time
	}
	w, err := d.openWriter()
	if err != nil {
		return err
	}
	return errors.Join(d.drive(ctx, d.recorder(w), d.schedule(last), run, events), w.close())
}

// recorder is where the driver's steps go: the writer, and for a sub-loop
// the parent's log after it.
func (d *Driver) recorder(w *writer) recorder {
	var r recorder = w
	if d.forward != nil {
		r = &forwarder{recorder: w, forward: d.forward}
	}
	return r
}

func (d *Driver) openWriter() (*writer, error) {
	w, err := d.Store.openWriter(d.LoopFile, d.Context)
	if err != nil {
		return nil, err
	}
	if err := w.openNote(); err != nil {
		return nil, errors.Join(err, w.close())
	}
	w.cps.max = d.Machine.Spec().GetMaxCheckpoints()
	return w, nil
}

func (d *Driver) schedule(last *time.Time) *history.Schedule {
	return &history.Schedule{Spec: d.Machine.Spec(), Loop: d.Machine.Name(), Last: last}
}

// drive steps the machine until the run ends or ctx is cancelled. Saving the
// step that starts an action overlaps with the action; a save always
// completes before the next one starts, so they reach the disk in order.
func (d *Driver) drive(ctx context.Context, w recorder, sched *history.Schedule, run *v1alpha1.RunState, batch []executor.Event) error {
	d.notify(run, batch)
	var cp *history.Snapshot // taken after the last completed state, saved with the next save
	for {
		if ctx.Err() != nil && !run.Phase.IsFinished() { // an ended run's hook records its own end
			return d.interrupt(w, run, batch, cp)
		}
		step, evs := d.Machine.Plan(run, d.now())
		d.notify(run, evs)
		batch = append(batch, evs...)
		switch step.Kind {
		case executor.StepDone, executor.StepPaused:
			// A paused run (its budget spent) is saved as it stands:
			// looprun resume NAME --max-cost N goes on from there. An
			// ended one's push and exit hook come once its end is saved.
			if err := w.save(run, batch, cp); err != nil || step.Kind == executor.StepPaused || !d.Machine.AfterEnd(run) {
				return err
			}
			batch, cp = nil, nil
			continue
		case executor.StepWait:
			if err := w.save(run, batch, cp); err != nil {
				return err
			}
			batch, cp = nil, nil
			d.clock().SleepUntil(ctx, step.WaitUntil) // if cancelled, the loop head interrupts
			continue
		case executor.StepEvaluate:
			var res *executor.ActionResult
			if d.Decide != nil {
				res = d.Decide(run)
			}
			evs = d.complete(ctx, run, res)
		default:
			// The step that starts an action, a child or a wait is on
			// disk before it begins (an action's is saved while its
			// process starts): a run killed at any moment never runs a
			// finished action again, and resume finds what was in flight.
			save := w.save
			if step.Kind == executor.StepAction {
				save = w.saveAsync
			}
			if err := save(run, batch, cp); err != nil {
				return err
			}
			batch, cp = nil, nil
			var done bool
			var err error
			if evs, done, err = d.await(ctx, w, run, step); done || err != nil {
				return err
			}
		}
		d.notify(run, evs)
		batch = append(batch, evs...)
		if taken := sched.Snapshot(run, d.now()); taken != nil {
			cp = taken
		}
	}
}

// await runs what the step just saved waits for (an action, the run's
// clone, push or exit hook, a sub-loop, a person's answer) and completes
// it. done: the drive ends there (interrupted, a child paused), with err.
func (d *Driver) await(ctx context.Context, w recorder, run *v1alpha1.RunState, step executor.Step) (evs []executor.Event, done bool, err error) {
	var res *executor.ActionResult
	switch {
	case step.Kind == executor.StepAction && executor.IsLifecycle(step.Action):
		r, err := d.lifecycle(ctx, w, run, step.Action)
		if err != nil {
			return nil, true, err
		}
		evs = d.complete(ctx, run, &r)
		d.lifecycleEnded(run, step.Action)
		return evs, false, nil
	case step.Kind == executor.StepAction:
		r, err := d.runAction(ctx, w, step.Action)
		if err != nil {
			return nil, true, err // the action did not run
		}
		res = &r
	default:
		r, err := d.answer(ctx, w, run, step)
		if paused := (*childPausedError)(nil); errors.As(err, &paused) {
			// Saved as paused: looprun resume NAME --max-cost N goes
			// on with the child, its share raised.
			evs := d.Machine.ChildPaused(run, paused.child, paused.why, d.now())
			d.notify(run, evs)
			return nil, true, w.save(run, evs, nil)
		}
		if err != nil {
			return nil, true, err
		}
		res = r
	}
	if ctx.Err() != nil {
		return nil, true, d.interrupt(w, run, nil, nil)
	}
	return d.complete(ctx, run, res), false, nil
}

// lifecycle runs the run's clone, push or exit hook (a simulation has
// none: no checkout, and its machine runs no hook). Its result is recorded
// even when the run is being stopped: the end, or the checkout, is what
// the state says.
func (d *Driver) lifecycle(ctx context.Context, w recorder, run *v1alpha1.RunState, a *executor.Action) (executor.ActionResult, error) {
	if a.Exit && d.OnExitHook != nil {
		d.OnExitHook(run.ExitHook)
	}
	if a.Git != nil { // git runs in this process: nothing to record
		if err := w.wait(); err != nil {
			return executor.ActionResult{}, err
		}
		return d.Runner.RunWhenReady(ctx, a, nil), nil
	}
	return d.runAction(ctx, w, a)
}

// runAction runs a as a process once the step that starts it is on disk,
// its group recorded meanwhile for a resume to stop should this process
// die; the error says the save failed (and the action did not run).
func (d *Driver) runAction(ctx context.Context, w recorder, a *executor.Action) (executor.ActionResult, error) {
	res := d.Runner.RunWhenReady(ctx, a, func(pgid int) error {
		w.recordAction(pgid)
		return w.wait()
	})
	w.forgetAction()
	return res, w.wait()
}

// lifecycleEnded tells OnExitHook and OnGit how the run's clone, push or
// exit hook ended.
func (d *Driver) lifecycleEnded(run *v1alpha1.RunState, a *executor.Action) {
	switch {
	case a.Exit && d.OnExitHook != nil:
		d.OnExitHook(run.ExitHook)
	case a.Git != nil && d.OnGit != nil && run.Git != nil:
		st := run.Git.Clone
		if a.Git.Op == gitws.OpPush {
			st = run.Git.Push
		}
		if st != nil {
			d.OnGit(a.Git.Op, st)
		}
	}
}

// complete completes the current state with res, asking the LLM judge
// first when the machine says its verdict is the judge's.
func (d *Driver) complete(ctx context.Context, run *v1alpha1.RunState, res *executor.ActionResult) []executor.Event {
	step, evs := d.Machine.Complete(run, res, d.now())
	if step.Kind != executor.StepJudge {
		return evs
	}
	res = executor.Judged(res, d.judge().Judge(ctx, *step.Judge))
	_, evs = d.Machine.Complete(run, res, d.now())
	return evs
}

// answer waits for the answer to a sub-loop's or an approval's step: how
// the child ended, or a person's answer (nil once the deadline passed).
// When ctx ends first, the caller interrupts the run.
func (d *Driver) answer(ctx context.Context, w recorder, run *v1alpha1.RunState, step executor.Step) (*executor.ActionResult, error) {
	if step.Kind == executor.StepLoop {
		res, err := d.runSubLoop(ctx, w, run, step.Loop)
		return &res, err
	}
	ans, err := d.approver().Await(ctx, step.Approval)
	switch {
	case ctx.Err() != nil:
		return nil, nil
	case err != nil || ans == nil:
		return nil, err
	}
	return &executor.ActionResult{Approval: ans}, nil
}

func (d *Driver) approver() Approver {
	if d.Approver != nil {
		return d.Approver
	}
	file := &fileApprover{path: d.Store.AnswerPath(), clock: d.clock(), poll: 200 * time.Millisecond}
	if d.Terminal != nil {
		return &terminalApprover{term: d.Terminal, file: file}
	}
	return file
}

func (d *Driver) judge() evaluate.Judge {
	if d.Judge == nil {
		return NoJudge{}
	}
	return d.Judge
}

// NoJudge answers every question as a run without an LLM judge does.
type NoJudge struct{}

// Judge implements evaluate.Judge.
func (NoJudge) Judge(context.Context, evaluate.JudgeRequest) evaluate.Result {
	return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "no LLM judge is configured (set ANTHROPIC_API_KEY)"}}
}

// interrupt records that the run was stopped; the action in flight runs again on resume.
func (d *Driver) interrupt(w recorder, run *v1alpha1.RunState, batch []executor.Event, cp *history.Snapshot) error {
	evs := d.Machine.Interrupt(run, d.now(), "interrupted")
	d.notify(run, evs)
	return w.save(run, append(batch, evs...), cp)
}

// notify shows a batch of the run's events to its observers: the
// Observers, then the Tracer (its spans, and what it keeps in the run, are
// saved with the batch).
func (d *Driver) notify(run *v1alpha1.RunState, evs []executor.Event) {
	executor.Observe(d.Observers, run, evs)
	if d.Tracer != nil && len(evs) > 0 {
		d.Tracer.Observe(tracing.Run{Loop: d.Machine.Name()}, run, evs)
	}
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) SleepUntil(ctx context.Context, until time.Time) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
