package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// health is what a reconcile found that the run state does not say: the
// inputs of the conditions besides the run state.
type health struct {
	// invalid is why the spec cannot run.
	invalid string
	// noRunner: actions cannot run in this operator.
	noRunner bool
	// checkpoint is a checkpoint a request could not use; checkpointOK
	// says one was used (the CheckpointError condition goes).
	checkpoint   *checkpointProblem
	checkpointOK bool
	// forkBlocked: spec.resumeFrom names a checkpoint that cannot be used.
	forkBlocked bool
	// judging: the LLM judge weighs the current state's result.
	judging bool
	// searching: the current state's pattern search runs in the background.
	searching bool
	// retrying is why the step failed, when it is taken again with backoff.
	retrying string
	// eventLog is why the step's events could not be written: the step
	// is not kept.
	eventLog string
	// queued is why the Loop waits to start (the namespace's cap).
	queued string
}

// outcome is what a reconcile's step hands back besides the run state.
type outcome struct {
	// health shapes the conditions.
	health health
	// afterSave lets go of what the step used (an action's result, a
	// judge's answer), once its status is saved.
	afterSave []func()
	// deferred: the step is the start of a run, kept in memory until its
	// first action ends or the start grace is up; nothing is written.
	deferred bool
}

// setConditions derives Ready, Reconciling and Stalled from the status, by
// kstatus rules: Ready is always there; Reconciling and Stalled only when True.
func setConditions(loop *v1alpha1.Loop, h health) {
	run := loop.Status.RunState
	switch {
	case h.checkpoint != nil:
		set(loop, v1alpha1.CheckpointErrorCondition, metav1.ConditionTrue, h.checkpoint.reason, h.checkpoint.message)
	case h.checkpointOK:
		remove(loop, v1alpha1.CheckpointErrorCondition)
	}
	switch {
	case h.invalid != "":
		finished(loop, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, h.invalid, true)
	case run.Phase == v1alpha1.PhaseCompleted:
		finished(loop, metav1.ConditionTrue, v1alpha1.ReasonCompleted,
			fmt.Sprintf("completed in state %s after %d iterations", run.CurrentState, run.Iteration), false)
	case run.Phase.IsFinished():
		reason := v1alpha1.TerminationReasonToCondition(run.TerminatedBy, executor.IsFailureTerminal(&run))
		msg := fmt.Sprintf("ended (%s) in state %s after %d iterations", run.TerminatedBy, run.CurrentState, run.Iteration)
		if run.Message != "" {
			msg += ": " + run.Message
		}
		finished(loop, metav1.ConditionFalse, reason, msg, true)
	case h.eventLog != "":
		msg := "the event log cannot be written; the step waits: " + h.eventLog
		set(loop, v1alpha1.ReadyCondition, metav1.ConditionUnknown, v1alpha1.ReasonEventLogFailed, msg)
		set(loop, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.ReasonEventLogFailed, msg)
		remove(loop, v1alpha1.StalledCondition)
	case h.forkBlocked:
		finished(loop, metav1.ConditionFalse, h.checkpoint.reason, h.checkpoint.message, true)
	case h.noRunner:
		finished(loop, metav1.ConditionFalse, v1alpha1.ReasonNoRunner,
			"no action runner is available: start the operator with an --entrypoint-image (actions as Pods), or with --allow-local-actions", true)
	case run.Phase == v1alpha1.PhaseSuspended:
		// Suspended is where the Loop was asked to be: it needs nothing
		// from the operator until resumed, so neither Reconciling nor
		// Stalled, and GitOps tools (kstatus) read it as current instead
		// of waiting on it. It is not Ready: it has not done its work, and
		// `kubectl wait --for=condition=Ready` must not return for it.
		finished(loop, metav1.ConditionFalse, v1alpha1.ReasonSuspended,
			fmt.Sprintf("suspended by spec.suspend in state %s, iteration %d; not complete", run.CurrentState, run.Iteration), false)
	case run.Phase == v1alpha1.PhasePaused:
		// Paused on its budget, as a suspended Loop: it waits for a
		// person (raise spec.budget), so neither Reconciling nor Stalled.
		finished(loop, metav1.ConditionFalse, v1alpha1.ReasonBudgetExceeded, pausedMessage(&run), false)
	default:
		progressing(loop, run, h)
	}
}

