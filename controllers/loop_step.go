package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/tracing"
)

// reconcileLoop takes one step of a Loop: it starts the run, collects the
// result of the action in flight, or plans and starts the next state. The
// step's events go to the event log before the status is written.
// A new run's start may wait to be saved with its first transition (see
// unsavedStart).
func (r *LoopReconciler) reconcileLoop(ctx context.Context, loop *v1alpha1.Loop) (reconcile.Result, outcome, error) {
	req := pendingRequest(loop)
	if loop.Status.Phase.IsFinished() && req == "" {
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
	})
	if err != nil {
		r.announceInvalid(loop, err)
		return reconcile.Result{}, outcome{health: health{invalid: err.Error()}}, reconcile.TerminalError(err)
	}
	s := &step{r: r, loop: loop, m: m, now: r.now()}
	waiting := r.resumeUnsaved(loop)
	if waiting != nil {
		s.events = slices.Clip(waiting.events)
	}
	if req != "" {
		s.request(ctx, req)
	}
	var result reconcile.Result
	if loop.Status.Phase.IsFinished() {
		result, err = r.reconcileFinished(ctx, loop)
	} else {
		result, err = s.take(ctx)
		if err == nil && r.Actions != nil && afterEnd(loop) {
			// The run ended: its push and exit hook start once the end is saved.
			result = reconcile.Result{RequeueAfter: time.Millisecond}
		}
	}
	r.Tracer.Begin(&loop.Status.RunState, loop.Annotations[v1alpha1.AnnotationTraceParent])
	if wait, ok := s.deferStart(waiting, err, result.RequeueAfter); ok {
		return reconcile.Result{RequeueAfter: wait}, outcome{deferred: true}, nil
	}
	// The step's spans: made once, from events that are about to be saved.
	r.Tracer.Observe(tracing.Run{Loop: loop.Name, Namespace: loop.Namespace}, &loop.Status.RunState, s.events)
	if aerr := r.appendEvents(ctx, loop, s.events, s.cp); aerr != nil {
		return reconcile.Result{}, outcome{health: health{eventLog: aerr.Error()}}, aerr
	}
	if loop.Status.Phase.IsFinished() && r.EventLog != nil {
		r.EventLog.Forget(client.ObjectKeyFromObject(loop)) // its last append is done
	}
	s.announce(ctx)
	s.cloudEvents()
	return result, s.out, err
}

// forkRetry is how long a fork whose checkpoint cannot be read waits before
// it looks again (the source may be imported or repaired meanwhile).
const forkRetry = time.Minute

