// Package runner holds what the ways of running an action (local processes,
// Pods) report to the reconciler.
package runner

import (
	"fmt"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

// State is what a runner knows of a Loop's action in flight.
type State int

const (
	// Running means the action runs (or its Pod is on its way).
	Running State = iota
	// Done means the action ended; the Outcome holds its result.
	Done
	// NotStarted means the action was never started: start it.
	NotStarted
	// Lost means the action was started but whatever ran it is gone (an
	// operator restart killed a local process): start it again, and say so.
	Lost
)

// Outcome is a runner's answer about the action in flight.
type Outcome struct {
	State State
	// Result is the action's result when State is Done.
	Result executor.ActionResult
	// RecheckAfter asks to look again after this long even if nothing
	// happens (a Pod that has not started yet may have to be given up).
	RecheckAfter time.Duration
}

// Refused is returned by a runner that will not run an action at all (the
// Loop asks for something forbidden, or names no image): the step ends with
// an error verdict carrying the reason, instead of being tried again.
type Refused struct {
	Reason  string
	Message string
}

func (r *Refused) Error() string { return fmt.Sprintf("%s: %s", r.Reason, r.Message) }

// Failure is the error verdict of an action that did not run to its end.
func Failure(reason, format string, args ...any) executor.ActionResult {
	msg := fmt.Sprintf(format, args...)
	return executor.ActionResult{ExitCode: -1, Stderr: msg, Failure: &executor.ActionFailure{Reason: reason, Message: msg}}
}

// TransientFailure is a Failure that running the action again may well
// avoid (its Pod never started, was lost or evicted): a state's retryPolicy
// retries it.
func TransientFailure(reason, format string, args ...any) executor.ActionResult {
	res := Failure(reason, format, args...)
	res.Failure.Transient = true
	return res
}
