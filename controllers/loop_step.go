package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner"
)

// reconcileLoop takes one step of a Loop: it starts the run, collects the
// result of the action in flight, or plans and starts the next state. The
// step's events go to the event log before the status is written.
// A new run's start may wait to be saved with its first transition (see
// unsavedStart).
func (r *LoopReconciler) reconcileLoop(ctx context.Context, loop *v1alpha1.Loop) (reconcile.Result, outcome, error) {
	req := pendingRequest(loop)
	ended := loop.Status.Phase.IsFinished()
	if ended {
		r.memory.finished(loop) // its push and exit hook may still run
	}
	if ended && req == "" && (r.Actions == nil || !executor.AfterEnd(&loop.Spec, &loop.Status.RunState)) {
		res, err := r.reconcileFinished(ctx, loop)
		return res, outcome{}, err
	}
	m, err := executor.New(loop.Name, &loop.Spec, executor.Options{
		Env:             func(string) (string, bool) { return "", false },
		ContextDefaults: runContext(loop),
		SearchApart:     true, // a pattern may backtrack for seconds: not in a worker
		// A sub-loop's child is deaf to the signals its actions print, as
		// in little-loops (and as a child runs locally).
		IgnoreSignals: loop.Labels[v1alpha1.LabelParent] != "",
		Prices:        r.Prices,
		Clone:         executor.CloneOf(&loop.Spec),
	})
	if err != nil {
		if ended && req == "" {
			// An ended run whose spec no longer holds runs nothing more.
			res, err := r.reconcileFinished(ctx, loop)
			return res, outcome{}, err
		}
		r.announceInvalid(loop, err)
		return reconcile.Result{}, outcome{health: health{invalid: err.Error()}}, reconcile.TerminalError(err)
	}
	s := &step{r: r, loop: loop, m: m, now: r.now(), ended: ended}
	waiting := r.resumeUnsaved(loop)
	if waiting != nil {
		s.events = slices.Clip(waiting.events)
	}
	if req != "" {
		s.request(ctx, req)
	}
	result, err := s.take(ctx)
	r.Tracer.Begin(&loop.Status.RunState, loop.Annotations[v1alpha1.AnnotationTraceParent])
	if wait, ok := s.deferStart(waiting, err, result.RequeueAfter); ok {
		return reconcile.Result{RequeueAfter: wait}, outcome{deferred: true}, nil
	}
	if aerr := r.appendEvents(ctx, loop, s.events, s.cp); aerr != nil {
		return reconcile.Result{}, outcome{health: health{eventLog: aerr.Error()}}, aerr
	}
	if loop.Status.Phase.IsFinished() && r.EventLog != nil {
		r.EventLog.Forget(client.ObjectKeyFromObject(loop)) // its last append is done
	}
	s.observe(ctx)
	return result, s.out, err
}

// forkRetry is how long a fork whose checkpoint cannot be read waits before
// it looks again (the source may be imported or repaired meanwhile).
const forkRetry = time.Minute

// step is one reconcile's work on a Loop's run.
type step struct {
	r      *LoopReconciler
	loop   *v1alpha1.Loop
	m      *executor.Machine
	now    time.Time
	events []executor.Event
	out    outcome
	// ended is true when the run had ended before this reconcile.
	ended bool
	// recheck asks for another look at a running action after this long.
	recheck time.Duration
	// completedState is true when a state was completed.
	completedState bool
	// cp is the checkpoint taken in this step, stored with its events.
	cp *history.Checkpoint
	// answer is a person's answer to the approval the Loop waits for
	// (an approve or reject request); nil for none.
	approvalAnswer *executor.ApprovalAnswer
}

func (s *step) add(evs []executor.Event) { s.events = append(s.events, evs...) }

func (s *step) take(ctx context.Context) (reconcile.Result, error) {
	run := &s.loop.Status.RunState
	if run.Phase == "" || run.Phase == v1alpha1.PhasePending {
		if ok, why := s.r.queue.admit(s.loop, s.now); !ok {
			s.queued(why)
			return reconcile.Result{RequeueAfter: queueBackstop}, nil
		}
		if s.loop.Spec.ResumeFrom == nil {
			s.add(s.m.Start(run, runID(s.loop), s.now))
		} else if !s.fork(ctx) {
			run.Phase = v1alpha1.PhasePending
			return reconcile.Result{RequeueAfter: forkRetry}, nil
		}
	}
	if g := s.loop.Generation; !run.Phase.IsFinished() && s.loop.Status.ObservedGeneration != 0 && g != s.loop.Status.ObservedGeneration {
		s.add(s.m.Record(run, s.now, executor.EventSpecChanged, executor.SpecChangedEvent{Generation: g}.Data()))
	}
	return s.drive(ctx)
}

