package pod

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
)

// Runner runs actions as Pods. It never waits for one: Start creates the Pod
// (or finds the one a previous attempt created), Check reads it, and the
// watch on owned Pods wakes the Loop when its Pod moves on.
type Runner struct {
	// Client reads Pods from the cache (only Pods labelled looprun.io/loop)
	// and writes.
	Client client.Client
	// Reader reads from the API server, for a Pod the cache has not seen yet.
	Reader client.Reader
	Options
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// claims remembers the Loops whose workspace claim exists: the UID of
	// each, by namespace and name.
	claims sync.Map
	// egress remembers the Loops whose egress policy is in place.
	egress egressApplied
}

var _ runner.Runner = &Runner{}

// Start creates the Pod of the Loop's action in flight and records its name
// in status.action. A Pod that already exists under that name, owned by this
// Loop, is adopted: an action is never started twice for the same iteration.
func (r *Runner) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	pod, err := Build(loop, loop.Status.RunID, a, r.Options)
	if err != nil {
		return 0, err
	}
	if err := r.Workspace(ctx, loop); err != nil {
		return 0, err
	}
	if err := r.ensureEgress(ctx, loop); err != nil {
		return 0, err
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("create Pod %s: %w", pod.Name, err)
		}
		existing := &corev1.Pod{}
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(pod), existing); err != nil {
			return 0, fmt.Errorf("adopt Pod %s: %w", pod.Name, err)
		}
		if !ownedBy(existing, loop.UID) {
			return 0, &runner.Refused{Reason: "PodNameTaken", Message: fmt.Sprintf("Pod %s exists and does not belong to this Loop", pod.Name)}
		}
		if loop.Status.Action != nil {
			loop.Status.Action.Pod, loop.Status.Action.PodUID = pod.Name, string(existing.UID)
		}
		if p := existing.Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
			return 0, &runner.AlreadyEnded{}
		}
		return r.startAllowance(), nil
	}
	if loop.Status.Action != nil {
		loop.Status.Action.Pod, loop.Status.Action.PodUID = pod.Name, string(pod.UID)
	}
	// A Pod that never gets scheduled may change in no way the watch
	// passes on: look again when its start allowance is up.
	return r.startAllowance(), nil
}

// Prepare makes what a Pod of the Loop needs before it can start: the
// workspace claim and the egress policy.
func (r *Runner) Prepare(ctx context.Context, loop *v1alpha1.Loop) error {
	if err := r.Workspace(ctx, loop); err != nil {
		return err
	}
	return r.ensureEgress(ctx, loop)
}

// Hook implements runner.Runner: the Pod of an exit hook, a clone or a
// push is named from the run (ExitName, GitName), so it is created once.
func (r *Runner) Hook(ctx context.Context, loop *v1alpha1.Loop, a executor.Action, started bool) (runner.Outcome, string, error) {
	pod, err := Build(loop, loop.Status.RunID, a, r.Options)
	if refused := (*runner.Refused)(nil); errors.As(err, &refused) {
		return runner.Outcome{State: runner.Done, Result: runner.Failure(refused.Reason, "%s", refused.Message)}, "", nil
	}
	if err != nil {
		return runner.Outcome{}, "", err
	}
	existing, err := r.get(ctx, client.ObjectKeyFromObject(pod))
	if err != nil {
		return runner.Outcome{}, pod.Name, err
	}
	switch {
	case existing == nil && started:
		return runner.Outcome{State: runner.Done, Result: runner.Failure(ReasonPodDeleted, "Pod %s was deleted before it ended", pod.Name)}, pod.Name, nil
	case existing == nil:
		if err := r.Workspace(ctx, loop); err != nil {
			return runner.Outcome{}, pod.Name, err
		}
		if err := r.ensureEgress(ctx, loop); err != nil {
			if refused := (*runner.Refused)(nil); errors.As(err, &refused) {
				return runner.Outcome{State: runner.Done, Result: runner.Failure(refused.Reason, "%s", refused.Message)}, "", nil
			}
			return runner.Outcome{}, pod.Name, err
		}
		if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return runner.Outcome{}, pod.Name, fmt.Errorf("create Pod %s: %w", pod.Name, err)
		}
		return runner.Outcome{State: runner.Running, RecheckAfter: r.startAllowance()}, pod.Name, nil
	case !ownedBy(existing, loop.UID):
		return runner.Outcome{State: runner.Done, Result: runner.Failure("PodNameTaken", "Pod %s does not belong to this Loop", pod.Name)}, pod.Name, nil
	}
	out, giveUp := Inspect(existing, r.now(), r.startAllowance())
	if giveUp {
		if err := r.Client.Delete(ctx, existing, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return runner.Outcome{}, pod.Name, fmt.Errorf("delete Pod %s that never started: %w", pod.Name, err)
		}
	}
	return out, pod.Name, nil
}

// Check reads the Pod of the Loop's action in flight.
func (r *Runner) Check(ctx context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	a := loop.Status.Action
	name := a.Pod
	if name == "" {
		name = Name(loop.Name, loop.Status.RunID, a.Iteration, loop.Status.Retries)
	}
	pod, err := r.get(ctx, types.NamespacedName{Namespace: loop.Namespace, Name: name})
	if err != nil {
		return runner.Outcome{}, err
	}
	switch {
	case pod == nil && a.Pod == "":
		return runner.Outcome{State: runner.NotStarted}, nil
	case pod == nil:
		return runner.Outcome{State: runner.Done, Result: runner.TransientFailure(ReasonPodDeleted, "Pod %s was deleted before its action ended", name)}, nil
	case !ownedBy(pod, loop.UID):
		return runner.Outcome{State: runner.Done, Result: runner.Failure("PodNameTaken", "Pod %s does not belong to this Loop", name)}, nil
	}
	out, giveUp := Inspect(pod, r.now(), r.startAllowance())
	if giveUp {
		// Deleted before the step is recorded, so it can never run late.
		if err := r.Client.Delete(ctx, pod, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return runner.Outcome{}, fmt.Errorf("delete Pod %s that never started: %w", name, err)
		}
	}
	return out, nil
}

