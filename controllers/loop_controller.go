// Package controllers holds the Loop reconciler: it reads a Loop, asks the
// executor for one step, applies it, and saves the run in the Loop's status.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/cloudevents"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/tracing"
)

// LoopReconciler runs Loops, one state transition per reconcile.
type LoopReconciler struct {
	Client    client.Client
	APIReader client.Reader
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
	// Prices cost agent actions (nil: pricing.Default).
	Prices *pricing.Table
	// Ledger holds what the model gateway metered each step's calls used
	// (nil: no gateway; agent actions are billed what they report).
	Ledger *ledger.Store
	// MaxConcurrentReconciles bounds the workers (default 4).
	MaxConcurrentReconciles int
	// StartGrace is how long a new run's first status write may wait for
	// its first action to end (default DefaultStartGrace; negative: no
	// wait), so that a quick action's start and end are saved in one write.
	StartGrace time.Duration

	// memory is what this process keeps per Loop between reconciles;
	// forget clears it with everything else kept per Loop.
	memory memories
	// requests bounds the Warning Events a Loop's requests make.
	requests requestEvents
	// queue holds back starts past the namespace's cap (nil: none).
	queue *queue
	// CloudEvents sends Loops' milestones to the admin's sink (nil: none).
	CloudEvents *cloudevents.Sink
	// Tracer makes OpenTelemetry spans of runs from their events; nil
	// makes none.
	Tracer *tracing.Tracer
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

// conflictRetry is how soon a step whose status write lost a race is taken
// again (the write that won wakes the Loop too).
const conflictRetry = 50 * time.Millisecond

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
	base := log.FromContext(ctx)
	ctx = context.WithValue(ctx, baseLoggerKey{}, base)
	logger := base.WithValues("state", loop.Status.CurrentState, "iteration", loop.Status.Iteration)
	ctx = log.IntoContext(ctx, logger)
	if !loop.DeletionTimestamp.IsZero() {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	if loop.Annotations[v1alpha1.ImportingAnnotation] != "" {
		// looprun import is still writing its status and event log.
		return reconcile.Result{}, nil
	}
	r.memory.exactNextStepAt(loop)
	// What the step changes is the status: only it is kept to compare
	// and patch against (with the resourceVersion it is read at).
	before := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: loop.Namespace, Name: loop.Name, ResourceVersion: loop.ResourceVersion},
		Status: *loop.Status.DeepCopy()}
	result, out, stepErr := r.reconcileLoop(ctx, loop)
	if out.deferred {
		return result, nil
	}
	if out.health.eventLog != "" {
		// The step's events were not written: nothing of it is kept, so
		// that the status never gets ahead of its event log. It is taken
		// again, with backoff; the conditions say why it waits.
		loop.Status = *before.Status.DeepCopy()
		out = outcome{health: health{eventLog: out.health.eventLog}}
	}
	if stepErr != nil && !errors.Is(stepErr, reconcile.TerminalError(nil)) {
		out.health.retrying = retryMessage(stepErr)
		r.event(loop, corev1.EventTypeWarning, v1alpha1.ReasonRetrying, "Reconcile", "%s", out.health.retrying)
	}
	err = r.patchStatus(ctx, before, loop, out.health, stepErr)
	if tooLarge(err) {
		err = r.endTooLarge(ctx, before, loop, err)
	}
	if apierrors.IsConflict(err) && stepErr == nil {
		// Someone else wrote the Loop since the cache read it: an ordinary
		// race, not a failure. The step is taken again from the fresh read.
		logger.V(1).Info("Status written meanwhile; taking the step again", "error", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if err != nil {
		recordReconcileError("status")
		return reconcile.Result{}, errors.Join(stepErr, err)
	}
	// Saved: what the step used (an action's result, a judge's answer) may go.
	for _, release := range out.afterSave {
		release()
	}
	if stepErr != nil && !errors.Is(stepErr, reconcile.TerminalError(nil)) {
		recordReconcileError("step")
		logger.Error(stepErr, "Step failed")
	}
	if stepErr == nil && actionEnded(before, loop) {
		// The status now says the action ended: what it left may go.
		if err := r.prune(ctx, before.Status.Action, loop); err != nil {
			recordReconcileError("prune")
			logger.Error(err, "Pruning finished actions failed")
		}
	}
	return result, stepErr
}

// prune deletes what finished steps left beyond the history policy: action
// Pods, and child Loops once a sub-loop state ended.
func (r *LoopReconciler) prune(ctx context.Context, ended *v1alpha1.ActionStatus, loop *v1alpha1.Loop) error {
	if ended.Child != "" {
		return r.pruneChildren(ctx, loop)
	}
	if r.Actions == nil {
		return nil
	}
	return r.Actions.Prune(ctx, loop)
}

// endTooLarge ends a run whose status the API server cannot store (the
// Loop over etcd's size limit): retrying would fail for ever. The last
// saved status is kept, its outputs dropped, and the run failed with why.
func (r *LoopReconciler) endTooLarge(ctx context.Context, before, loop *v1alpha1.Loop, cause error) error {
	loop.Status = *before.Status.DeepCopy()
	run := &loop.Status.RunState
	run.Captured, run.PrevResult, run.LastResult, run.Action = nil, nil, nil, nil
	run.Phase, run.TerminatedBy = v1alpha1.PhaseFailed, v1alpha1.TerminatedError
	run.Message = fmt.Sprintf("the Loop's status cannot be saved, the object is larger than the API server stores "+
		"(capture less, or make spec.context smaller): %v", cause)
	r.event(loop, corev1.EventTypeWarning, v1alpha1.ReasonError, "Reconcile", "%s", run.Message)
	return r.patchStatus(ctx, before, loop, health{}, nil)
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
		return nil, client.IgnoreNotFound(err)
	}
	if r.memory.stale(loop) {
		if err := r.APIReader.Get(ctx, req.NamespacedName, loop); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
	}
	return loop, nil
}

