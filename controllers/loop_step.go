package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
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
func (r *LoopReconciler) reconcileLoop(ctx context.Context, loop *v1alpha1.Loop) (reconcile.Result, health, error) {
	req := pendingRequest(loop)
	if loop.Status.Phase.IsFinished() && req == "" {
		res, err := r.reconcileFinished(ctx, loop)
		return res, health{}, err
	}
	gate := &judgeGate{r: r, loop: loop}
	m, err := executor.New(loop.Name, &loop.Spec, executor.Options{
		Judge:           gate,
		Env:             func(string) (string, bool) { return "", false },
		ContextDefaults: runContext(loop),
	})
	if err != nil {
		r.announceInvalid(loop, err)
		return reconcile.Result{}, health{invalid: err.Error()}, reconcile.TerminalError(err)
	}
	s := &step{r: r, loop: loop, m: m, gate: gate, now: r.now()}
	carried := r.resumeUnsaved(loop)
	if carried != nil {
		s.events = slices.Clip(carried.events)
	}
	if req != "" {
		s.request(ctx, req)
	}
	var result reconcile.Result
	if loop.Status.Phase.IsFinished() {
		result, err = r.reconcileFinished(ctx, loop)
	} else {
		result, err = s.take(ctx)
	}
	if wait, ok := s.deferStart(carried, err, result.RequeueAfter); ok {
		return reconcile.Result{RequeueAfter: wait}, health{deferred: true}, nil
	}
	if aerr := r.appendEvents(ctx, loop, s.events, s.cp); aerr != nil {
		return reconcile.Result{}, health{eventLog: aerr.Error()}, aerr
	}
	if loop.Status.Phase.IsFinished() && r.EventLog != nil {
		r.EventLog.Forget(ctrl.ObjectKeyFromObject(loop)) // its last append is done
	}
	s.announce(ctx)
	return result, s.health, err
}

// forkRetry is how long a fork whose checkpoint cannot be read waits before
// it looks again (the source may be imported or repaired meanwhile).
const forkRetry = time.Minute

// step is one reconcile's work on a running Loop.
type step struct {
	r      *LoopReconciler
	loop   *v1alpha1.Loop
	m      *executor.Machine
	gate   *judgeGate
	now    time.Time
	events []executor.Event
	health health
	// recheck asks for another look at a running action after this long.
	recheck time.Duration
	// completed is true when an action's result was used.
	completed bool
	// cp is the checkpoint taken in this step, stored with its events.
	cp *history.Checkpoint
}

func (s *step) add(evs []executor.Event) { s.events = append(s.events, evs...) }

func (s *step) take(ctx context.Context) (reconcile.Result, error) {
	run := &s.loop.Status.RunState
	if run.Phase == "" || run.Phase == v1alpha1.PhasePending {
		if s.loop.Spec.ResumeFrom == nil {
			s.add(s.m.Start(run, runID(s.loop), s.now))
		} else if !s.fork(ctx) {
			run.Phase = v1alpha1.PhasePending
			return reconcile.Result{RequeueAfter: forkRetry}, nil
		}
	}
	if g := s.loop.Generation; s.loop.Status.ObservedGeneration != 0 && g != s.loop.Status.ObservedGeneration {
		s.add(s.m.Record(run, s.now, executor.EventSpecChanged, map[string]any{"generation": g}))
	}
	if run.Action != nil && run.Action.Child != "" {
		return s.inFlightChild(ctx)
	}
	if run.Action != nil {
		done, err := s.collect(ctx)
		if !done || err != nil {
			return reconcile.Result{RequeueAfter: s.recheck}, err
		}
	}
	if s.loop.Spec.Suspend {
		run.Phase = v1alpha1.PhaseSuspended
		child, err := s.unrecordedChild(ctx)
		if child != nil {
			err = s.r.passOn(ctx, s.loop, child)
		}
		return reconcile.Result{}, err
	}
	if run.Phase == v1alpha1.PhaseSuspended {
		run.Phase = v1alpha1.PhaseRunning
	}
	if s.r.Actions == nil {
		s.health.noRunner = true
		return reconcile.Result{}, nil
	}
	return s.plan(ctx)
}

