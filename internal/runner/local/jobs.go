package local

// Actions runs a Loop's actions as processes of the operator itself
// (--allow-local-actions, for development): each action is a background job
// of a Runner, and its end wakes the Loop through a channel.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/background"
	"github.com/looprun/looprun/internal/runner/process"
)

// Actions runs a Loop's actions as processes of the operator itself, in the
// background, in a working directory per Loop under BaseDir shared by its
// steps. An action that ends wakes its Loop through a channel. Only for
// development: the commands run with the operator's identity.
type Actions struct {
	// Runner is the template for each action; Dir is set per Loop.
	Runner Runner
	// BaseDir holds one working directory per Loop.
	BaseDir string

	jobs *background.Jobs[executor.ActionResult]
}

var _ runner.Runner = &Actions{}

// NewActions runs actions in a working directory per Loop under baseDir.
func NewActions(baseDir string) *Actions {
	return &Actions{BaseDir: baseDir, jobs: background.New[executor.ActionResult]()}
}

// Start implements runner.Runner: an action already known under its key
// (the same Loop, run and iteration) is not started again.
func (l *Actions) Start(_ context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	key := runner.ActionKey(loop, a.Iteration)
	switch _, state := l.jobs.Result(key); state {
	case background.Done:
		return 0, &runner.AlreadyEnded{}
	case background.Running:
		return 0, nil
	}
	return 0, l.start(key, loop, a) // the job wakes the Loop when it ends
}

// Hook implements runner.Runner: the hook is a job of its own key. One
// this process does not know but the status says started was lost with an
// earlier operator process (its process group went with it, or goes before
// this one starts): it runs again, as a lost action does, so that an
// operator restart does not leave a run's exit hook (or its clone or push)
// undone. In a cluster the Pod is found again instead.
func (l *Actions) Hook(_ context.Context, loop *v1alpha1.Loop, a executor.Action, started bool) (runner.Outcome, string, error) {
	key := runner.ActionKey(loop, a.Iteration) + "/" + a.State
	switch res, state := l.jobs.Result(key); state {
	case background.Done:
		return runner.Outcome{State: runner.Done, Result: res}, "", nil
	case background.Running:
		return runner.Outcome{State: runner.Running}, "", nil
	}
	if err := l.start(key, loop, a); err != nil {
		return runner.Outcome{}, "", err
	}
	return runner.Outcome{State: runner.Running}, "", nil
}

// start runs action a of the Loop as the job key.
func (l *Actions) start(key string, loop *v1alpha1.Loop, a executor.Action) error {
	owner := types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name}
	r := l.Runner
	r.Dir = filepath.Join(l.BaseDir, owner.Namespace, owner.Name)
	r.Loop = owner.Name
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return fmt.Errorf("the working directory of the Loop's actions: %w", err)
	}
	if a.Git != nil {
		l.startGit(key, loop, r.Dir, *a.Git)
		return nil
	}
	if rs := loop.Spec.Runner; rs != nil && rs.Workspace != nil {
		w := rs.Workspace
		r.Dir = filepath.Join(r.Dir, w.GetRelWorkingDir())
	}
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
	l.jobs.Start(key, owner, 0, func(ctx context.Context) executor.ActionResult {
		defer process.ForgetGroup(note)
		if err := os.MkdirAll(r.Dir, 0o755); err != nil {
			return executor.ActionResult{ExitCode: process.ExitCannotStart, Stderr: "cannot create the working directory: " + err.Error()}
		}
		return r.Run(ctx, &a)
	})
	return nil
}

// startGit runs the Loop's clone or push in this process, its checkout in
// the Loop's directory. The operator's own processes read no Secrets: a
// repository that needs credentials is cloned by Pods.
func (l *Actions) startGit(key string, loop *v1alpha1.Loop, dir string, op gitws.Op) {
	w := loop.Spec.Runner.Workspace
	op.Dir = filepath.Join(dir, v1alpha1.CheckoutDir)
	owner := types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name}
	l.jobs.Start(key, owner, 0, func(ctx context.Context) executor.ActionResult {
		if w.Git.SecretRef != nil {
			return runner.Failure("SecretNotRead", "the local runner reads no Secrets (spec.runner.workspace.git.secretRef): run the Loop's actions in Pods")
		}
		return runner.Git(ctx, op)
	})
}

// Check implements runner.Runner. An action this process does not know was
// lost with an earlier operator process.
func (l *Actions) Check(_ context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	res, state := l.jobs.Result(runner.ActionKey(loop, loop.Status.Action.Iteration))
	switch state {
	case background.Running:
		return runner.Outcome{State: runner.Running}, nil
	case background.Done:
		return runner.Outcome{State: runner.Done, Result: res}, nil
	}
	return runner.Outcome{State: runner.Lost}, nil
}

// Release implements runner.Runner: a finished action's result goes.
func (l *Actions) Release(loop *v1alpha1.Loop, iteration int32) {
	l.jobs.Release(runner.ActionKey(loop, iteration))
}

// Prune implements runner.Runner: local actions leave nothing behind.
func (l *Actions) Prune(context.Context, *v1alpha1.Loop) error { return nil }

// Cancel implements runner.Runner: the Loop's actions are killed.
func (l *Actions) Cancel(_ context.Context, loop *v1alpha1.Loop) error {
	l.jobs.Forget(types.NamespacedName{Namespace: loop.Namespace, Name: loop.Name})
	return nil
}

// Workspace implements runner.Runner: a Loop's actions work in a directory
// of their own, made when the first one starts; a child Loop has its own.
func (l *Actions) Workspace(context.Context, *v1alpha1.Loop) error { return nil }

// Forget implements runner.Runner: the Loop's actions are killed and their
// results dropped.
func (l *Actions) Forget(key types.NamespacedName) { l.jobs.Forget(key) }

// Wakes implements runner.Runner: an ended action wakes its Loop through a channel.
func (l *Actions) Wakes() runner.Wake { return l.jobs.Wakes() }

// Running counts the actions in flight.
func (l *Actions) Running() int { return l.jobs.Running() }

// EndedAt is when the Loop's action of this iteration ended (zero while it
// runs, or when it is not known).
func (l *Actions) EndedAt(loop *v1alpha1.Loop, iteration int32) time.Time {
	return l.jobs.EndedAt(runner.ActionKey(loop, iteration))
}

// Close kills every action, refuses new ones, and waits for the killed
// ones (the operator is stopping).
func (l *Actions) Close() { l.jobs.Close() }