// step is one reconcile's work on a running Loop.
type step struct {
	r      *LoopReconciler
	loop   *v1alpha1.Loop
	m      *executor.Machine
	now    time.Time
	events []executor.Event
	out    outcome
	// recheck asks for another look at a running action after this long.
	recheck time.Duration
	// completed is true when a state was completed.
	completed bool
	// cp is the checkpoint taken in this step, stored with its events.
	cp *history.Checkpoint
	// answer is a person's answer to the approval the Loop waits for
	// (an approve or reject request); nil for none.
	approvalAnswer *executor.ApprovalAnswer
	// planned is what the status and events were before the last plan.
	planned *planMark
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
	if g := s.loop.Generation; s.loop.Status.ObservedGeneration != 0 && g != s.loop.Status.ObservedGeneration {
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

// drive walks the machine as every driver does, one step kind at a time,
// until the step waits for something outside the reconcile (an action, a
// child Loop, the judge, a backoff) or the run ends. A reconcile completes
// the action in flight and starts the next; any other completion is saved
// in a reconcile of its own.
func (s *step) drive(ctx context.Context) (reconcile.Result, error) {
	next, res, err := s.first(ctx)
	if err != nil || next.Kind == stepHold {
		return reconcile.Result{RequeueAfter: s.recheck}, err
	}
	collected := res != nil // first's only result is the action in flight's
	for {
		var stop *reconcile.Result
		switch next.Kind {
		case executor.StepNext:
			if next, stop, err = s.afterCompletion(ctx, collected); stop != nil || err != nil {
				return ptr.Deref(stop, reconcile.Result{}), err
			}
			collected = false
		case executor.StepWait:
			return reconcile.Result{RequeueAfter: next.WaitUntil.Sub(s.now)}, nil
		case executor.StepDone:
			return s.r.reconcileFinished(ctx, s.loop)
		case executor.StepPaused:
			// The budget is spent: nothing runs until a spec edit raises
			// it, and that edit wakes the Loop.
			return reconcile.Result{}, nil
		default:
			if res, stop, err = s.answer(ctx, next, res); stop != nil || err != nil {
				return ptr.Deref(stop, reconcile.Result{}), err
			}
			next = s.complete(ctx, res)
		}
	}
}

// answer is the answer to a step that waits for one: an action's result,
// a child's ending, the judge's verdict (added to res), a person's answer;
// nil for a state without an action. stop says how the reconcile ends
// while the answer is not there yet: what it waits for wakes the Loop.
func (s *step) answer(ctx context.Context, next executor.Step, res *executor.ActionResult) (*executor.ActionResult, *reconcile.Result, error) {
	var err error
	switch next.Kind {
	case executor.StepAction:
		if res, err = s.start(ctx, *next.Action); err != nil || res == nil {
			return nil, &reconcile.Result{RequeueAfter: s.recheck}, err
		}
	case executor.StepEvaluate:
		res = nil
	case executor.StepJudge:
		var ok bool
		if res, ok = s.judged(*next.Judge, res); !ok {
			return s.awaitVerdict(res)
		}
	case executor.StepSearch:
		var ok bool
		if res, ok = s.searched(*next.Search, res); !ok {
			return s.awaitVerdict(res)
		}
	case executor.StepLoop:
		if res, err = s.child(ctx, next.Loop); err != nil || res == nil {
			return nil, &reconcile.Result{}, err
		}
	case executor.StepApproval:
		if res = s.approval(next.Approval); res == nil {
			wait := s.awaitApproval(next.Approval)
			return nil, &wait, nil
		}
	default:
		return nil, nil, fmt.Errorf("step %s: no driver for it", next.Kind)
	}
	return res, nil, nil
}

// awaitVerdict ends the reconcile while a verdict is made in the
// background; its end wakes the Loop. A state without an action (res nil)
// is not saved as entered (see unplan).
func (s *step) awaitVerdict(res *executor.ActionResult) (*executor.ActionResult, *reconcile.Result, error) {
	if res == nil {
		s.unplan()
	}
	return nil, &reconcile.Result{}, nil
}

// afterCompletion is the next step once a state is complete: the plan
// after the action in flight was collected, so that the next action starts
// in the same reconcile; any other completion is saved in a reconcile of
// its own (stop says how it ends).
func (s *step) afterCompletion(ctx context.Context, collected bool) (next executor.Step, stop *reconcile.Result, err error) {
	if !collected {
		return next, &reconcile.Result{RequeueAfter: time.Millisecond}, nil
	}
	if hold, err := s.suspended(ctx); hold || err != nil {
		return next, &reconcile.Result{}, err
	}
	next, evs := s.plan()
	s.add(evs)
	return next, nil, nil
}

// plan asks the machine for the next step, noting what the status and
// events were before it (see unplan).
func (s *step) plan() (executor.Step, []executor.Event) {
	s.planned = &planMark{status: *s.loop.Status.DeepCopy(), events: len(s.events)}
	return s.m.Plan(&s.loop.Status.RunState, s.now)
}

// unplan takes back the last plan: a state without an action that waits
// for its verdict (the judge, a pattern search) is entered again, the same
// way, once the verdict is there; saving the entry would enter it once more
// on every wake.
func (s *step) unplan() {
	if m := s.planned; m != nil {
		s.loop.Status = m.status
		s.events = s.events[:m.events]
	}
}

// planMark is the status and the count of events before a plan.
type planMark struct {
	status v1alpha1.LoopStatus
	events int
}

// stepHold is first's answer when the reconcile has nothing more to do:
// the action in flight runs, the Loop is suspended, or no runner exists.
const stepHold executor.StepKind = -1

// first is where the reconcile starts: the result of the action in
// flight when it ended (completed, its StepNext returned), or the machine's
// plan. An action whose runner lost it, or never started it, is planned
// again, so that it runs as the loop says now.
func (s *step) first(ctx context.Context) (executor.Step, *executor.ActionResult, error) {
	run := &s.loop.Status.RunState
	inFlight := run.Action.IsAction()
	if !inFlight {
		if hold, err := s.suspended(ctx); hold || err != nil {
			return executor.Step{Kind: stepHold}, nil, err
		}
	}
	if (inFlight || run.Action == nil) && s.r.Actions == nil {
		s.out.health.noRunner = true
		return executor.Step{Kind: stepHold}, nil, nil
	}
	if !inFlight && s.r.Actions != nil && executor.NeedsClone(&s.loop.Spec, run) {
		// The checkout is made before the first step.
		if done, err := s.clone(ctx); !done || err != nil {
			return executor.Step{Kind: stepHold}, nil, err
		}
		if run.Phase.IsFinished() {
			return executor.Step{Kind: executor.StepDone}, nil, nil
		}
	}
	var lost bool
	if inFlight {
		out, err := s.r.Actions.Check(ctx, s.loop)
		switch {
		case err != nil:
			return executor.Step{}, nil, err
		case out.State == runner.Running:
			s.recheck = out.RecheckAfter
			return executor.Step{Kind: stepHold}, nil, nil
		case out.State == runner.Done:
			res := out.Result
			return s.complete(ctx, &res), &res, nil
		}
		lost = out.State == runner.Lost
	}
	next, evs := s.plan()
	s.add(evs)
	if lost && next.Kind == executor.StepAction {
		// The process that ran it is gone (the operator restarted): run it again.
		s.add(s.m.RestartAction(run, s.now))
	}
	return next, nil, nil
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

// complete finishes the current state with res (nil: it ran no action),
// or returns the question Complete asks first (StepJudge).
func (s *step) complete(ctx context.Context, res *executor.ActionResult) executor.Step {
	run := &s.loop.Status.RunState
	action := run.Action
	next, evs := s.m.Complete(run, res, s.now)
	if next.Kind != executor.StepNext {
		return next
	}
	s.add(evs)
	if action.IsAction() {
		observeAction(res.Duration)
		loop := s.loop
		s.out.afterSave = append(s.out.afterSave, func() { s.r.Actions.Release(loop, action.Iteration) })
	}
	s.observeUsage(evs, res)
	s.completed = true
	s.takeCheckpoint(ctx)
	transitions.Inc()
	return next
}

// afterEnd reports whether the ended run has work left after its end: its
// push, its exit hook.
func afterEnd(loop *v1alpha1.Loop) bool {
	run := &loop.Status.RunState
	return executor.NeedsPush(&loop.Spec, run) || executor.NeedsExitHook(&loop.Spec, run)
}

// reconcileFinished deletes a finished Loop once its ttlSecondsAfterFinished passed.
func (r *LoopReconciler) reconcileFinished(ctx context.Context, loop *v1alpha1.Loop) (reconcile.Result, error) {
	r.memory.finished(loop)
	if r.Actions != nil && executor.NeedsPush(&loop.Spec, &loop.Status.RunState) {
		res, running, err := r.push(ctx, loop)
		if running || err != nil {
			return res, err // the exit hook and the ttl wait for it
		}
	}
	if r.Actions != nil && executor.NeedsExitHook(&loop.Spec, &loop.Status.RunState) {
		res, running, err := r.exitHook(ctx, loop)
		if running || err != nil {
			return res, err // the Loop is kept (ttl) until its hook ended
		}
	}
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
// gets it, each unless the Loop sets it: run_dir (on the workspace, made
// before each action), max_steps, input_hash for a text input, and
// repo_dir, the checkout of workspace.git.
func runContext(loop *v1alpha1.Loop) map[string]any {
	ctx := map[string]any{
		"run_dir":   RunDirBase + "/" + runID(loop) + "/",
		"max_steps": loop.Spec.GetMaxIterations(),
	}
	if dir := loop.Spec.Runner.GetCheckoutPath(); dir != "" {
		ctx["repo_dir"] = dir
	}
	var input any
	if raw, ok := loop.Spec.Context["input"]; ok && json.Unmarshal(raw.Raw, &input) == nil {
		if h, ok := executor.InputHash(input); ok {
			ctx["input_hash"] = h
		}
	}
	return ctx
}
