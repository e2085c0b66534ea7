// Package judge runs a Loop's LLM judge calls in the background, as its
// actions run: a reconcile never waits for a model. Ask starts a call (once
// per key) and returns its verdict once it came; the call's end wakes the
// Loop through a channel. Every call is capped in time, whatever the Loop
// asks for, and cancelled when the Loop goes.
package judge

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// DefaultMaxTimeout caps a judge call when the operator sets no cap.
const DefaultMaxTimeout = 2 * time.Minute

// Runner runs judge calls in the background.
type Runner struct {
	// MaxTimeout caps every call (default DefaultMaxTimeout).
	MaxTimeout time.Duration

	events chan event.TypedGenericEvent[*v1alpha1.Loop]
	mu     sync.Mutex
	calls  map[string]*call
	wg     sync.WaitGroup
	closed bool
}

type call struct {
	owner  types.NamespacedName
	done   bool
	res    evaluate.Result
	cancel context.CancelFunc
}

// NewRunner returns a Runner whose calls last at most maxTimeout.
func NewRunner(maxTimeout time.Duration) *Runner {
	if maxTimeout <= 0 {
		maxTimeout = DefaultMaxTimeout
	}
	return &Runner{MaxTimeout: maxTimeout, events: make(chan event.TypedGenericEvent[*v1alpha1.Loop], 1024), calls: map[string]*call{}}
}

// Ask returns the verdict of the call under key once it ended (ok). Until
// then it starts the call, unless it runs already, and ok is false: the
// Loop is woken when the verdict is there.
func (r *Runner) Ask(loop *v1alpha1.Loop, key string, j evaluate.Judge, req evaluate.JudgeRequest) (res evaluate.Result, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, known := r.calls[key]; known {
		return c.res, c.done
	}
	if r.closed {
		return evaluate.Result{}, false
	}
	owner := types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name}
	ctx, cancel := context.WithTimeout(context.Background(), r.MaxTimeout)
	c := &call{owner: owner, cancel: cancel}
	r.calls[key] = c
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		res := j.Judge(ctx, req)
		if ctx.Err() != nil && res.Verdict == v1alpha1.VerdictError {
			res.Details = map[string]any{"error": "the judge did not answer within " + r.MaxTimeout.String() + " (the operator's cap)", "timeout": true}
		}
		r.mu.Lock()
		c.done, c.res = true, res
		wanted := r.calls[key] == c
		r.mu.Unlock()
		if wanted {
			wake := &v1alpha1.Loop{}
			wake.Namespace, wake.Name = owner.Namespace, owner.Name
			r.events <- event.TypedGenericEvent[*v1alpha1.Loop]{Object: wake}
		}
	}()
	return evaluate.Result{}, false
}

// Release drops the verdict under key: it was used.
func (r *Runner) Release(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.calls[key]; ok && c.done {
		delete(r.calls, key)
	}
}

// Forget cancels the Loop's calls and drops their verdicts: it is gone.
func (r *Runner) Forget(owner types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.calls {
		if c.owner == owner {
			c.cancel()
			delete(r.calls, k)
		}
	}
}

// Running counts the calls in flight.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if !c.done {
			n++
		}
	}
	return n
}

// Watch adds to the controller the channel through which an ended call
// wakes its Loop.
func (r *Runner) Watch(b *ctrlbuilder.Builder) *ctrlbuilder.Builder {
	return b.WatchesRawSource(source.Channel(r.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.Loop]{}))
}

// Close cancels every call, refuses new ones and waits for them.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	for k, c := range r.calls {
		c.cancel()
		delete(r.calls, k)
	}
	r.mu.Unlock()
	r.wg.Wait()
}
