package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/runner/pod"
)

// ActionRunner runs a Loop's actions without blocking the reconcile: Start
// returns at once, and the runner wakes the Loop when the action ends.
type ActionRunner interface {
	// Start starts the Loop's action in flight (status.action), unless it
	// already runs; it may note where it runs in status.action. A
	// *runner.Refused error ends the step with an error verdict.
	Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) error
	// Check reports on the Loop's action in flight.
	Check(ctx context.Context, loop *v1alpha1.Loop) (runner.Outcome, error)
	// Forget is told that the result of the Loop's action of this iteration
	// was used.
	Forget(loop *v1alpha1.Loop, iteration int32)
	// Prune drops what past steps left behind, once the status is saved.
	Prune(ctx context.Context, loop *v1alpha1.Loop) error
	// Cancel stops the Loop's action in flight (a stop or rewind request):
	// its result is not wanted.
	Cancel(ctx context.Context, loop *v1alpha1.Loop) error
	// CancelLoop stops every action of a deleted Loop.
	CancelLoop(key types.NamespacedName)
	// Watch adds to the controller whatever wakes a Loop when its action ends.
	Watch(b *ctrlbuilder.Builder) *ctrlbuilder.Builder
}

// actionKey names an action: the same Loop, run and iteration give the same key.
func actionKey(loop *v1alpha1.Loop, iteration int32) string {
	return fmt.Sprintf("%s/%s/%d", loop.UID, loop.Status.RunID, iteration)
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

func (l *LocalActions) notify(owner string) {
	ns, name := splitOwner(owner)
	loop := &v1alpha1.Loop{}
	loop.Namespace, loop.Name = ns, name
	l.events <- event.TypedGenericEvent[*v1alpha1.Loop]{Object: loop}
}

// Start implements ActionRunner.
func (l *LocalActions) Start(_ context.Context, loop *v1alpha1.Loop, a executor.Action) error {
	owner := loop.Namespace + "/" + loop.Name
	l.async.Start(actionKey(loop, a.Iteration), owner, owner, a)
	return nil
}

// Check implements ActionRunner. An action this process does not know was
// lost with an earlier operator process.
func (l *LocalActions) Check(_ context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	res, state := l.async.Result(actionKey(loop, loop.Status.Action.Iteration))
	switch state {
	case local.JobRunning:
		return runner.Outcome{State: runner.Running}, nil
	case local.JobDone:
		return runner.Outcome{State: runner.Done, Result: res}, nil
	}
	return runner.Outcome{State: runner.Lost}, nil
}

// Forget implements ActionRunner.
func (l *LocalActions) Forget(loop *v1alpha1.Loop, iteration int32) {
	l.async.Forget(actionKey(loop, iteration))
}

// Prune implements ActionRunner: local actions leave nothing behind.
func (l *LocalActions) Prune(context.Context, *v1alpha1.Loop) error { return nil }

// Cancel implements ActionRunner.
func (l *LocalActions) Cancel(_ context.Context, loop *v1alpha1.Loop) error {
	l.async.CancelOwner(loop.Namespace + "/" + loop.Name)
	return nil
}

// CancelLoop implements ActionRunner.
func (l *LocalActions) CancelLoop(key types.NamespacedName) { l.async.CancelOwner(key.String()) }

// Watch implements ActionRunner: an ended action wakes its Loop through a channel.
func (l *LocalActions) Watch(b *ctrlbuilder.Builder) *ctrlbuilder.Builder {
	return b.WatchesRawSource(source.Channel(l.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.Loop]{}))
}

// Running counts the actions in flight.
func (l *LocalActions) Running() int { return l.async.Running() }

// EndedAt is when the Loop's action of this iteration ended (zero while it runs).
func (l *LocalActions) EndedAt(loop *v1alpha1.Loop, iteration int32) time.Time {
	return l.async.EndedAt(actionKey(loop, iteration))
}

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

// PodActions runs each action as a Pod (internal/runner/pod). A Pod's
// progress wakes its Loop through the watch on owned Pods.
type PodActions struct {
	Runner *pod.Runner
}

// Start implements ActionRunner.
func (p *PodActions) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) error {
	return p.Runner.Start(ctx, loop, loop.Status.RunID, a)
}

// Check implements ActionRunner.
func (p *PodActions) Check(ctx context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	return p.Runner.Check(ctx, loop, loop.Status.RunID)
}

// Forget implements ActionRunner: finished Pods stay for kubectl logs until Prune.
func (p *PodActions) Forget(*v1alpha1.Loop, int32) {}

// Prune implements ActionRunner: it keeps the newest spec.history.keepPods Pods.
func (p *PodActions) Prune(ctx context.Context, loop *v1alpha1.Loop) error {
	return p.Runner.Prune(ctx, loop)
}

// Cancel implements ActionRunner: the Pod of the action in flight is deleted.
func (p *PodActions) Cancel(ctx context.Context, loop *v1alpha1.Loop) error {
	return p.Runner.Cancel(ctx, loop)
}

// CancelLoop implements ActionRunner: a deleted Loop's Pods are deleted by
// the garbage collector, through their owner references.
func (p *PodActions) CancelLoop(types.NamespacedName) {}

// Watch implements ActionRunner: the Loop owns its Pods; only a Pod that
// ended, is stuck waiting, or was deleted wakes it.
func (p *PodActions) Watch(b *ctrlbuilder.Builder) *ctrlbuilder.Builder {
	return b.Owns(&corev1.Pod{}, ctrlbuilder.WithPredicates(podProgress))
}

// podProgress passes the Pod changes a step waits for.
var podProgress = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, okb := e.ObjectOld.(*corev1.Pod)
		after, oka := e.ObjectNew.(*corev1.Pod)
		if !okb || !oka {
			return false
		}
		return podMilestone(before) != podMilestone(after)
	},
}

// podMilestone sums up what of a Pod's state matters to its Loop.
func podMilestone(p *corev1.Pod) string {
	m := string(p.Status.Phase) + "/" + p.Status.Reason
	if !p.DeletionTimestamp.IsZero() {
		m += "/deleting"
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			switch {
			case cs.State.Terminated != nil:
				m += "/" + cs.Name + ":terminated"
			case cs.State.Waiting != nil:
				m += "/" + cs.Name + ":" + cs.State.Waiting.Reason
			}
		}
	}
	return m
}
