package controllers

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/cloudevents"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/tracing"
)

// The observers of a step's events: the spans, the Kubernetes Events and
// log lines that announce its milestones, the CloudEvents sent once the
// step is saved, and the metrics of what agents used.

// observe shows the step's events, once they are in the event log, to the
// operator's observers (executor.Observer, as a local run shows its own to
// its progress display and spans): spans first, so that what the tracer
// keeps in the status is saved with the step; then Kubernetes Events and
// log lines; then the CloudEvents sink. The metrics count what a
// completion used where it completes (observeUsage).
func (s *step) observe(ctx context.Context) {
	executor.Observe([]executor.Observer{
		s.r.Tracer.For(tracing.Run{Loop: s.loop.Name, Namespace: s.loop.Namespace}),
		executor.ObserverFunc(func(_ *v1alpha1.RunState, evs []executor.Event) { s.announce(ctx, evs) }),
		executor.ObserverFunc(func(_ *v1alpha1.RunState, evs []executor.Event) { s.cloudEvents(evs) }),
	}, &s.loop.Status.RunState, s.events)
}

// cloudEvents sends the step's milestones to the CloudEvents sink once the
// step is saved.
func (s *step) cloudEvents(events []executor.Event) {
	sink := s.r.CloudEvents
	if sink == nil {
		return
	}
	for _, e := range events {
		if ce, ok := cloudevents.Of(s.loop, e); ok {
			s.out.afterSave = append(s.out.afterSave, func() { sink.Enqueue(ce) })
		}
	}
}

// observeUsage counts in the metrics, once the step is saved, what the
// agent action and the judge's call that completed (res) used and cost, as
// the engine priced them in its events (action_complete, evaluate): the
// usage is priced once, and what the metrics count is what the run's
// status counts. The model label is the price table's name for the model.
func (s *step) observeUsage(evs []executor.Event, res *executor.ActionResult) {
	prices, ns := s.m.Prices(), s.loop.Namespace
	for _, u := range usageSeen(evs, res) {
		model, _, _ := prices.Match(u.model)
		s.out.afterSave = append(s.out.afterSave, func() { observeUsage(ns, model, u.EventUsage) })
	}
}

// seenUsage is what one agent action or judge call used, with the model
// it reported.
type seenUsage struct {
	executor.EventUsage
	model string
}

// usageSeen is the usage the engine recorded in evs: an action's (its
// action_complete event names the model) and the judge's (its evaluate
// event does not: the model is the one the judge's answer, in res,
// reported).
func usageSeen(evs []executor.Event, res *executor.ActionResult) []seenUsage {
	var out []seenUsage
	for _, e := range evs {
		switch e.Type {
		case executor.EventActionComplete:
			if a := executor.ActionCompleteOf(e); a.Usage != nil {
				out = append(out, seenUsage{EventUsage: *a.Usage, model: a.Model})
			}
		case executor.EventEvaluate:
			if ev := executor.EvaluateOf(e); ev.Usage != nil {
				model := ""
				if res != nil && res.Judgement != nil && res.Judgement.Usage != nil {
					model = res.Judgement.Usage.Model
				}
				out = append(out, seenUsage{EventUsage: *ev.Usage, model: model})
			}
		}
	}
	return out
}

// baseLoggerKey holds, in a reconcile's context, its logger before the
// Loop's state and iteration were added to it.
type baseLoggerKey struct{}

// announce emits Kubernetes Events and log lines for the step's milestones;
// transitions are logged at verbosity 1 (--zap-log-level=debug).
func (s *step) announce(ctx context.Context, events []executor.Event) {
	// The reconcile's logger names the state and iteration it began in;
	// the step has moved the Loop on since.
	logger := log.FromContext(ctx)
	if base, ok := ctx.Value(baseLoggerKey{}).(logr.Logger); ok {
		logger = base.WithValues("state", s.loop.Status.CurrentState, "iteration", s.loop.Status.Iteration)
	}
	for _, e := range events {
		switch e.Type {
		case executor.EventRoute:
			r := executor.RouteOf(e)
			logger.V(1).Info("Transition", "from", r.From, "to", r.To)
		case executor.EventLoopStart:
			logger.Info("Loop started")
			s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonStarted, "Start", "loop started in state %s", s.loop.Spec.Initial)
		case executor.EventSpecChanged:
			s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonSpecChanged, "Update", "spec generation %d applies from the next state", s.loop.Generation)
		case executor.EventActionRetry:
			r := executor.RetryOf(e)
			logger.Info("Action failed for a transient reason; retrying", "reason", r.Reason, "retry", r.Retry, "delayMs", r.DelayMs)
			s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonActionRetry, "Retry", "the action of state %s failed (%s): retry %d of %d in %d ms",
				r.State, r.Reason, r.Retry, r.Limit, r.DelayMs)
		case executor.EventRetryExhausted:
			r := executor.RetryExhaustedOf(e)
			why := ""
			if r.Reason != "" {
				why = " (" + r.Reason + ")"
			}
			s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonRetryExhausted, "Escalate", "state %s used up its retries%s; next: %s", r.State, why, orEnd(r.Next))
		case executor.EventActionRestarted:
			r := executor.RestartedOf(e)
			logger.Info("Action restarted: the process running it was lost", "actionState", r.State)
			s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonActionRestarted, "Restart", "the action of state %s (iteration %d) runs again: the process running it was lost", r.State, r.Iteration)
		case executor.EventApprovalRequested, executor.EventApprovalAnswered:
			s.announceApproval(e)
		case executor.EventBudgetWarning, executor.EventBudgetExceeded, executor.EventBudgetResumed, executor.EventCostCeiling:
			s.announceBudget(ctx, e)
		case executor.EventRateLimitWaiting, executor.EventRateLimitExhausted, executor.EventRateLimitStorm, executor.EventAPIErrorRetry, executor.EventInfraRetry:
			s.announceTransient(ctx, e)
		case executor.EventHandoffDetected:
			run := s.loop.Status.RunState
			logger.Info("Loop paused by a handoff", "finalState", run.CurrentState)
			s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonHandoff, "Pause", "the action of state %s asked for a handoff (CONTEXT_HANDOFF:): %s; resume the Loop to go on", run.CurrentState, run.Message)
		case executor.EventLoopComplete:
			run := s.loop.Status.RunState
			logger.Info("Loop finished", "phase", run.Phase, "terminatedBy", run.TerminatedBy, "finalState", run.CurrentState)
			if run.Phase == v1alpha1.PhaseCompleted {
				s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonCompleted, "Complete", "loop completed in state %s after %d iterations", run.CurrentState, run.Iteration)
			} else {
				s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonFailed, "Complete", "loop ended (%s) in state %s after %d iterations: %s", run.TerminatedBy, run.CurrentState, run.Iteration, run.Message)
			}
		}
	}
}