// queued keeps a Loop the namespace's cap holds back Pending, saying why
// (an Event the first time).
func (s *step) queued(why string) {
	s.loop.Status.Phase = v1alpha1.PhasePending
	s.out.health.queued = why
	if c := findCondition(s.loop, v1alpha1.ReconcilingCondition); c == nil || c.Reason != v1alpha1.ReasonQueued {
		s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.ReasonQueued, "Queue", "%s", why)
	}
}

// drive walks the machine as every driver does: Plan at the head, run
// what the step asks for, Complete with its result; until the step waits
// for something outside the reconcile (an action, a child Loop, the
// judge, a search, a person, a backoff) or the run ends. Plan returns the
// same step for whatever is in flight, so a reconcile that ends while it
// waits changes nothing to undo. A reconcile collects the action (or
// clone, push, exit hook) in flight and goes on to the next step; any
// other completion is saved in a reconcile of its own.
func (s *step) drive(ctx context.Context) (reconcile.Result, error) {
	run := &s.loop.Status.RunState
	for first := true; ; first = false {
		if result, hold, err := s.hold(ctx); hold || err != nil {
			return result, err
		}
		step, evs := s.m.Plan(run, s.now)
		s.add(evs)
		res, ready, result, err := s.run(ctx, step)
		if !ready || err != nil {
			return result, err
		}
		if !s.complete(ctx, step, res) {
			return reconcile.Result{}, nil // the verdict's end wakes the Loop
		}
		if !first || step.Kind != executor.StepAction || !step.InFlight {
			return reconcile.Result{RequeueAfter: time.Millisecond}, nil
		}
	}
}

// endUnsaved reports whether the run ended in this reconcile with its push
// or exit hook still to run: they start once the end is saved, in a
// reconcile of their own.
func (s *step) endUnsaved() bool {
	run := &s.loop.Status.RunState
	return run.Phase.IsFinished() && !s.ended && s.r.Actions != nil && s.m.AfterEnd(run)
}

// hold reports whether the reconcile stops before the next Plan: the run
// ended in it (what follows its end waits until the end is saved), the
// Loop is suspended, or nothing can run its actions.
func (s *step) hold(ctx context.Context) (reconcile.Result, bool, error) {
	run := &s.loop.Status.RunState
	if s.endUnsaved() {
		return reconcile.Result{RequeueAfter: time.Millisecond}, true, nil
	}
	if !run.Phase.IsFinished() && !run.Action.IsAction() {
		if hold, err := s.suspended(ctx); hold || err != nil {
			return reconcile.Result{}, true, err
		}
	}
	switch {
	case s.r.Actions != nil:
	case run.Phase.IsFinished():
		res, err := s.r.reconcileFinished(ctx, s.loop) // nothing runs its push or hook
		return res, true, err
	case run.Action == nil || run.Action.IsAction():
		s.out.health.noRunner = true
		return reconcile.Result{}, true, nil
	}
	return reconcile.Result{}, false, nil
}

// run does what step asks for and returns its result (nil for a state
// without an action); ready is false while the reconcile ends first (what
// it waits for wakes the Loop, or result says when to look again).
func (s *step) run(ctx context.Context, step executor.Step) (res *executor.ActionResult, ready bool, result reconcile.Result, err error) {
	switch step.Kind {
	case executor.StepDone:
		if s.endUnsaved() {
			return nil, false, reconcile.Result{RequeueAfter: time.Millisecond}, nil
		}
		result, err = s.r.reconcileFinished(ctx, s.loop)
		return nil, false, result, err
	case executor.StepPaused:
		// The budget is spent: nothing runs until a spec edit raises it,
		// and that edit wakes the Loop.
		return nil, false, reconcile.Result{}, nil
	case executor.StepWait:
		return nil, false, reconcile.Result{RequeueAfter: step.WaitUntil.Sub(s.now)}, nil
	case executor.StepAction:
		if executor.IsLifecycle(step.Action) {
			res, ready, err = s.lifecycle(ctx, step)
		} else {
			res, err = s.action(ctx, step)
			ready = res != nil
		}
		return res, ready, reconcile.Result{RequeueAfter: s.recheck}, err
	case executor.StepEvaluate:
		return nil, true, reconcile.Result{}, nil
	case executor.StepLoop:
		res, err = s.child(ctx, step.Loop)
		return res, res != nil, reconcile.Result{}, err
	case executor.StepApproval:
		if res = s.approval(step.Approval); res == nil {
			return nil, false, s.awaitApproval(step.Approval), nil
		}
		return res, true, reconcile.Result{}, nil
	}
	return nil, false, reconcile.Result{}, fmt.Errorf("step %s: no driver for it", step.Kind)
}