// pausedMessage says why a Loop paused on its budget waits.
func pausedMessage(run *v1alpha1.RunState) string {
	return "paused: " + executor.PausedWhy(run) + "; raise spec.budget (looprun budget) to go on"
}

// waitingMessage says why and how long a failed action waits to run again.
func waitingMessage(run v1alpha1.RunState) string {
	tr, at := run.Transient, run.NextStepAt.UTC().Format("15:04:05")
	switch tr.Waiting {
	case executor.WaitingRateLimit:
		return fmt.Sprintf("the action of state %s hit a rate limit (%d short tries, %d long waits, %s waited); next try at %s",
			run.CurrentState, tr.RateLimitShort, tr.RateLimitLong, time.Duration(tr.WaitedMs)*time.Millisecond, at)
	case executor.WaitingAPIError:
		return fmt.Sprintf("the action of state %s met an API server error (try %d); next try at %s", run.CurrentState, tr.APIErrors, at)
	}
	return fmt.Sprintf("the agent of state %s was killed after its result (try %d); next try at %s", run.CurrentState, tr.InfraRetries, at)
}

// progressing sets the conditions of a Loop that runs: what it does now.
func progressing(loop *v1alpha1.Loop, run v1alpha1.RunState, h health) {
	reason, msg := v1alpha1.ReasonProgressing, fmt.Sprintf("in state %s, iteration %d", run.CurrentState, run.Iteration)
	switch {
	case h.queued != "":
		reason, msg = v1alpha1.ReasonQueued, h.queued
	case h.retrying != "":
		reason, msg = v1alpha1.ReasonRetrying, h.retrying
	case h.judging:
		reason, msg = v1alpha1.ReasonJudging, fmt.Sprintf("the LLM judge weighs the result of state %s, iteration %d", run.CurrentState, run.Iteration)
	case h.searching:
		msg = fmt.Sprintf("searching the output of state %s, iteration %d, for its pattern", run.CurrentState, run.Iteration)
	case run.Action != nil && run.Action.Verdict:
		reason, msg = v1alpha1.ReasonJudging, fmt.Sprintf("state %s, iteration %d, waits for its verdict", run.Action.State, run.Action.Iteration)
	case run.Action != nil && run.Action.Approval != nil:
		reason, msg = v1alpha1.ReasonAwaitingApproval, fmt.Sprintf("state %s waits for approval (looprun approve or reject): %s", run.Action.State, run.Action.Approval.Message)
	case run.Action != nil:
		reason, msg = v1alpha1.ReasonActionRunning, fmt.Sprintf("running the action of state %s, iteration %d", run.Action.State, run.Action.Iteration)
	case run.NextStepAt != nil && run.Transient != nil && run.Transient.Waiting != "":
		reason, msg = v1alpha1.ReasonRateLimited, waitingMessage(run)
	case run.NextStepAt != nil:
		reason, msg = v1alpha1.ReasonBackoff, fmt.Sprintf("waiting until %s before state %s", run.NextStepAt.UTC().Format("15:04:05"), run.CurrentState)
	}
	set(loop, v1alpha1.ReadyCondition, metav1.ConditionUnknown, reason, msg)
	set(loop, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, reason, msg)
	remove(loop, v1alpha1.StalledCondition)
}

// finished sets the conditions of a Loop that will not go on by itself.
func finished(loop *v1alpha1.Loop, ready metav1.ConditionStatus, reason, msg string, stalled bool) {
	set(loop, v1alpha1.ReadyCondition, ready, reason, msg)
	remove(loop, v1alpha1.ReconcilingCondition)
	if stalled {
		set(loop, v1alpha1.StalledCondition, metav1.ConditionTrue, reason, msg)
	} else {
		remove(loop, v1alpha1.StalledCondition)
	}
}

func set(loop *v1alpha1.Loop, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&loop.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: loop.Generation,
	})
}

func remove(loop *v1alpha1.Loop, types ...string) {
	for _, t := range types {
		meta.RemoveStatusCondition(&loop.Status.Conditions, t)
	}
}

func findCondition(loop *v1alpha1.Loop, typ string) *metav1.Condition {
	return meta.FindStatusCondition(loop.Status.Conditions, typ)
}
