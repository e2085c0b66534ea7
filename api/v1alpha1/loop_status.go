package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where a loop is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Suspended;Paused;Completed;Failed;Interrupted
type Phase string

// The phases. The local state file spells them running, completed, failed, interrupted.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSuspended Phase = "Suspended"
	// PhasePaused: the run's budget is spent; it goes on when it is raised.
	PhasePaused      Phase = "Paused"
	PhaseCompleted   Phase = "Completed"
	PhaseFailed      Phase = "Failed"
	PhaseInterrupted Phase = "Interrupted"
)

// IsFinished reports whether the loop has ended (it may still be resumable
// when Interrupted).
func (p Phase) IsFinished() bool {
	return p == PhaseCompleted || p == PhaseFailed || p == PhaseInterrupted
}

// TerminationReason says why a loop ended.
// +kubebuilder:validation:Enum=terminal;max_iterations;timeout;error;cycle_detected;retry_exhausted;stopped;max_passes;system_signal;stall_detected;handoff;interrupted;budget_exceeded
type TerminationReason string

// The termination reasons.
const (
	TerminatedTerminal       TerminationReason = "terminal"
	TerminatedMaxIterations  TerminationReason = "max_iterations"
	TerminatedTimeout        TerminationReason = "timeout"
	TerminatedError          TerminationReason = "error"
	TerminatedCycleDetected  TerminationReason = "cycle_detected"
	TerminatedRetryExhausted TerminationReason = "retry_exhausted"
	TerminatedStopped        TerminationReason = "stopped"
	// TerminatedMaxPasses: spec.maxPasses full passes of a maintain loop.
	TerminatedMaxPasses TerminationReason = "max_passes"
	// TerminatedSystemSignal: the action of a state with next was killed
	// by a signal it did not get from looprun, and the state has no onError.
	TerminatedSystemSignal TerminationReason = "system_signal"
	// TerminatedStallDetected: the repeated-failure circuit tripped (spec.circuit).
	TerminatedStallDetected TerminationReason = "stall_detected"
	// TerminatedHandoff: an action printed CONTEXT_HANDOFF: (its agent's
	// context is used up); the run is Interrupted, status.message holds
	// the text after the marker, and a resume runs the state again.
	TerminatedHandoff TerminationReason = "handoff"
	// TerminatedInterrupted: an action printed LOOP_STOP:; the run took its
	// route, then stopped (Interrupted, resumable).
	TerminatedInterrupted TerminationReason = "interrupted"
	// TerminatedBudgetExceeded: spec.budget was spent and its onExceeded is Stop.
	TerminatedBudgetExceeded TerminationReason = "budget_exceeded"
)

// The deterministic verdicts; little-loops spells success and failure yes and no.
const (
	VerdictSuccess = "success"
	VerdictFailure = "failure"
	VerdictError   = "error"
	// Convergence verdicts.
	VerdictTarget   = "target"
	VerdictProgress = "progress"
	VerdictStall    = "stall"
	// mcp_result verdicts (and success).
	VerdictToolError = "tool_error"
	VerdictNotFound  = "not_found"
	VerdictTimeout   = "timeout"
	// Approval verdicts (and timeout).
	VerdictApproved = "approved"
	VerdictRejected = "rejected"
)

// LittleLoopsVerdict is how a little-loops file spells verdict v: yes for
// success, no for failure, any other as it is.
func LittleLoopsVerdict(v string) string {
	switch v {
	case VerdictSuccess:
		return "yes"
	case VerdictFailure:
		return "no"
	}
	return v
}

// CurrentStateToken routes back to the state itself.
const CurrentStateToken = "$current"

