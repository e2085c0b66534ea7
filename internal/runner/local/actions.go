package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/process"
)

// Actions runs a Loop's actions as processes of the operator itself, in the
// background, one goroutine each, in a working directory per Loop under
// BaseDir shared by its steps. An action that ends wakes its Loop through a
// channel. Only for development: the commands run with the operator's
// identity.
type Actions struct {
	// Runner is the template for each action; Dir is set per Loop.
	Runner Runner
	// BaseDir holds one working directory per Loop.
	BaseDir string

	events chan event.TypedGenericEvent[*v1alpha1.Loop]
	mu     sync.Mutex
	jobs   map[string]*job
	wg     sync.WaitGroup
	closed bool
}

var _ runner.Runner = &Actions{}

type job struct {
	owner  types.NamespacedName
	done   bool
	ended  time.Time
	res    executor.ActionResult
	cancel context.CancelFunc
}

// NewActions runs actions in a working directory per Loop under baseDir.
func NewActions(baseDir string) *Actions {
	return &Actions{BaseDir: baseDir, events: make(chan event.TypedGenericEvent[*v1alpha1.Loop], 1024), jobs: map[string]*job{}}
}

// Start implements runner.Runner: an action already known under its key
// (the same Loop, run and iteration) is not started again.
func (l *Actions) Start(_ context.Context, loop *v1alpha1.Loop, a executor.Action) error {
	key, owner := runner.ActionKey(loop, a.Iteration), types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name}
	l.mu.Lock()
	defer l.mu.Unlock()
	if j, ok := l.jobs[key]; ok {
		if j.done {
			return &runner.AlreadyEnded{}
		}
		return nil
	}
	if l.closed {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{owner: owner, cancel: cancel}
	l.jobs[key] = j
	r := l.Runner
	r.Dir = filepath.Join(l.BaseDir, owner.Namespace, owner.Name)
	r.Loop = owner.Name
	// The group of an action an earlier operator process left running
	// goes before this one starts; this one's is noted for the next.
	note := filepath.Join(l.BaseDir, ".groups", owner.Namespace, owner.Name)
	if _, err := process.KillRecordedGroup(note); err != nil {
		return fmt.Errorf("stop the action an earlier operator left running: %w", err)
	}
	r.Started = func(pgid int) {
		if os.MkdirAll(filepath.Dir(note), 0o755) == nil {
			_ = process.RecordGroup(note, pgid)
		}
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer cancel()
		var res executor.ActionResult
		if err := os.MkdirAll(r.Dir, 0o755); err != nil {
			res = executor.ActionResult{ExitCode: process.ExitCannotStart, Stderr: "cannot create the working directory: " + err.Error()}
		} else {
			res = r.Run(ctx, &a)
		}
		process.ForgetGroup(note)
		l.mu.Lock()
		j.done, j.res, j.ended = true, res, time.Now()
		wanted := l.jobs[key] == j // not cancelled meanwhile
		l.mu.Unlock()
		if !wanted {
			return
		}
		wake := &v1alpha1.Loop{}
		wake.Namespace, wake.Name = owner.Namespace, owner.Name
		l.events <- event.TypedGenericEvent[*v1alpha1.Loop]{Object: wake}
	}()
	return nil
}

// Check implements runner.Runner. An action this process does not know was
// lost with an earlier operator process.
func (l *Actions) Check(_ context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j, ok := l.jobs[runner.ActionKey(loop, loop.Status.Action.Iteration)]
	switch {
	case !ok:
		return runner.Outcome{State: runner.Lost}, nil
	case !j.done:
		return runner.Outcome{State: runner.Running}, nil
	}
	return runner.Outcome{State: runner.Done, Result: j.res}, nil
}

// Release implements runner.Runner: a finished action's result goes.
func (l *Actions) Release(loop *v1alpha1.Loop, iteration int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := runner.ActionKey(loop, iteration)
	if j, ok := l.jobs[key]; ok && j.done {
		delete(l.jobs, key)
	}
}

// Prune implements runner.Runner: local actions leave nothing behind.
func (l *Actions) Prune(context.Context, *v1alpha1.Loop) error { return nil }

// Cancel implements runner.Runner: the Loop's actions are killed.
func (l *Actions) Cancel(_ context.Context, loop *v1alpha1.Loop) error {
	l.Forget(types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name})
	return nil
}

// Forget implements runner.Runner: the Loop's actions are killed and their
// results dropped.
func (l *Actions) Forget(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, j := range l.jobs {
		if j.owner == key {
			j.cancel()
			delete(l.jobs, k)
		}
	}
}

// Watch implements runner.Runner: an ended action wakes its Loop through a channel.
func (l *Actions) Watch(b *ctrlbuilder.Builder) *ctrlbuilder.Builder {
	return b.WatchesRawSource(source.Channel(l.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.Loop]{}))
}

// Running counts the actions in flight.
func (l *Actions) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, j := range l.jobs {
		if !j.done {
			n++
		}
	}
	return n
}

// EndedAt is when the Loop's action of this iteration ended (zero while it
// runs, or when it is not known).
func (l *Actions) EndedAt(loop *v1alpha1.Loop, iteration int32) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j, ok := l.jobs[runner.ActionKey(loop, iteration)]; ok {
		return j.ended
	}
	return time.Time{}
}

// Close kills every action, refuses new ones, and waits for the killed
// ones (the operator is stopping).
func (l *Actions) Close() {
	l.mu.Lock()
	l.closed = true
	for k, j := range l.jobs {
		j.cancel()
		delete(l.jobs, k)
	}
	l.mu.Unlock()
	l.wg.Wait()
}