// collect completes the action in flight when its result is there. done is
// false while it still runs.
func (s *step) collect(ctx context.Context) (bool, error) {
	run := &s.loop.Status.RunState
	if s.r.Actions == nil {
		s.health.noRunner = true
		return false, nil
	}
	out, err := s.r.Actions.Check(ctx, s.loop)
	if err != nil {
		return false, err
	}
	switch out.State {
	case runner.Running:
		s.recheck = out.RecheckAfter
		return false, nil
	case runner.Lost, runner.NotStarted:
		step, _ := s.m.Plan(run, s.now)
		if out.State == runner.Lost {
			// The process that ran it is gone (the operator restarted): run it again.
			s.add(s.m.RestartAction(run, s.now))
		}
		return s.start(ctx, *step.Action)
	}
	return s.complete(ctx, &out.Result), nil
}

// start starts an action. A runner that refuses it ends the step with an
// error verdict (done is then true).
func (s *step) start(ctx context.Context, a executor.Action) (bool, error) {
	recheck, err := s.r.Actions.Start(ctx, s.loop, a)
	s.recheck = recheck
	var refused *runner.Refused
	var ended *runner.AlreadyEnded
	switch {
	case errors.As(err, &ended):
		// Its end woke the Loop before this status said it runs: look again.
		s.recheck = time.Millisecond
		return false, nil
	case !errors.As(err, &refused):
		return false, err
	}
	res := runner.Failure(refused.Reason, "%s", refused.Message)
	return s.complete(ctx, &res), nil
}

// complete finishes the current state with the result of its action (nil:
// it ran none). It reports false while the LLM judge is still weighing the
// result: nothing changed, and the judge's answer wakes the Loop.
func (s *step) complete(ctx context.Context, res *executor.ActionResult) bool {
	run := &s.loop.Status.RunState
	action := run.Action
	evs, ok := s.completeWith(ctx, res)
	if !ok {
		s.health.judging = true
		return false
	}
	s.add(evs)
	if action != nil {
		observeAction(res.Duration)
		loop := s.loop
		s.health.release = append(s.health.release, func() { s.r.Actions.Release(loop, action.Iteration) })
	}
	s.completed = true
	s.takeCheckpoint(ctx)
	transitions.Inc()
	return true
}

// completeWith runs the machine's Complete. A state the LLM judge weighs is
// completed on a copy first: kept when every question had its answer,
// dropped when one is still being asked.
func (s *step) completeWith(ctx context.Context, res *executor.ActionResult) ([]executor.Event, bool) {
	run := &s.loop.Status.RunState
	if !mayJudge(&s.loop.Spec, run.CurrentState) {
		return s.m.Complete(ctx, run, res, s.now), true
	}
	probe := run.DeepCopy()
	evs := s.m.Complete(ctx, probe, res, s.now)
	if s.gate.pending {
		s.gate.pending = false
		return nil, false
	}
	*run = *probe
	s.health.release = append(s.health.release, s.gate.release)
	return evs, true
}

// mayJudge reports whether completing the state may ask the LLM judge: an
// llm_structured evaluator, or an agent action without an evaluator.
func mayJudge(spec *v1alpha1.LoopSpec, state string) bool {
	st, ok := spec.States[state]
	if !ok {
		return false
	}
	if e := st.Evaluate; e != nil {
		return e.Type == v1alpha1.EvalLLMStructured
	}
	return st.IsAgent()
}

// plan enters the next state and starts its action, or finishes.
func (s *step) plan(ctx context.Context) (reconcile.Result, error) {
	run := &s.loop.Status.RunState
	st, evs := s.m.Plan(run, s.now)
	s.add(evs)
	switch st.Kind {
	case executor.StepAction:
		done, err := s.start(ctx, *st.Action)
		if done {
			return reconcile.Result{RequeueAfter: time.Millisecond}, err
		}
		return reconcile.Result{RequeueAfter: s.recheck}, err
	case executor.StepEvaluate:
		if !s.complete(ctx, nil) {
			return reconcile.Result{}, nil // the judge's answer wakes the Loop
		}
		return reconcile.Result{RequeueAfter: time.Millisecond}, nil
	case executor.StepWait:
		return reconcile.Result{RequeueAfter: st.WaitUntil.Sub(s.now)}, nil
	case executor.StepLoop:
		return s.subLoop(ctx, st.Loop)
	}
	return s.r.reconcileFinished(ctx, s.loop)
}