// CapturedResult is an action result stored under a state's capture name.
// Output and stderr keep only their tail (4 KiB by default).
type CapturedResult struct {
	// output is the tail of stdout, trailing newlines removed.
	// +optional
	Output string `json:"output"`
	// stderr is the tail of stderr.
	// +optional
	Stderr string `json:"stderr"`
	// exitCode of the action; 124 after a timeout, negative when killed by a signal.
	// +optional
	ExitCode int32 `json:"exitCode"`
	// durationMs is how long the action ran.
	// +optional
	DurationMs int64 `json:"durationMs"`
	// verdict the state's evaluation gave.
	// +optional
	Verdict string `json:"verdict,omitempty"`
	// failureType is what a failed action's output says went wrong, as
	// little-loops classifies it (transient, non_recoverable, infra_retry,
	// real); empty when the action succeeded.
	// +optional
	FailureType string `json:"failureType,omitempty"`
	// timeoutKind is wall when the action ran out of its timeout, idle when
	// it printed nothing for its idle timeout; empty otherwise.
	// +optional
	TimeoutKind string `json:"timeoutKind,omitempty"`
	// eventStream says output is a sub-loop's event stream (the capture of
	// a sub-loop state): it has no exit code, stderr or duration.
	// +optional
	EventStream bool `json:"eventStream,omitempty"`
	// loop is how the sub-loop of the state ended, kept under the state's
	// name: ${captured.STATE.terminated_by}, ${captured.STATE.NAME.output}.
	// +optional
	Loop *SubLoopResult `json:"loop,omitempty"`
}

// StallCounter is what a stall evaluator saw last, and how many times in
// a row.
type StallCounter struct {
	// hash of what was seen.
	// +optional
	Hash string `json:"hash"`
	// count of rounds in a row it did not change.
	// +optional
	Count int32 `json:"count"`
}

// SubLoopResult is how a sub-loop ended.
type SubLoopResult struct {
	// terminatedBy says why the child ended (terminal, max_iterations, ...).
	// +optional
	TerminatedBy string `json:"terminatedBy"`
	// failureTerminal is true when the child ended in a failure state.
	// +optional
	FailureTerminal bool `json:"failureTerminal,omitempty"`
	// error is the child's error message, when it ended in error.
	// +optional
	Error string `json:"error,omitempty"`
	// captured are the child's captures, brought back when the state has
	// contextPassthrough or with. A sub-loop state of the child is there
	// too, with how its own child ended; that grandchild's captures (when
	// the child's state brought them back) are under the path of state
	// names that leads to them, joined with dots: inner.greeting is the
	// capture greeting of the loop the child's state inner ran.
	// +optional
	Captured map[string]ChildCapture `json:"captured,omitempty"`
}

// ChildCapture is one capture of a sub-loop.
type ChildCapture struct {
	// output is the tail of the child's captured output.
	// +optional
	Output string `json:"output"`
	// stderr is the tail of the child's captured stderr.
	// +optional
	Stderr string `json:"stderr,omitempty"`
	// exitCode of the child's action.
	// +optional
	ExitCode int32 `json:"exitCode"`
	// durationMs is how long the child's action ran.
	// +optional
	DurationMs int64 `json:"durationMs,omitempty"`
	// verdict the child's state gave.
	// +optional
	Verdict string `json:"verdict,omitempty"`
	// failureType and timeoutKind say why the child's action failed and
	// how it timed out (as its own capture does).
	// +optional
	FailureType string `json:"failureType,omitempty"`
	// +optional
	TimeoutKind string `json:"timeoutKind,omitempty"`
	// terminatedBy says why the loop a sub-loop state of the child ran
	// ended; empty for any other capture.
	// +optional
	TerminatedBy string `json:"terminatedBy,omitempty"`
	// failureTerminal is true when that loop ended in a failure state.
	// +optional
	FailureTerminal bool `json:"failureTerminal,omitempty"`
	// error is that loop's error message, when it ended in error.
	// +optional
	Error string `json:"error,omitempty"`
}

// PrevResult is the result of the previously executed state.
type PrevResult struct {
	// output is the tail of the previous action's stdout.
	// +optional
	Output string `json:"output"`
	// exitCode of the previous action.
	// +optional
	ExitCode int32 `json:"exitCode"`
	// state that ran.
	// +optional
	State string `json:"state"`
	// timeoutKind is wall or idle when the previous action timed out.
	// +optional
	TimeoutKind string `json:"timeoutKind,omitempty"`
}

// EvaluationResult is a verdict and the evaluator's details.
type EvaluationResult struct {
	// verdict routes the loop.
	// +optional
	Verdict string `json:"verdict"`
	// details are the evaluator's findings (value, target, reason, ...).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Details *apiextensionsv1.JSON `json:"details,omitempty"`
}

