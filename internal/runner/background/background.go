// Package background runs a Loop's work that must not hold a reconcile (a
// local action, an LLM judge call) in goroutines: once per key, the Loop
// woken through a channel when it ends, its result kept until released,
// everything of a Loop cancelled and dropped when the Loop goes. It is the
// one per-Loop lifecycle both runners share.
package background

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/runner"
)

// State is what is known of a key's work.
type State int

const (
	// Unknown means never started here (or released, forgotten, or this
	// process restarted).
	Unknown State = iota
	// Running means the work runs.
	Running
	// Done means the work ended; its result is kept until Release.
	Done
)

// Jobs runs work in the background, once per key.
type Jobs[R any] struct {
	events chan event.TypedGenericEvent[*v1alpha1.Loop]
	mu     sync.Mutex
	jobs   map[string]*job[R]
	wg     sync.WaitGroup
	closed bool
}

type job[R any] struct {
	owner  types.NamespacedName
	done   bool
	ended  time.Time
	res    R
	cancel context.CancelFunc
}

// New returns an empty Jobs.
func New[R any]() *Jobs[R] {
	return &Jobs[R]{events: make(chan event.TypedGenericEvent[*v1alpha1.Loop], 1024), jobs: map[string]*job[R]{}}
}

// Start runs work under key for the Loop owner, unless the key is known
// (or Close was called): started says whether it did. work gets a context
// cancelled by Forget and Close, and ended after timeout when one is given.
func (j *Jobs[R]) Start(key string, owner types.NamespacedName, timeout time.Duration, work func(ctx context.Context) R) (started bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.jobs[key]; ok || j.closed {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
	}
	jb := &job[R]{owner: owner, cancel: cancel}
	j.jobs[key] = jb
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		defer cancel()
		res := work(ctx)
		j.mu.Lock()
		jb.done, jb.res, jb.ended = true, res, time.Now()
		wanted := j.jobs[key] == jb // not forgotten meanwhile
		j.mu.Unlock()
		if wanted {
			j.events <- runner.WakeOf(owner)
		}
	}()
	return true
}

// Result is the state of key's work, and its result once Done.
func (j *Jobs[R]) Result(key string) (R, State) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var zero R
	jb, ok := j.jobs[key]
	switch {
	case !ok:
		return zero, Unknown
	case !jb.done:
		return zero, Running
	}
	return jb.res, Done
}

// EndedAt is when key's work ended (zero while it runs, or when unknown).
func (j *Jobs[R]) EndedAt(key string) time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	if jb, ok := j.jobs[key]; ok {
		return jb.ended
	}
	return time.Time{}
}

// Release drops key's result once it was used.
func (j *Jobs[R]) Release(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if jb, ok := j.jobs[key]; ok && jb.done {
		delete(j.jobs, key)
	}
}

// Forget cancels the work of the Loop owner and drops it: the Loop is gone
// (or its results are not wanted).
func (j *Jobs[R]) Forget(owner types.NamespacedName) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, jb := range j.jobs {
		if jb.owner == owner {
			jb.cancel()
			delete(j.jobs, k)
		}
	}
}

// Running counts the work in flight.
func (j *Jobs[R]) Running() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, jb := range j.jobs {
		if !jb.done {
			n++
		}
	}
	return n
}

// Wakes is the channel through which ended work wakes its Loop.
func (j *Jobs[R]) Wakes() runner.Wake { return runner.Wake{Channel: j.events} }

// Close cancels all work, refuses new work, and waits for it to end.
func (j *Jobs[R]) Close() {
	j.mu.Lock()
	j.closed = true
	for k, jb := range j.jobs {
		jb.cancel()
		delete(j.jobs, k)
	}
	j.mu.Unlock()
	j.wg.Wait()
}