// announce emits Kubernetes Events and log lines for the step's milestones;
// transitions are logged at verbosity 1 (--zap-log-level=debug).
func (s *step) announce(ctx context.Context) {
	logger := log.FromContext(ctx)
	for _, e := range s.events {
		switch e.Type {
		case executor.EventRoute:
			logger.V(1).Info("Transition", "from", e.Data["from"], "to", e.Data["to"])
		case executor.EventLoopStart:
			logger.Info("Loop started")
			s.r.event(s.loop, corev1.EventTypeNormal, "Started", "Start", "loop started in state %s", s.loop.Spec.Initial)
		case executor.EventSpecChanged:
			s.r.event(s.loop, corev1.EventTypeNormal, "SpecChanged", "Update", "spec generation %d applies from the next state", s.loop.Generation)
		case executor.EventActionRetry:
			logger.Info("Action failed for a transient reason; retrying", "reason", e.Data["reason"], "retry", e.Data["retry"], "delayMs", e.Data["delay_ms"])
			s.r.event(s.loop, corev1.EventTypeWarning, "ActionRetry", "Retry", "the action of state %v failed (%v): retry %v of %v in %v ms",
				e.Data["state"], e.Data["reason"], e.Data["retry"], e.Data["limit"], e.Data["delay_ms"])
		case executor.EventRetryExhausted:
			s.r.event(s.loop, corev1.EventTypeWarning, "RetryExhausted", "Escalate", "state %v used up its retries (%v); next: %v",
				e.Data["state"], e.Data["reason"], orEnd(e.Data["next"]))
		case executor.EventActionRestarted:
			logger.Info("Action restarted: the process running it was lost", "actionState", e.Data["state"])
			s.r.event(s.loop, corev1.EventTypeWarning, "ActionRestarted", "Restart", "the action of state %v (iteration %v) runs again: the process running it was lost", e.Data["state"], e.Data["iteration"])
		case executor.EventLoopComplete:
			run := s.loop.Status.RunState
			logger.Info("Loop finished", "phase", run.Phase, "terminatedBy", run.TerminatedBy, "finalState", run.CurrentState)
			if run.Phase == v1alpha1.PhaseCompleted {
				s.r.event(s.loop, corev1.EventTypeNormal, "Completed", "Complete", "loop completed in state %s after %d iterations", run.CurrentState, run.Iteration)
			} else {
				s.r.event(s.loop, corev1.EventTypeWarning, "Failed", "Complete", "loop ended (%s) in state %s after %d iterations: %s", run.TerminatedBy, run.CurrentState, run.Iteration, run.Message)
			}
		}
	}
}

// reconcileFinished deletes a finished Loop once its ttlSecondsAfterFinished passed.
func (r *LoopReconciler) reconcileFinished(ctx context.Context, loop *v1alpha1.Loop) (reconcile.Result, error) {
	if m := r.remembered(loop); m.running {
		m.running = false
		r.remember(loop, m)
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
	return reconcile.Result{}, ctrl.IgnoreNotFound(r.Client.Delete(ctx, loop))
}

// announceInvalid emits an Event for a spec that cannot run, once per message.
// The Loop is not retried (a terminal error): a spec change starts a new reconcile.
func (r *LoopReconciler) announceInvalid(loop *v1alpha1.Loop, err error) {
	if c := findCondition(loop, v1alpha1.StalledCondition); c == nil || c.Reason != v1alpha1.ReasonInvalidSpec || c.Message != err.Error() {
		r.event(loop, corev1.EventTypeWarning, "InvalidSpec", "Validate", "%s", err.Error())
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
		r.Recorder.Eventf(loop, nil, typ, reason, action, note, args...)
	}
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
func orEnd(next any) any {
	if next == "" || next == nil {
		return "the run ends"
	}
	return next
}

// RunDirBase is where a Loop's run_dir is, relative to where its actions
// run (the workspace): RunDirBase/RUN/, as little-loops puts it in .loops/runs.
const RunDirBase = ".loops/runs"

// runContext is what the operator gives a run's context, as a local run
// gets it, each unless the Loop sets it: run_dir (on the workspace, made
// before each action), max_steps, and input_hash for a text input.
func runContext(loop *v1alpha1.Loop) map[string]any {
	ctx := map[string]any{
		"run_dir":   RunDirBase + "/" + runID(loop) + "/",
		"max_steps": loop.Spec.GetMaxIterations(),
	}
	var input string
	if raw, ok := loop.Spec.Context["input"]; ok && json.Unmarshal(raw.Raw, &input) == nil {
		sum := sha256.Sum256([]byte(input))
		ctx["input_hash"] = hex.EncodeToString(sum[:])[:12]
	}
	return ctx
}
