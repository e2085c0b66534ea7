// Package controllers holds the Loop reconciler: it reads a Loop, asks the
// executor for one step, applies it, and saves the run in the Loop's status.
package controllers

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/runner"
)

// LoopReconciler runs Loops, one state transition per reconcile.
type LoopReconciler struct {
	Client    ctrl.Client
	APIReader ctrl.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Actions runs actions; nil means none can run (the Loop waits, saying so).
	Actions runner.Runner
	// EventLog keeps each Loop's event log in ConfigMaps.
	EventLog *configmaps.Log
	// Judges gives each Loop its LLM judge and runs the calls in the
	// background; nil means none (llm_structured verdicts are errors).
	Judges *Judges
	// MaxConcurrentReconciles bounds the workers (default 4).
	MaxConcurrentReconciles int
	// StartGrace is how long a new run's first status write may wait for
	// its first action to end (default DefaultStartGrace; negative: no
	// wait), so that a quick action's start and end are saved in one write.
	StartGrace time.Duration

	// memory is what this process keeps per Loop between reconciles (see
	// loopMemory); forget clears it with everything else kept per Loop.
	memory sync.Map
	// runningCount is how many remembered Loops are in progress, for the
	// running-loops metric.
	runningCount atomic.Int64
}

// loopMemory is what the reconciler keeps of a Loop between reconciles,
// keyed by namespace and name. An entry whose UID is not the Loop's belongs
// to a deleted Loop of the same name, and counts as none.
type loopMemory struct {
	uid types.UID
	// lastSeq is the last sequence number this process saved, so that a
	// Loop read from a stale cache is read again from the API server.
	lastSeq int64
	// running: the Loop is in progress (the running-loops metric).
	running bool
	// nextStepAt is the status's nextStepAt as this process saved it, to
	// the nanosecond (see sharpen).
	nextStepAt time.Time
	// unsaved is a new run whose first action runs and whose first status
	// write waits (see deferStart); nil when none.
	unsaved *unsavedStart
}

// RBAC, each verb for a reason:
// loops: watch them; delete finished ones past ttlSecondsAfterFinished.
// +kubebuilder:rbac:groups=looprun.io,resources=loops,verbs=get;list;watch;delete
// loops/status: the one status patch per reconcile.
// +kubebuilder:rbac:groups=looprun.io,resources=loops/status,verbs=get;patch
// loops/finalizers: owner references that block the Loop's deletion (on the
// ConfigMaps, Pods and claim it owns) need it where the API server enforces
// OwnerReferencesPermissionEnforcement; no finalizer is ever added.
// +kubebuilder:rbac:groups=looprun.io,resources=loops/finalizers,verbs=update
// configmaps: the event log segments (read uncached, so no list or watch).
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;delete
// events: Kubernetes Events for start, completion, failure, invalid spec.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// pods: one per action, read from a cache of labelled Pods (list, watch),
// created per step, deleted past history.keepPods or when one never starts.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// persistentvolumeclaims: the workspace of a Loop with a volumeClaimTemplate.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=create
// serviceaccounts/impersonate: the Secret a Loop names (spec.llm.apiKeySecretRef)
// is read as the Loop's service account, so the operator reads no Secret
// the Loop's author could not; the operator itself has no access to Secrets.
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=impersonate

// Reconcile gets the Loop, takes one step, and writes the status once.
func (r *LoopReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	loop, err := r.get(ctx, req)
	if err != nil {
		return reconcile.Result{}, err
	}
	if loop == nil {
		// Deleted: its actions stop; its ConfigMaps go with it (owner references).
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	logger := log.FromContext(ctx).WithValues("loop", loop.Name, "state", loop.Status.CurrentState, "iteration", loop.Status.Iteration)
	ctx = log.IntoContext(ctx, logger)
	if !loop.DeletionTimestamp.IsZero() {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	if loop.Annotations[v1alpha1.ImportingAnnotation] != "" {
		// looprun import is still writing its status and event log.
		return reconcile.Result{}, nil
	}
	r.sharpen(loop)
	// What the step changes is the status: only it is kept to compare
	// and patch against (with the resourceVersion it is read at).
	before := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: loop.Namespace, Name: loop.Name, ResourceVersion: loop.ResourceVersion},
		Status: *loop.Status.DeepCopy()}
	result, h, stepErr := r.reconcileLoop(ctx, loop)
	if h.deferred {
		return result, nil
	}
	if h.eventLog != "" {
		// The step's events were not written: nothing of it is kept, so
		// that the status never gets ahead of its event log. It is taken
		// again, with backoff; the conditions say why it waits.
		loop.Status = *before.Status.DeepCopy()
		h = health{eventLog: h.eventLog}
	}
	if err := r.patchStatus(ctx, before, loop, h, stepErr); err != nil {
		recordReconcileError("status")
		return reconcile.Result{}, errors.Join(stepErr, err)
	}
	// Saved: what the step used (an action's result, a judge's answer) may go.
	for _, release := range h.release {
		release()
	}
	if stepErr != nil && !errors.Is(stepErr, reconcile.TerminalError(nil)) {
		recordReconcileError("step")
		logger.Error(stepErr, "Step failed")
	}
	if stepErr == nil && actionEnded(before, loop) {
		// The status now says the action ended: what it left may go.
		if err := r.Actions.Prune(ctx, loop); err != nil {
			recordReconcileError("prune")
			logger.Error(err, "Pruning finished actions failed")
		}
	}
	return result, stepErr
}

// actionEnded reports whether the action that was in flight is no more.
func actionEnded(before, after *v1alpha1.Loop) bool {
	b, a := before.Status.Action, after.Status.Action
	return b != nil && (a == nil || a.Iteration != b.Iteration)
}

