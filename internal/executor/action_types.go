package executor

import "github.com/looprun/looprun/internal/action"

// The types a runner is given and gives back live in internal/action, which
// runners link without the engine; these names keep the executor's callers
// as they were.
type (
	// Action is action.Action.
	Action = action.Action
	// UsageTarget is action.UsageTarget.
	UsageTarget = action.UsageTarget
	// ActionResult is action.Result.
	ActionResult = action.Result
	// Metered is what the gateway counted a step's model calls used.
	Metered = action.Metered
	// ActionFailure is action.Failure.
	ActionFailure = action.Failure
	// ProbeResult is action.ProbeResult.
	ProbeResult = action.ProbeResult
	// LearningGate is action.LearningGate.
	LearningGate = action.LearningGate
	// ChildResult is action.ChildResult.
	ChildResult = action.ChildResult
	// ApprovalAnswer is action.ApprovalAnswer.
	ApprovalAnswer = action.ApprovalAnswer
	// Signal is action.Signal.
	Signal = action.Signal
	// SignalScanner is action.SignalScanner.
	SignalScanner = action.SignalScanner
)

// The kinds of signal (action.SignalHandoff, ...).
const (
	SignalHandoff  = action.SignalHandoff
	SignalError    = action.SignalError
	SignalStop     = action.SignalStop
	MaxSignalBytes = action.MaxSignalBytes
)

// DetectSignal is action.DetectSignal.
func DetectSignal(output string) *Signal { return action.DetectSignal(output) }

// Tail is action.Tail.
func Tail(s string, max int) string { return action.Tail(s, max) }
