package v1alpha1

// Reasons of the Kubernetes Events the operator emits on a Loop (kubectl
// events --for loop/NAME). Some Events reuse a condition's reason:
// ReasonQueued, ReasonRetrying, ReasonError, ReasonCheckpointMissing and
// ReasonCheckpointCorrupt.
const (
	// EventReasonStarted: a run began in the spec's initial state.
	EventReasonStarted = "Started"
	// EventReasonSpecChanged: a new generation of the spec applies from the
	// next state.
	EventReasonSpecChanged = "SpecChanged"
	// EventReasonCompleted: the run ended in a terminal state that is not a
	// failure.
	EventReasonCompleted = "Completed"
	// EventReasonFailed (Warning): the run ended otherwise (a failure state,
	// a limit, an error, a stop).
	EventReasonFailed = "Failed"
	// EventReasonInvalidSpec (Warning): the spec cannot run; once per message.
	EventReasonInvalidSpec = "InvalidSpec"
	// EventReasonHandoff: an action asked for a handoff; the Loop pauses
	// until it is resumed.
	EventReasonHandoff = "Handoff"

	// EventReasonActionRetry (Warning): the action failed for a transient
	// reason (its Pod lost, an API server error, an agent killed after its
	// result) and runs again.
	EventReasonActionRetry = "ActionRetry"
	// EventReasonRetryExhausted (Warning): a state used up its retries and
	// escalates.
	EventReasonRetryExhausted = "RetryExhausted"
	// EventReasonActionRestarted (Warning): the process running the action
	// was lost; the action runs again.
	EventReasonActionRestarted = "ActionRestarted"
	// EventReasonRateLimited (Warning): the action hit a rate limit and
	// waits.
	EventReasonRateLimited = "RateLimited"
	// EventReasonRateLimitExhausted (Warning): the waits on rate limits are
	// spent; the state goes on.
	EventReasonRateLimitExhausted = "RateLimitExhausted"
	// EventReasonRateLimitStorm (Warning): rate limits were exhausted
	// several times in a row.
	EventReasonRateLimitStorm = "RateLimitStorm"

	// EventReasonBudgetWarning (Warning): the run spent spec.budget.warnAt
	// percent of a limit.
	EventReasonBudgetWarning = "BudgetWarning"
	// EventReasonBudgetExceeded (Warning): the run spent a limit of its
	// budget; its action is spec.budget.onExceeded.
	EventReasonBudgetExceeded = "BudgetExceeded"
	// EventReasonBudgetRaised: a Loop paused on its budget goes on.
	EventReasonBudgetRaised = "BudgetRaised"
	// EventReasonCostCeiling (Warning): a state's visit cost more than its
	// cost ceiling; its verdict is error.
	EventReasonCostCeiling = "CostCeiling"
	// EventReasonCostWarning (Warning): a state's visit cost its ceiling's
	// warning.
	EventReasonCostWarning = "CostWarning"

	// EventReasonApprovalRequested: an approval state waits for a person.
	EventReasonApprovalRequested = "ApprovalRequested"
	// EventReasonApproval: an approval was answered (approved, rejected or
	// timed out; Warning unless approved).
	EventReasonApproval = "Approval"
	// EventReasonNoApprovalWaiting (Warning): an approve or reject request
	// came while the Loop waits for no approval.
	EventReasonNoApprovalWaiting = "NoApprovalWaiting"
	// EventReasonApprovalRefused (Warning): an answer names another
	// approval than the one waiting.
	EventReasonApprovalRefused = "ApprovalRefused"
	// EventReasonInvalidRequest (Warning): a fork or rewind request cannot
	// be done.
	EventReasonInvalidRequest = "InvalidRequest"
	// EventReasonForked: the run started from another Loop's checkpoint.
	EventReasonForked = "Forked"
	// EventReasonRewound: the run went back to one of its checkpoints.
	EventReasonRewound = "Rewound"

	// EventReasonChildCreated: a sub-loop state created its child Loop.
	EventReasonChildCreated = "ChildCreated"
	// EventReasonWorktreeNotSupported (Warning): a sub-loop state asks for a
	// worktree, which the operator does not make; the child shares the
	// workspace.
	EventReasonWorktreeNotSupported = "WorktreeNotSupported"

	// EventReasonCloned: the run's checkout of workspace.git was made.
	EventReasonCloned = "Cloned"
	// EventReasonCloneFailed (Warning): the checkout could not be made.
	EventReasonCloneFailed = "CloneFailed"
	// EventReasonPushed: the run's commit was pushed.
	EventReasonPushed = "Pushed"
	// EventReasonNothingToPush: nothing changed since the clone.
	EventReasonNothingToPush = "NothingToPush"
	// EventReasonPushFailed (Warning): the push failed.
	EventReasonPushFailed = "PushFailed"
	// EventReasonExitHookStarted: the run ended and its exit hook runs.
	EventReasonExitHookStarted = "ExitHookStarted"
	// EventReasonExitHookSucceeded: the exit hook ended with exit 0.
	EventReasonExitHookSucceeded = "ExitHookSucceeded"
	// EventReasonExitHookFailed (Warning): the exit hook failed.
	EventReasonExitHookFailed = "ExitHookFailed"
)

// Reasons of the Kubernetes Events the operator emits on a LoopSchedule.
// A refused run's Event has the condition's reason, RunRefused.
const (
	// EventReasonRunStarted: the schedule created a run.
	EventReasonRunStarted = "RunStarted"
	// EventReasonRunSkipped: a run was due while another runs
	// (concurrencyPolicy Forbid).
	EventReasonRunSkipped = "RunSkipped"
	// EventReasonRunReplaced: a running run was deleted for the one due
	// (concurrencyPolicy Replace).
	EventReasonRunReplaced = "RunReplaced"
	// EventReasonRunNotStarted (Warning): the run due could not start.
	EventReasonRunNotStarted = "RunNotStarted"
	// EventReasonMissedSchedule (Warning): a run time passed without a run
	// (past startingDeadlineSeconds).
	EventReasonMissedSchedule = "MissedSchedule"
	// EventReasonTooManyMissedTimes (Warning): many run times were missed;
	// only the latest starts.
	EventReasonTooManyMissedTimes = "TooManyMissedTimes"
)
