package v1alpha1

// Condition types, following kstatus: GitOps tools (Argo CD, Flux,
// kubectl wait) read a Loop's health from them without plugins.
const (
	// ReadyCondition is True when the loop completed, False when it failed or
	// stopped at a limit, Unknown while it runs.
	ReadyCondition = "Ready"

	// ReconcilingCondition is True while the loop runs; absent otherwise.
	ReconcilingCondition = "Reconciling"

	// StalledCondition is True when the loop cannot go on without a person:
	// an invalid spec, a failed loop; absent otherwise.
	StalledCondition = "Stalled"

	// CheckpointErrorCondition is True when a checkpoint a request needed
	// (fork, rewind) was missing or failed its checksum; absent otherwise.
	CheckpointErrorCondition = "CheckpointError"
)

// Condition reasons.
const (
	// ReasonProgressing: the loop is running its states.
	ReasonProgressing = "Progressing"
	// ReasonActionRunning: a state's action is running.
	ReasonActionRunning = "ActionRunning"
	// ReasonBackoff: the loop waits out spec.backoff before the next state.
	ReasonBackoff = "Backoff"
	// ReasonRateLimited: a state's action failed on a rate limit (or an API
	// error) and waits to run again.
	ReasonRateLimited = "RateLimited"
	// ReasonQueued: the Loop waits to start, its namespace running as many
	// Loops as the operator allows (--max-running-loops-per-namespace).
	ReasonQueued = "Queued"
	// ReasonJudging: the LLM judge is weighing a state's result.
	ReasonJudging = "Judging"
	// ReasonAwaitingApproval: an approval state waits for a person
	// (looprun approve, looprun reject).
	ReasonAwaitingApproval = "AwaitingApproval"
	// ReasonEventLogFailed: the step's events could not be written; the
	// step is not kept and is taken again.
	ReasonEventLogFailed = "EventLogFailed"
	// ReasonRetrying: the step failed for a reason that may pass (the API
	// server unavailable, a quota full); it is taken again with backoff and
	// the message says why.
	ReasonRetrying = "Retrying"
	// ReasonSuspended: spec.suspend holds the loop between states.
	ReasonSuspended = "Suspended"
	// ReasonBudgetExceeded: the run's budget is spent; a paused loop goes
	// on when it is raised (looprun budget, or a spec edit).
	ReasonBudgetExceeded = "BudgetExceeded"
	// ReasonNoRunner: no way to run actions is available to the operator.
	ReasonNoRunner = "NoRunnerAvailable"
	// ReasonCompleted: the loop reached a terminal state.
	ReasonCompleted = "Completed"
	// ReasonFailureState: the loop reached a terminal state marked as failure.
	ReasonFailureState = "FailureState"
	// ReasonMaxIterations: the loop stopped at spec.maxIterations.
	ReasonMaxIterations = "MaxIterations"
	// ReasonTimeout: the loop ran past spec.timeout.
	ReasonTimeout = "Timeout"
	// ReasonCycleDetected: an edge was taken more than spec.maxEdgeRevisits times.
	ReasonCycleDetected = "CycleDetected"
	// ReasonRetryExhausted: a state re-entered itself more than its maxRetries.
	ReasonRetryExhausted = "RetryExhausted"
	// ReasonError: the loop ended with an error (no route for a verdict, a missing variable, ...).
	ReasonError = "Error"
	// ReasonStopped: the loop was stopped.
	ReasonStopped = "Stopped"
	// ReasonInvalidSpec: the spec cannot run; the message names the state and field.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonCheckpointCorrupt: a checkpoint failed its SHA-256 check.
	ReasonCheckpointCorrupt = "CheckpointCorrupt"
	// ReasonCheckpointMissing: the checkpoint asked for is not there.
	ReasonCheckpointMissing = "CheckpointMissing"
)

// TerminationReasonToCondition gives the condition reason of a finished loop.
func TerminationReasonToCondition(r TerminationReason, failureState bool) string {
	switch r {
	case TerminatedTerminal:
		if failureState {
			return ReasonFailureState
		}
		return ReasonCompleted
	case TerminatedMaxIterations:
		return ReasonMaxIterations
	case TerminatedTimeout:
		return ReasonTimeout
	case TerminatedCycleDetected:
		return ReasonCycleDetected
	case TerminatedRetryExhausted:
		return ReasonRetryExhausted
	case TerminatedStopped:
		return ReasonStopped
	case TerminatedBudgetExceeded:
		return ReasonBudgetExceeded
	}
	return ReasonError
}