// forget is the one path that clears everything kept for a Loop that is
// gone (or going): its memory here, its background work, its event-log
// cache.
func (r *LoopReconciler) forget(key types.NamespacedName) {
	r.memory.drop(key)
	r.requests.drop(key)
	r.queue.forget(key)
	for _, b := range r.background() {
		b.Forget(key)
	}
	if r.EventLog != nil {
		r.EventLog.Forget(key)
	}
}

// background is the work this reconciler has going for Loops beyond a
// reconcile: actions, judge calls, child Loops.
func (r *LoopReconciler) background() []runner.Background {
	bs := []runner.Background{childLoops{}}
	if r.Actions != nil {
		bs = append(bs, r.Actions)
	}
	if r.Judges != nil && r.Judges.Runner != nil {
		bs = append(bs, r.Judges.Runner)
	}
	return bs
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
	r.memory.saved(loop)
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
		// client-go's work queue over namespaces taking turns (fairQueue),
		// not controller-runtime v0.24's priority queue, which can also
		// deadlock on shutdown (a worker blocks in Get for ever, and the
		// manager's grace period runs out), kubernetes-sigs/controller-runtime#3538.
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, RateLimiter: rateLimiter(), NewQueue: newFairQueue}).
		Named("loop")
	for _, bg := range r.background() {
		b = watch(b, bg.Wakes())
	}
	if r.queue != nil && r.queue.limit > 0 {
		// Every Loop event, status changes too: the namespace's cap keeps
		// its books from them and wakes the Loops a freed slot lets start.
		b = b.Watches(&v1alpha1.Loop{}, r.queue.handler())
	}
	loopsCollector.watch(mgr.GetCache())
	return b.Complete(r)
}

// watch adds to the controller what wakes Loops.
func watch(b *ctrlbuilder.Builder, w runner.Wake) *ctrlbuilder.Builder {
	if w.Owns != nil {
		b = b.Owns(w.Owns, ctrlbuilder.WithPredicates(w.Predicates...))
	}
	if w.Channel != nil {
		b = b.WatchesRawSource(source.Channel(w.Channel, &handler.TypedEnqueueRequestForObject[*v1alpha1.Loop]{}))
	}
	return b
}