// ActionStatus is the action in flight.
type ActionStatus struct {
	// state whose action runs.
	// +optional
	State string `json:"state"`
	// iteration the action belongs to.
	// +optional
	Iteration int32 `json:"iteration"`
	// command is the interpolated action.
	// +optional
	Command string `json:"command"`
	// agent is true for agent actions.
	// +optional
	Agent bool `json:"agent,omitempty"`
	// timeoutSeconds bounds the action.
	// +optional
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
	// startedAt is when the action started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// pod runs the action, when actions run as pods.
	// +optional
	Pod string `json:"pod,omitempty"`
	// podUID is the uid of that Pod, recorded when the operator made it:
	// the model gateway takes calls of this step only from the Pod of this
	// uid.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID,omitempty"`
	// step is the id the action was handed to a warm runner Pod as
	// (RUN.ITERATION.RETRY): the runner runs a step of one id once and
	// answers for it again after any restart.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Step string `json:"step,omitempty"`
	// flush marks an action run once before the loop's timeout ends it.
	// +optional
	Flush bool `json:"flush,omitempty"`
	// loop is the loop a sub-loop state runs (its name, templates expanded).
	// +optional
	Loop string `json:"loop,omitempty"`
	// child names the sub-loop's run: a child Loop in a cluster, a local
	// run's name on a laptop.
	// +optional
	Child string `json:"child,omitempty"`
	// childUID is the uid of the child Loop once it was made: a child of
	// that name that is gone, or is another object, was deleted, and the
	// state ends in error (ChildDeleted) rather than run it again.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ChildUID string `json:"childUID,omitempty"`
	// approval is the question of an approval state waiting for a person.
	// +optional
	Approval *ApprovalWait `json:"approval,omitempty"`
	// verdict marks a state without an action that waits for its verdict
	// (the LLM judge's, a pattern search's): it is judged, not entered, again.
	// +optional
	Verdict bool `json:"verdict,omitempty"`
}

// ApprovalWait is an approval state's question while it waits.
type ApprovalWait struct {
	// message is the question, its templates expanded.
	// +optional
	Message string `json:"message,omitempty"`
	// deadline is when the wait ends with the verdict timeout; unset: none.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
}