// get reads the Loop, from the API server when the cache is behind what this
// process last saved. A missing Loop is nil.
func (r *LoopReconciler) get(ctx context.Context, req reconcile.Request) (*v1alpha1.Loop, error) {
	loop := &v1alpha1.Loop{}
	if err := r.Client.Get(ctx, req.NamespacedName, loop); err != nil {
		return nil, ctrl.IgnoreNotFound(err)
	}
	if m := r.remembered(loop); loop.Status.LastSeq < m.lastSeq {
		if err := r.APIReader.Get(ctx, req.NamespacedName, loop); err != nil {
			return nil, ctrl.IgnoreNotFound(err)
		}
	}
	return loop, nil
}

// sharpen gives back to the Loop's nextStepAt (when a retry's or an edge's
// backoff lets the next step start) the fraction of a second the status
// does not keep, when this process saved it: a look at the Loop before the
// wait is up (a spec change, the end of a start's grace) must not find it
// up early. An operator that restarts may start such a step up to a second
// early.
func (r *LoopReconciler) sharpen(loop *v1alpha1.Loop) {
	next, saved := loop.Status.NextStepAt, r.remembered(loop).nextStepAt
	if next != nil && !saved.IsZero() && next.Time.Equal(saved.Truncate(time.Second)) {
		loop.Status.NextStepAt = &metav1.Time{Time: saved}
	}
}

// remembered is what this process keeps of the Loop; zero when nothing.
func (r *LoopReconciler) remembered(loop *v1alpha1.Loop) loopMemory {
	if v, ok := r.memory.Load(ctrl.ObjectKeyFromObject(loop)); ok && v.(loopMemory).uid == loop.UID {
		return v.(loopMemory)
	}
	return loopMemory{uid: loop.UID}
}

// remember keeps m for the Loop, and counts it in the running-loops metric
// while it runs. One Loop is never reconciled by two workers at once.
func (r *LoopReconciler) remember(loop *v1alpha1.Loop, m loopMemory) {
	key := ctrl.ObjectKeyFromObject(loop)
	prev, had := r.memory.Swap(key, m)
	wasRunning := had && prev.(loopMemory).running
	r.countRunning(wasRunning, m.running)
}

// forget is the one path that clears everything kept for a Loop that is
// gone (or going): its memory here, its actions, its event-log cache.
func (r *LoopReconciler) forget(key types.NamespacedName) {
	if prev, had := r.memory.LoadAndDelete(key); had {
		r.countRunning(prev.(loopMemory).running, false)
	}
	if r.Actions != nil {
		r.Actions.Forget(key)
	}
	if r.EventLog != nil {
		r.EventLog.Forget(key)
	}
	if r.Judges != nil && r.Judges.Runner != nil {
		r.Judges.Runner.Forget(key)
	}
}

func (r *LoopReconciler) countRunning(was, is bool) {
	switch {
	case is && !was:
		runningLoops.Set(float64(r.runningCount.Add(1)))
	case was && !is:
		runningLoops.Set(float64(r.runningCount.Add(-1)))
	}
}

// patchStatus writes the status once, a merge patch against the snapshot.
func (r *LoopReconciler) patchStatus(ctx context.Context, before, loop *v1alpha1.Loop, h health, stepErr error) error {
	if stepErr == nil || errors.Is(stepErr, reconcile.TerminalError(nil)) {
		loop.Status.ObservedGeneration = loop.Generation
	}
	setConditions(loop, h)
	if equality.Semantic.DeepEqual(before.Status, loop.Status) {
		return nil // nothing to write: an empty patch still costs the API server
	}
	if err := PatchStatus(ctx, r.Client, before, loop); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	m := loopMemory{uid: loop.UID, lastSeq: loop.Status.LastSeq, running: !loop.Status.Phase.IsFinished() && loop.Status.Phase != ""}
	if next := loop.Status.NextStepAt; next != nil {
		m.nextStepAt = next.Time
	}
	if loop.Status.Phase == "" {
		m.unsaved = r.remembered(loop).unsaved // the run's start is still not saved
	}
	r.remember(loop, m)
	return nil
}

func (r *LoopReconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// maxRetryDelay caps the backoff of a failing Loop (an event log that
// cannot be written, an API server that refuses): it looks again at least
// this often, so a Loop goes on soon after its cause is removed.
const maxRetryDelay = 30 * time.Second

// rateLimiter is controller-runtime's default with the backoff capped at
// maxRetryDelay.
func rateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// SetupWithManager registers the reconciler: it watches Loops, and is woken
// when an action ends.
func (r *LoopReconciler) SetupWithManager(mgr manager.Manager) error {
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	// Status changes are this controller's own writes: only spec and
	// annotation changes (requests, the end of an import), creation and
	// deletion start a reconcile; actions ending and RequeueAfter do the rest.
	b := ctrlbuilder.ControllerManagedBy(mgr).
		For(&v1alpha1.Loop{}, ctrlbuilder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// The classic work queue: controller-runtime v0.24's priority queue
		// can deadlock on shutdown (a worker blocks in Get for ever, and the
		// manager's grace period runs out), kubernetes-sigs/controller-runtime#3538.
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, RateLimiter: rateLimiter(), UsePriorityQueue: ptr.To(false)}).
		// A child Loop (a sub-loop state's) wakes its parent when it ends.
		Watches(&v1alpha1.Loop{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.Loop{}, handler.OnlyControllerOwner()),
			ctrlbuilder.WithPredicates(childEnded)).
		Named("loop")
	if r.Actions != nil {
		b = r.Actions.Watch(b)
	}
	if r.Judges != nil && r.Judges.Runner != nil {
		b = r.Judges.Runner.Watch(b)
	}
	return b.Complete(r)
}