// action is the result of the state's action: collected once it ended,
// else started (nil while it runs). An action whose runner lost it (the
// operator restarted) runs again, as the loop says now.
func (s *step) action(ctx context.Context, step executor.Step) (*executor.ActionResult, error) {
	if step.InFlight {
		out, err := s.r.Actions.Check(ctx, s.loop)
		switch {
		case err != nil:
			return nil, err
		case out.State == runner.Running:
			s.recheck = out.RecheckAfter
			return nil, nil
		case out.State == runner.Done:
			return s.metered(ctx, step.Action, out.Result)
		case out.State == runner.Lost:
			// The process that ran it is gone (the operator restarted).
			s.add(s.m.RestartAction(&s.loop.Status.RunState, s.now))
		}
		// NotStarted: its Pod was never made; it starts now, as planned.
	}
	return s.start(ctx, *step.Action)
}

// suspended applies spec.suspend to a Loop with no action in flight: it
// stops before the next state and passes the suspension on to a child the
// step would run. hold reports whether the Loop is suspended.
func (s *step) suspended(ctx context.Context) (hold bool, err error) {
	run := &s.loop.Status.RunState
	if run.Action != nil { // a child Loop (it is told) or an approval in flight: the Loop waits
		switch {
		case s.loop.Spec.Suspend && run.Phase == v1alpha1.PhaseRunning:
			run.Phase = v1alpha1.PhaseSuspended
		case !s.loop.Spec.Suspend && run.Phase == v1alpha1.PhaseSuspended:
			run.Phase = v1alpha1.PhaseRunning
		}
		return false, nil
	}
	if !s.loop.Spec.Suspend {
		if run.Phase == v1alpha1.PhaseSuspended {
			run.Phase = v1alpha1.PhaseRunning
		}
		return false, nil
	}
	run.Phase = v1alpha1.PhaseSuspended
	child, err := s.unrecordedChild(ctx)
	if child != nil {
		err = s.r.passOn(ctx, s.loop, child)
	}
	return true, err
}

// start starts an action. A runner that refuses it ends the step with an
// error result; res is nil while the action runs.
func (s *step) start(ctx context.Context, a executor.Action) (*executor.ActionResult, error) {
	recheck, err := s.r.Actions.Start(ctx, s.loop, a)
	s.recheck = recheck
	var refused *runner.Refused
	var ended *runner.AlreadyEnded
	switch {
	case errors.As(err, &ended):
		// Its end woke the Loop before this status said it runs: look again.
		s.recheck = time.Millisecond
		return nil, nil
	case permanent(err):
		return rejected("the action cannot start", err), nil
	case !errors.As(err, &refused):
		return nil, err
	}
	res := runner.Failure(refused.Reason, "%s", refused.Message)
	return &res, nil
}

// complete finishes what step ran with res (nil: a state without an
// action), asking the judge or the search Complete asks for first; false
// while their verdict is made in the background (the state waits as
// Plan's step: its end wakes the Loop).
func (s *step) complete(ctx context.Context, step executor.Step, res *executor.ActionResult) bool {
	run := &s.loop.Status.RunState
	action := run.Action
	for {
		next, evs := s.m.Complete(run, res, s.now)
		var ok bool
		switch next.Kind {
		case executor.StepJudge:
			res, ok = s.judged(*next.Judge, res)
		case executor.StepSearch:
			res, ok = s.searched(*next.Search, res)
		default:
			s.add(evs)
			s.completed(ctx, step, action, res, evs)
			return true
		}
		if !ok {
			return false
		}
	}
}