// RunState is the saved state of a run: the executor reads and writes it,
// the operator keeps it in the Loop status, the local CLI in the state file.
type RunState struct {
	// runID names this run; it changes only when the run starts over.
	// +optional
	RunID string `json:"runID,omitempty"`
	// currentState is the state the loop is in.
	// +optional
	CurrentState string `json:"currentState,omitempty"`
	// iteration counts state executions.
	// +optional
	Iteration int32 `json:"iteration,omitempty"`
	// passes counts maintain-mode restarts.
	// +optional
	Passes int32 `json:"passes,omitempty"`
	// capSummary is the limit (max_iterations, max_passes) whose summary
	// state (onMaxIterations, onMaxPasses) was entered; the run ends by it
	// once the summary state ran.
	// +optional
	CapSummary TerminationReason `json:"capSummary,omitempty"`
	// routed is true between a route and the state it goes to: a timeout
	// then flushes that state's shell action once.
	// +optional
	Routed bool `json:"routed,omitempty"`
	// routedFromLoop is true when that route left a sub-loop state: the
	// step cap then flushes the action of the state it goes to once, before
	// its summary state (onMaxIterations).
	// +optional
	RoutedFromLoop bool `json:"routedFromLoop,omitempty"`
	// stalls are the counters of the stall evaluators (diff_stall,
	// action_stall), by evaluator and scope: what was seen last and how
	// many times in a row.
	// +optional
	Stalls map[string]StallCounter `json:"stalls,omitempty"`
	// captured holds results stored by states with capture.
	// +optional
	Captured map[string]CapturedResult `json:"captured,omitempty"`
	// messages is the run's messages log (states' appendToMessages), the
	// oldest entries dropped past the run's bound for captures.
	// +optional
	Messages []string `json:"messages,omitempty"`
	// prevResult is the result of the previously executed state.
	// +optional
	PrevResult *PrevResult `json:"prevResult,omitempty"`
	// lastResult is the latest evaluation.
	// +optional
	LastResult *EvaluationResult `json:"lastResult,omitempty"`
	// startedAt is when the run started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// updatedAt is when the run state last changed.
	// +optional
	UpdatedAt *metav1.Time `json:"updatedAt,omitempty"`
	// phase is where the run is.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// terminatedBy says why the run ended.
	// +optional
	TerminatedBy TerminationReason `json:"terminatedBy,omitempty"`
	// message explains an error ending.
	// +optional
	Message string `json:"message,omitempty"`
	// action is the action in flight.
	// +optional
	Action *ActionStatus `json:"action,omitempty"`
	// nextStepAt is when the next state may start (backoff).
	// +optional
	NextStepAt *metav1.Time `json:"nextStepAt,omitempty"`
	// exitHook is what spec.onExit did at the run's end.
	// +optional
	ExitHook *ExitHookStatus `json:"exitHook,omitempty"`
	// git is what spec.runner.workspace.git did in this run: the clone and
	// the push.
	// +optional
	Git *GitStatus `json:"git,omitempty"`
	// trace is the run's place in an OpenTelemetry trace, when the
	// operator (or looprun run) traces: kept with the run so that its spans
	// after a restart or a resume belong to the same trace.
	// +optional
	Trace *TraceState `json:"trace,omitempty"`
	// edgeRevisits counts traversals of each edge "from->to".
	// +optional
	EdgeRevisits map[string]int32 `json:"edgeRevisits,omitempty"`
	// retryCounts counts consecutive re-entries of a state.
	// +optional
	RetryCounts map[string]int32 `json:"retryCounts,omitempty"`

	// retries is how many times the current state's action was run again
	// after a transient failure (spec.states[].retryPolicy), this visit.
	// +optional
	Retries int32 `json:"retries,omitempty"`
	// transient counts the current state's tries after failures of a cause
	// the machine knows (rate limits, API errors).
	// +optional
	Transient *TransientStatus `json:"transient,omitempty"`
	// accumulatedMs is running time before the last resume (local runs).
	// +optional
	AccumulatedMs int64 `json:"accumulatedMs,omitempty"`
	// resumedAt is when the run was last resumed (local runs).
	// +optional
	ResumedAt *metav1.Time `json:"resumedAt,omitempty"`
	// lastSeq is the sequence number of the last event appended.
	// +optional
	LastSeq int64 `json:"lastSeq,omitempty"`
	// usage is what the run's agent actions used and cost, in all and per
	// state.
	// +optional
	Usage *UsageStatus `json:"usage,omitempty"`
	// budget is where the run stands against its budget.
	// +optional
	Budget *BudgetStatus `json:"budget,omitempty"`
}

// BudgetStatus is where a run stands against its budget.
type BudgetStatus struct {
	// runMaxCostMicroUSD is a ceiling of this run alone, in millionths of
	// a dollar (looprun run --max-cost); it applies beside spec.budget.
	// +optional
	RunMaxCostMicroUSD *int64 `json:"runMaxCostMicroUSD,omitempty"`
	// warned is the limit, as "cost:<micro-USD>" or "tokens:<n>", whose
	// warning was given, so that it is given once per limit.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Warned string `json:"warned,omitempty"`
	// exceeded says what was spent against which limit while the run is
	// paused or after it stopped on it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Exceeded string `json:"exceeded,omitempty"`
}

// UsageTotals sums the tokens and cost of agent actions.
type UsageTotals struct {
	// calls is how many agent actions reported their usage.
	// +optional
	Calls int64 `json:"calls,omitempty"`
	// inputTokens, outputTokens, cacheReadTokens and cacheCreationTokens
	// are the tokens the agent CLI reported.
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// +optional
	CacheReadTokens int64 `json:"cacheReadTokens,omitempty"`
	// +optional
	CacheCreationTokens int64 `json:"cacheCreationTokens,omitempty"`
	// costMicroUSD is the cost in millionths of a US dollar, computed by
	// looprun from the tokens and its price table.
	// +optional
	CostMicroUSD int64 `json:"costMicroUSD,omitempty"`
	// unpricedCalls counts calls of a model the price table does not
	// list: their tokens are counted, their cost is not.
	// +optional
	UnpricedCalls int64 `json:"unpricedCalls,omitempty"`
	// cliCostMicroUSD is the agent CLI's own figure for the cost, kept
	// beside looprun's (it is wrong behind a proxy, for one).
	// +optional
	CLICostMicroUSD int64 `json:"cliCostMicroUSD,omitempty"`
	// model is the model of the last call.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model,omitempty"`
}

