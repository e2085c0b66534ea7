// Package runner is the seam between the reconciler and whatever runs a
// Loop's actions: the Runner interface, what a runner reports (Outcome),
// and how it refuses or fails an action. Its implementations are
// internal/runner/local (processes of the operator, for development) and
// internal/runner/pod (a Pod per action, the default).
package runner

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
)

// Background is work the reconciler has going for Loops beyond a reconcile
// (actions, judge calls, child Loops): it wakes a Loop when something of it
// ends, and lets go of a Loop that is gone. The reconciler loops over its
// Backgrounds for both.
type Background interface {
	// Forget is told that the Loop is gone: whatever runs for it stops and
	// whatever is kept for it goes.
	Forget(key types.NamespacedName)
	// Wakes says what wakes a Loop when its work ends; the reconciler
	// turns it into the controller's watches.
	Wakes() Wake
}

// Wake is what wakes Loops: changes of the objects they own (Owns, let
// through by Predicates), or Loops sent on a channel.
type Wake struct {
	// Owns is a kind of object a Loop owns (controls).
	Owns       client.Object
	Predicates []predicate.Predicate
	// Channel sends the Loops to wake.
	Channel <-chan event.TypedGenericEvent[*v1alpha1.Loop]
}

// WakeOf is the event that wakes the Loop owner through a Wake's Channel.
func WakeOf(owner types.NamespacedName) event.TypedGenericEvent[*v1alpha1.Loop] {
	wake := &v1alpha1.Loop{}
	wake.Namespace, wake.Name = owner.Namespace, owner.Name
	return event.TypedGenericEvent[*v1alpha1.Loop]{Object: wake}
}

// Runner runs a Loop's actions without blocking the reconcile: Start
// returns at once, and the runner wakes the Loop (through what Watch adds
// to the controller) when the action ends.
type Runner interface {
	Background
	// Start starts the Loop's action in flight (status.action), unless it
	// was started before; it may note where it runs in status.action. A
	// *Refused error ends the step with an error verdict; *AlreadyEnded
	// says the action had been started and has ended. recheck asks for a
	// look (Check) after this long even if nothing is heard of the action
	// (0: what Watch adds wakes the Loop for every change that matters).
	Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (recheck time.Duration, err error)
	// Check reports on the Loop's action in flight.
	Check(ctx context.Context, loop *v1alpha1.Loop) (Outcome, error)
	// Release is told that the result of the Loop's action of this
	// iteration was used: the runner need not keep it.
	Release(loop *v1alpha1.Loop, iteration int32)
	// Prune drops what past steps left behind, once the status is saved.
	Prune(ctx context.Context, loop *v1alpha1.Loop) error
	// Cancel stops the Loop's action in flight (a stop or rewind request):
	// its result is not wanted.
	Cancel(ctx context.Context, loop *v1alpha1.Loop) error
	// Hook runs an action of the run's own, outside its states: the exit
	// hook of the ended run (spec.onExit, a.Exit), the clone before its
	// first step or the push after its end (a.Git). It reports on it:
	// started once, found again after a restart (started says the status
	// recorded it running). where names what runs it (a Pod). One that
	// cannot run is Done with a Failure.
	Hook(ctx context.Context, loop *v1alpha1.Loop, a executor.Action, started bool) (out Outcome, where string, err error)
	// Workspace makes the Loop's workspace, when the runner makes one,
	// unless it exists: before the Loop's first action, and before a child
	// Loop that shares it.
	Workspace(ctx context.Context, loop *v1alpha1.Loop) error
}

// ActionKey names an action: the same Loop, run and iteration give the same key.
func ActionKey(loop *v1alpha1.Loop, iteration int32) string {
	return fmt.Sprintf("%s/%s/%d", loop.UID, loop.Status.RunID, iteration)
}

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

// AlreadyEnded is returned by Start when the action was started before (a
// step taken again after its status failed to save) and has ended since:
// its end may have woken the Loop before the status said it runs, so the
// Loop is to be looked at again.
type AlreadyEnded struct{}

func (*AlreadyEnded) Error() string { return "the action was started before and has ended" }

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

// Git runs a clone or a push in this process (the local runners' way; a
// Pod runs `entrypoint git`), with the result an action of it would have:
// what it did as JSON on stdout, git's error on stderr.
func Git(ctx context.Context, op gitws.Op) executor.ActionResult {
	var stdout, stderr bytes.Buffer
	started := time.Now()
	code := gitws.Main(ctx, op, &stdout, &stderr)
	return executor.ActionResult{Output: stdout.String(), Stderr: executor.Tail(stderr.String(), 8<<10), ExitCode: code, Duration: time.Since(started)}
}
