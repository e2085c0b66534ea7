package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/local"
)

// ActionRunner runs a loop's actions without blocking the reconcile: Start
// returns at once, and the runner requeues the Loop when the action ends.
type ActionRunner interface {
	// Start runs the action with this key unless it is already known.
	Start(ctx context.Context, key string, loop *v1alpha1.Loop, a executor.Action) error
	// Result says whether the action with this key runs, ended, or is unknown.
	Result(key string) (executor.ActionResult, local.JobState)
	// Forget drops an ended action's result.
	Forget(key string)
	// CancelLoop stops every action of the Loop with this namespace and name
	// (it was deleted).
	CancelLoop(key types.NamespacedName)
}

// actionKey names an action: the same Loop, run and iteration give the same key.
func actionKey(loop *v1alpha1.Loop, runID string, iteration int32) string {
	return fmt.Sprintf("%s/%s/%d", loop.UID, runID, iteration)
}

// LocalActions runs actions as processes of the operator itself. Only for
// development: the commands run with the operator's identity.
type LocalActions struct {
	async  *local.Async
	events chan event.TypedGenericEvent[*v1alpha1.Loop]
}

// NewLocalActions runs actions in a working directory per Loop under baseDir.
func NewLocalActions(baseDir string) *LocalActions {
	l := &LocalActions{events: make(chan event.TypedGenericEvent[*v1alpha1.Loop], 1024)}
	l.async = &local.Async{BaseDir: baseDir}
	l.async.Notify = l.notify
	return l
}

// Events delivers a Loop whenever one of its actions ended.
func (l *LocalActions) Events() <-chan event.TypedGenericEvent[*v1alpha1.Loop] { return l.events }

func (l *LocalActions) notify(owner string) {
	ns, name := splitOwner(owner)
	loop := &v1alpha1.Loop{}
	loop.Namespace, loop.Name = ns, name
	l.events <- event.TypedGenericEvent[*v1alpha1.Loop]{Object: loop}
}

// Start implements ActionRunner.
func (l *LocalActions) Start(_ context.Context, key string, loop *v1alpha1.Loop, a executor.Action) error {
	owner := loop.Namespace + "/" + loop.Name
	l.async.Start(key, owner, owner, a)
	return nil
}

// Result implements ActionRunner.
func (l *LocalActions) Result(key string) (executor.ActionResult, local.JobState) {
	return l.async.Result(key)
}

// Forget implements ActionRunner.
func (l *LocalActions) Forget(key string) { l.async.Forget(key) }

// CancelLoop implements ActionRunner.
func (l *LocalActions) CancelLoop(key types.NamespacedName) { l.async.CancelOwner(key.String()) }

// Running counts the actions in flight.
func (l *LocalActions) Running() int { return l.async.Running() }

// EndedAt is when the action with this key ended (zero while it runs).
func (l *LocalActions) EndedAt(key string) time.Time { return l.async.EndedAt(key) }

// CancelAll kills every action, refuses new ones and waits for the killed
// ones (the operator is stopping).
func (l *LocalActions) CancelAll() { l.async.Close() }

func splitOwner(owner string) (string, string) {
	for i := 0; i < len(owner); i++ {
		if owner[i] == '/' {
			return owner[:i], owner[i+1:]
		}
	}
	return "", owner
}