// UsageStatus is what a run's agent actions used.
type UsageStatus struct {
	UsageTotals `json:",inline"`
	// states holds the same per state (a Loop has at most 128 states).
	// +optional
	// +kubebuilder:validation:MaxProperties=128
	States map[string]UsageTotals `json:"states,omitempty"`
	// reported is what the agents printed they used, kept beside the
	// totals when the model gateway metered the calls: the totals, and so
	// the budget, are the gateway's count; this is never trusted.
	// +optional
	Reported *UsageTotals `json:"reported,omitempty"`
}

// EventLogStatus locates a Loop's event log: ConfigMaps named
// <loop>-events-<n>, n from firstSegment to lastSegment, each holding JSONL.
type EventLogStatus struct {
	// firstSegment is the oldest segment kept.
	// +optional
	FirstSegment int32 `json:"firstSegment,omitempty"`
	// lastSegment is the segment appended to.
	// +optional
	LastSegment int32 `json:"lastSegment,omitempty"`
	// count is how many events the kept segments hold.
	// +optional
	Count int64 `json:"count,omitempty"`
	// lastSeq is the sequence number of the last event in the log.
	// +optional
	LastSeq int64 `json:"lastSeq,omitempty"`
	// bytes is the size of the kept segments.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
}

// CheckpointIndex locates a Loop's kept checkpoints. The snapshots live in
// the event log segments, under the key checkpoints.jsonl, each with a
// SHA-256 checksum checked on every read; `looprun checkpoints` lists them.
// The index stays a few fields long however many are kept, as every status
// write costs the API server in proportion to the status.
type CheckpointIndex struct {
	// latest is the newest checkpoint.
	// +optional
	Latest *CheckpointRef `json:"latest,omitempty"`
	// segments are the event log segments holding kept checkpoints, oldest
	// first, each with how many: a segment's kept checkpoints are its last
	// ones (older ones in it are dropped with it once none is kept).
	// +optional
	// +listType=atomic
	Segments []CheckpointSegment `json:"segments,omitempty"`
}

// Count is how many checkpoints are kept, at most spec.history.maxCheckpoints.
func (ix *CheckpointIndex) Count() int32 {
	if ix == nil {
		return 0
	}
	var n int32
	for _, s := range ix.Segments {
		n += s.Kept
	}
	return n
}

// CheckpointSegment is an event log segment holding kept checkpoints.
type CheckpointSegment struct {
	// segment is the segment's number.
	Segment int32 `json:"segment"`
	// kept is how many of its checkpoints are kept: its last ones.
	Kept int32 `json:"kept"`
	// minIteration and maxIteration bound the iterations of its
	// checkpoints, so one is found without reading every segment.
	// +optional
	MinIteration int32 `json:"minIteration,omitempty"`
	// +optional
	MaxIteration int32 `json:"maxIteration,omitempty"`
}

// CheckpointRef names one checkpoint.
type CheckpointRef struct {
	// iteration the checkpoint was taken after.
	Iteration int32 `json:"iteration"`
	// state the loop was about to enter.
	// +optional
	State string `json:"state,omitempty"`
	// time the checkpoint was taken.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// segment is the event log segment holding it.
	// +optional
	Segment int32 `json:"segment,omitempty"`
	// seq is the sequence number of the run's last event when it was
	// taken; it tells checkpoints of the same iteration apart (after a rewind).
	Seq int64 `json:"seq"`
}

