package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

// JobState is what the Async runner knows of an action.
type JobState int

const (
	// JobUnknown means no such action is known (never started here, or this process restarted).
	JobUnknown JobState = iota
	// JobRunning means the action runs.
	JobRunning
	// JobDone means the action ended; its result is kept until Forget.
	JobDone
)

// Async runs actions in the background, one goroutine each, and calls Notify
// when one ends. The operator uses it so that a reconcile never waits for an
// action: it starts the action, returns, and is called again by Notify.
type Async struct {
	// Runner is the template for each action; Dir is set per loop.
	Runner Runner
	// BaseDir holds one working directory per loop, shared by its steps.
	BaseDir string
	// Notify is called with the job's owner once its action ended.
	Notify func(owner string)

	mu     sync.Mutex
	jobs   map[string]*job
	wg     sync.WaitGroup
	closed bool
}

type job struct {
	owner  string
	done   bool
	ended  time.Time
	res    executor.ActionResult
	cancel context.CancelFunc
}

// Start runs a in the working directory of owner, unless an action with this
// key is already known (started twice for the same key, it runs once).
func (a *Async) Start(key, owner, workdir string, act executor.Action) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.jobs == nil {
		a.jobs = map[string]*job{}
	}
	if _, ok := a.jobs[key]; ok || a.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{owner: owner, cancel: cancel}
	a.jobs[key] = j
	r := a.Runner
	r.Dir = filepath.Join(a.BaseDir, workdir)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer cancel()
		var res executor.ActionResult
		if err := os.MkdirAll(r.Dir, 0o755); err != nil {
			res = executor.ActionResult{ExitCode: 127, Stderr: "cannot create the working directory: " + err.Error()}
		} else {
			res = r.Run(ctx, &act)
		}
		a.mu.Lock()
		j.done, j.res, j.ended = true, res, time.Now()
		a.mu.Unlock()
		if a.Notify != nil {
			a.Notify(owner)
		}
	}()
}

// Result reports the state of the action with this key, and its result once done.
func (a *Async) Result(key string) (executor.ActionResult, JobState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j, ok := a.jobs[key]
	switch {
	case !ok:
		return executor.ActionResult{}, JobUnknown
	case !j.done:
		return executor.ActionResult{}, JobRunning
	}
	return j.res, JobDone
}

// EndedAt is when the action with this key ended (zero while it runs).
func (a *Async) EndedAt(key string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j, ok := a.jobs[key]; ok {
		return j.ended
	}
	return time.Time{}
}

// Forget drops a finished action's result.
func (a *Async) Forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j, ok := a.jobs[key]; ok && j.done {
		delete(a.jobs, key)
	}
}

// Cancel kills and forgets every action whose key starts with prefix.
func (a *Async) Cancel(prefix string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, j := range a.jobs {
		if strings.HasPrefix(k, prefix) {
			j.cancel()
			delete(a.jobs, k)
		}
	}
}

// CancelOwner kills and forgets every action of owner.
func (a *Async) CancelOwner(owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, j := range a.jobs {
		if j.owner == owner {
			j.cancel()
			delete(a.jobs, k)
		}
	}
}

// Wait waits until every action started has ended (after Cancel, at once).
// Nothing may be started while it waits: see Close.
func (a *Async) Wait() { a.wg.Wait() }

// Close kills every action, refuses new ones, and waits for the killed ones.
func (a *Async) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.Cancel("")
	a.wg.Wait()
}

// Running counts the actions in flight.
func (a *Async) Running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, j := range a.jobs {
		if !j.done {
			n++
		}
	}
	return n
}