// completed counts what a completion used and ended, once it is saved.
func (s *step) completed(ctx context.Context, step executor.Step, action *v1alpha1.ActionStatus, res *executor.ActionResult, evs []executor.Event) {
	if executor.IsLifecycle(step.Action) {
		s.lifecycleEnded(step.Action)
		return
	}
	if action.IsAction() {
		observeAction(res.Duration)
		loop := s.loop
		s.out.afterSave = append(s.out.afterSave, func() { s.r.Actions.Release(loop, action.Iteration) })
	}
	s.observeUsage(evs, res)
	s.completedState = true
	s.takeCheckpoint(ctx)
	transitions.Inc()
}

// reconcileFinished deletes a finished Loop once its ttlSecondsAfterFinished
// passed (after its push and exit hook: the engine's steps after its end).
func (r *LoopReconciler) reconcileFinished(ctx context.Context, loop *v1alpha1.Loop) (reconcile.Result, error) {
	r.memory.finished(loop)
	ttl := loop.Spec.TTLSecondsAfterFinished
	if ttl == nil || loop.Status.UpdatedAt == nil {
		return reconcile.Result{}, nil
	}
	expires := loop.Status.UpdatedAt.Add(time.Duration(*ttl) * time.Second)
	if wait := expires.Sub(r.now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	log.FromContext(ctx).Info("Deleting finished Loop", "ttlSecondsAfterFinished", *ttl)
	return reconcile.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, loop))
}

// announceInvalid emits an Event for a spec that cannot run, once per message.
// The Loop is not retried (a terminal error): a spec change starts a new reconcile.
func (r *LoopReconciler) announceInvalid(loop *v1alpha1.Loop, err error) {
	if c := findCondition(loop, v1alpha1.StalledCondition); c == nil || c.Reason != v1alpha1.ReasonInvalidSpec || c.Message != err.Error() {
		r.event(loop, corev1.EventTypeWarning, v1alpha1.EventReasonInvalidSpec, "Validate", "%s", err.Error())
	}
}

func (r *LoopReconciler) appendEvents(ctx context.Context, loop *v1alpha1.Loop, evs []executor.Event, cp *history.Checkpoint) error {
	if r.EventLog == nil || len(evs) == 0 && cp == nil {
		return nil
	}
	if err := r.EventLog.Append(ctx, loop, evs, cp); err != nil {
		recordReconcileError("event-log")
		return fmt.Errorf("append to the event log: %w", err)
	}
	return nil
}

func (r *LoopReconciler) event(loop *v1alpha1.Loop, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(loop, nil, typ, reason, action, "%s", eventNote(fmt.Sprintf(note, args...)))
	}
}

// maxEventNote is the longest note the API server takes in an Event
// (events.k8s.io/v1 refuses a longer one, and the Event would be lost).
const maxEventNote = 1024

// eventNote is note cut to what an Event holds, at a character's edge,
// marked as cut.
func eventNote(note string) string {
	if len(note) <= maxEventNote {
		return note
	}
	const mark = " …(cut)"
	cut := maxEventNote - len(mark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + mark
}

// runID names a Loop's run: stable for the Loop's life.
func runID(loop *v1alpha1.Loop) string {
	id := string(loop.UID)
	if len(id) > 8 {
		id = id[:8]
	}
	if id == "" {
		id = fmt.Sprintf("%d", os.Getpid())
	}
	return id
}

// orEnd names where an escalation goes: a state, or the end of the run.
func orEnd(next string) string {
	if next == "" {
		return "the run ends"
	}
	return next
}

// RunDirBase is where a Loop's run_dir is, relative to where its actions
// run (the workspace): RunDirBase/RUN/, as little-loops puts it in .loops/runs.
const RunDirBase = ".loops/runs"

// runContext is what the operator gives a run's context, as a local run
// gets it (executor.RunContext): run_dir on the workspace (made before each
// action), max_steps, input_hash, and repo_dir, the checkout of
// workspace.git.
func runContext(loop *v1alpha1.Loop) map[string]any {
	return executor.RunContext{RunDir: RunDirBase + "/" + runID(loop) + "/", RepoDir: loop.Spec.Runner.GetCheckoutPath()}.Defaults(&loop.Spec)
}
