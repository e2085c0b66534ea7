// Package judge runs a Loop's LLM judge calls in the background, as its
// actions run (internal/runner/background): a reconcile never waits for a
// model. Ask starts a call (once per key) and returns its verdict once it
// came; the call's end wakes the Loop. Every call is capped in time,
// whatever the Loop asks for, and cancelled when the Loop goes.
package judge

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/background"
)

// DefaultMaxTimeout caps a judge call when the operator sets no cap.
const DefaultMaxTimeout = 2 * time.Minute

// Runner runs judge calls in the background.
type Runner struct {
	// MaxTimeout caps every call (default DefaultMaxTimeout).
	MaxTimeout time.Duration

	jobs *background.Jobs[evaluate.Result]
}

// NewRunner returns a Runner whose calls last at most maxTimeout.
func NewRunner(maxTimeout time.Duration) *Runner {
	if maxTimeout <= 0 {
		maxTimeout = DefaultMaxTimeout
	}
	return &Runner{MaxTimeout: maxTimeout, jobs: background.New[evaluate.Result]()}
}

// Ask returns the verdict of the call under key once it ended (ok). Until
// then it starts the call, unless it runs already, and ok is false: the
// Loop is woken when the verdict is there.
func (r *Runner) Ask(loop *v1alpha1.Loop, key string, j evaluate.Judge, req evaluate.JudgeRequest) (res evaluate.Result, ok bool) {
	return r.Decide(loop, key, func(ctx context.Context) evaluate.Result {
		res := j.Judge(ctx, req)
		if ctx.Err() != nil && res.Verdict == v1alpha1.VerdictError {
			res.Details = map[string]any{"error": "the judge did not answer within " + r.MaxTimeout.String() + " (the operator's cap)", "timeout": true}
		}
		return res
	})
}

// Decide is Ask for any verdict made in the background (a pattern search
// over an action's output): work runs once under key, capped in time as a
// judge call is.
func (r *Runner) Decide(loop *v1alpha1.Loop, key string, work func(ctx context.Context) evaluate.Result) (res evaluate.Result, ok bool) {
	if res, state := r.jobs.Result(key); state == background.Done {
		return res, true
	}
	owner := types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name}
	r.jobs.Start(key, owner, r.MaxTimeout, work)
	return evaluate.Result{}, false
}

// Release drops the verdict under key: it was used.
func (r *Runner) Release(key string) { r.jobs.Release(key) }

// Forget cancels the Loop's calls and drops their verdicts: it is gone.
func (r *Runner) Forget(owner types.NamespacedName) { r.jobs.Forget(owner) }

// Running counts the calls in flight.
func (r *Runner) Running() int { return r.jobs.Running() }

// Wakes implements runner.Background: an ended call wakes its Loop
// through a channel.
func (r *Runner) Wakes() runner.Wake { return r.jobs.Wakes() }

// Close cancels every call, refuses new ones and waits for them.
func (r *Runner) Close() { r.jobs.Close() }