// Prune deletes the Loop's action Pods beyond the newest spec.history.keepPods,
// never the one in flight.
func (r *Runner) Prune(ctx context.Context, loop *v1alpha1.Loop) error {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(loop.Namespace), client.MatchingLabels{v1alpha1.LabelLoop: v1alpha1.LabelValue(loop.Name)}); err != nil {
		return fmt.Errorf("list action Pods: %w", err)
	}
	type entry struct {
		pod              *corev1.Pod
		iteration, retry int
	}
	var pods []entry
	for i := range list.Items {
		p := &list.Items[i]
		if !ownedBy(p, loop.UID) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if a := loop.Status.Action; a != nil && p.Name == a.Pod {
			continue
		}
		if h := loop.Status.ExitHook; h != nil && p.Name == h.Pod {
			continue // the exit hook's, pruned with the Loop
		}
		if p.Labels[v1alpha1.LabelRunner] != "" {
			continue // a warm runner's, which goes with its run
		}
		it, _ := strconv.Atoi(p.Labels[v1alpha1.LabelIteration])
		retry, _ := strconv.Atoi(p.Labels[v1alpha1.LabelRetry])
		pods = append(pods, entry{p, it, retry})
	}
	keep := int(loop.Spec.GetKeepPods())
	if len(pods) <= keep {
		return nil
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].iteration != pods[j].iteration {
			return pods[i].iteration > pods[j].iteration
		}
		return pods[i].retry > pods[j].retry
	})
	var errs []error
	for _, e := range pods[keep:] {
		if err := r.Client.Delete(ctx, e.pod, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cancel deletes the Pod of the Loop's action in flight.
func (r *Runner) Cancel(ctx context.Context, loop *v1alpha1.Loop) error {
	a := loop.Status.Action
	if a == nil || a.Pod == "" {
		return nil
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: loop.Namespace, Name: a.Pod}}
	if err := r.Client.Delete(ctx, p, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Pod %s: %w", a.Pod, err)
	}
	return nil
}

// Release implements runner.Runner: finished Pods stay for kubectl logs
// until Prune.
func (r *Runner) Release(*v1alpha1.Loop, int32) {}

// Forget implements runner.Runner: what is remembered of the Loop goes. Its
// Pods go with it, through their owner references.
func (r *Runner) Forget(key types.NamespacedName) {
	r.claims.Delete(key)
	r.egress.m.Delete(key)
}

// Wakes implements runner.Background: the Loop owns its Pods; only a Pod
// change a step waits for wakes it (progress).
func (r *Runner) Wakes() runner.Wake {
	return runner.Wake{Owns: &corev1.Pod{}, Predicates: []predicate.Predicate{progress}}
}

// Workspace implements runner.Runner: the claim of a Loop with a
// volumeClaimTemplate, made once (remembered per Loop).
func (r *Runner) Workspace(ctx context.Context, loop *v1alpha1.Loop) error {
	rs := loop.Spec.Runner
	if rs == nil || rs.Workspace == nil || rs.Workspace.VolumeClaimTemplate == nil {
		return nil
	}
	key := client.ObjectKeyFromObject(loop)
	if uid, ok := r.claims.Load(key); ok && uid == loop.UID {
		return nil
	}
	if err := ensureWorkspace(ctx, r.Client, loop); err != nil {
		return err
	}
	r.claims.Store(key, loop.UID)
	return nil
}

// ensureWorkspace creates the workspace claim of a Loop with a
// volumeClaimTemplate (LOOP-workspace, owned by the Loop), unless it exists.
// The sub-loops of a Loop mount it too, so it is made before its first child.
func ensureWorkspace(ctx context.Context, c client.Client, loop *v1alpha1.Loop) error {
	rs := loop.Spec.Runner
	if rs == nil || rs.Workspace == nil || rs.Workspace.VolumeClaimTemplate == nil {
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: WorkspaceClaim(loop.Name), Namespace: loop.Namespace,
			Labels: v1alpha1.ChildLabels(loop),
		},
		Spec: *rs.Workspace.VolumeClaimTemplate.DeepCopy(),
	}
	if err := controllerutil.SetControllerReference(loop, pvc, c.Scheme()); err != nil {
		return err
	}
	if err := c.Create(ctx, pvc); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("create the workspace claim %s: %w", pvc.Name, err)
	}
	return nil
}

// get reads a Pod from the cache, then from the API server when the cache
// does not have it (yet). A missing Pod is nil.
func (r *Runner) get(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.Reader.Get(ctx, key, pod)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Pod %s: %w", key.Name, err)
	}
	return pod, nil
}

// Get reads a Pod as the runner does: the cache, then the API server; nil
// when there is none.
func (r *Runner) Get(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
	return r.get(ctx, key)
}

// Clock is the runner's time now.
func (r *Runner) Clock() time.Time { return r.now() }

// StartAllowance is how long a Pod may take to start.
func (r *Runner) StartAllowance() time.Duration { return r.startAllowance() }

func (r *Runner) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}

// progress passes the Pod changes a step waits for.
var progress = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, okb := e.ObjectOld.(*corev1.Pod)
		after, oka := e.ObjectNew.(*corev1.Pod)
		if !okb || !oka {
			return false
		}
		return milestone(before) != milestone(after)
	},
}

// milestone sums up what of a Pod's state matters to its Loop.
func milestone(p *corev1.Pod) string {
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