// LoopStatus is the observed state of a Loop: the saved run state plus conditions.
type LoopStatus struct {
	RunState `json:",inline"`

	// eventLog locates the loop's event log.
	// +optional
	EventLog *EventLogStatus `json:"eventLog,omitempty"`

	// checkpoints locates the kept checkpoints of the run.
	// +optional
	Checkpoints *CheckpointIndex `json:"checkpoints,omitempty"`

	// lastRequest is the value of the looprun.io/request annotation this
	// Loop last carried out (stop, rewind), so a request runs once.
	// +optional
	LastRequest string `json:"lastRequest,omitempty"`

	// observedGeneration is the spec generation the status reflects; 0
	// (the default, present from creation) until the operator first saw
	// the Loop, so that GitOps tools read a new Loop as in progress.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Ready, Reconciling and Stalled, following kstatus,
	// and CheckpointError.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=lp
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.currentState`
// +kubebuilder:printcolumn:name="Iteration",type=integer,JSONPath=`.status.iteration`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.status.lastResult.verdict`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why the Loop is where it is: what it waits for while it runs, how it ended (Completed, FailureState, Error, Timeout, MaxIterations, ...)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.status.runID`,priority=1
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.action.pod`,priority=1
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updatedAt`,priority=1

// Loop runs a state machine: each state runs an action, judges the result and
// routes to the next state, until a terminal state or a limit.
type Loop struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the state machine.
	// +required
	Spec LoopSpec `json:"spec"`

	// status is the saved run state.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status LoopStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// LoopList is a list of Loops.
type LoopList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Loop `json:"items"`
}

// ExitHookPhase is where a run's exit hook, its clone or its push is.
// +kubebuilder:validation:Enum=Running;Succeeded;Failed
type ExitHookPhase string

// The exit hook's phases.
const (
	ExitHookRunning   ExitHookPhase = "Running"
	ExitHookSucceeded ExitHookPhase = "Succeeded"
	ExitHookFailed    ExitHookPhase = "Failed"
)

// TraceState is a run's place in a trace.
type TraceState struct {
	// traceParent is the W3C traceparent of the run's span: its trace id
	// and span id.
	// +kubebuilder:validation:MaxLength=55
	TraceParent string `json:"traceParent"`
	// parentSpanID is the span the run's span is a child of (a parent
	// Loop's state visit, the looprun.io/traceparent annotation's); empty
	// for the root of a trace.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	ParentSpanID string `json:"parentSpanID,omitempty"`
	// state, iteration and enteredAt are the state visit in progress,
	// whose span ends when the state routes.
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	Iteration int32 `json:"iteration,omitempty"`
	// +optional
	EnteredAt *metav1.MicroTime `json:"enteredAt,omitempty"`
}

// GitStatus is what a run's workspace.git did.
type GitStatus struct {
	// clone is the checkout made before the first step.
	// +optional
	Clone *GitOpStatus `json:"clone,omitempty"`
	// push is the commit and push after the run's end.
	// +optional
	Push *GitOpStatus `json:"push,omitempty"`
}

// GitOpStatus is how a clone or a push went.
type GitOpStatus struct {
	// iteration is the run's iteration when it was made: a push is made
	// once per end (a resumed run that ends again pushes again).
	Iteration int32 `json:"iteration"`
	// phase is Running, Succeeded or Failed.
	Phase ExitHookPhase `json:"phase"`
	// pod runs it (in a cluster).
	// +optional
	Pod string `json:"pod,omitempty"`
	// commit checked out (clone) or pushed (push; the checkout's HEAD
	// when there was nothing to push).
	// +optional
	Commit string `json:"commit,omitempty"`
	// branch pushed to.
	// +optional
	Branch string `json:"branch,omitempty"`
	// pushed is false for a push that found nothing new since the clone.
	// +optional
	Pushed bool `json:"pushed,omitempty"`
	// message says why it failed (git's error).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// ExitHookStatus is what a run's exit hook (spec.onExit) did.
type ExitHookStatus struct {
	// iteration is the run's iteration when it ended: the hook runs once
	// per end (a rewound run that ends again runs it again).
	Iteration int32 `json:"iteration"`
	// phase is Running, Succeeded (exit 0) or Failed.
	Phase ExitHookPhase `json:"phase"`
	// pod runs the hook (in a cluster).
	// +optional
	Pod string `json:"pod,omitempty"`
	// exitCode of the hook's action.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// message says why it failed (the end of its stderr, or why it could
	// not run).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// startedAt and finishedAt bound its run.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}
