package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/internal/tracing"
)

// RBAC of sub-loops:
// loops: create the child Loops of sub-loop states; patch them to pass on
// suspend and stop; delete finished ones beyond spec.history.keepChildren.
// +kubebuilder:rbac:groups=looprun.io,resources=loops,verbs=create;patch;delete
// looptemplates: read the template a child is made from (uncached).
// +kubebuilder:rbac:groups=looprun.io,resources=looptemplates,verbs=get

// child is the answer to a sub-loop state's step: it makes sure the child
// Loop exists (created once from its LoopTemplate, or adopted after a
// restart) and passes the parent's suspend on; res is nil until the child
// has ended (or cannot run). Meanwhile the parent waits: the child's status
// changes wake it (it owns the child), nothing polls.
func (s *step) child(ctx context.Context, sub *executor.SubLoop) (*executor.ActionResult, error) {
	child, failure, err := s.r.ensureChild(ctx, s.loop, sub)
	if permanent(err) {
		return rejected("the child Loop cannot be made", err), nil
	}
	if err != nil {
		return nil, err
	}
	if failure != nil {
		return &executor.ActionResult{Failure: failure}, nil
	}
	if a := s.loop.Status.Action; a != nil && a.ChildUID == "" {
		a.ChildUID = string(child.UID) // from now on, a child gone was deleted
	}
	if !child.Status.Phase.IsFinished() {
		// A child paused on its budget holds its parent Paused too, until
		// it goes on (its budget raised: looprun budget on the child).
		run := &s.loop.Status.RunState
		if child.Status.Phase == v1alpha1.PhasePaused {
			s.add(s.m.ChildPaused(run, child.Name, executor.PausedWhy(&child.Status.RunState), s.now))
		} else {
			s.add(s.m.ChildResumed(run, s.now))
		}
		return nil, s.r.passOn(ctx, s.loop, child)
	}
	return &executor.ActionResult{Child: executor.ChildResultOf(&child.Status.RunState)}, nil
}

// ensureChild gets the child Loop of the sub-loop, creating it from its
// LoopTemplate when there is none yet. failure says why no child can run
// (no template, a cycle, too deep, a name taken, the child deleted): the
// state ends in error.
func (r *LoopReconciler) ensureChild(ctx context.Context, parent *v1alpha1.Loop, sub *executor.SubLoop) (*v1alpha1.Loop, *executor.ActionFailure, error) {
	key := types.NamespacedName{Namespace: parent.Namespace, Name: sub.Child}
	child := &v1alpha1.Loop{}
	err := r.Client.Get(ctx, key, child)
	if apierrors.IsNotFound(err) && madeChild(parent) != "" {
		// Made before: the cache may be behind, or it was deleted.
		err = r.APIReader.Get(ctx, key, child)
		if apierrors.IsNotFound(err) {
			return nil, childFailure(ReasonChildDeleted, "child Loop %s was deleted before it ended", sub.Child), nil
		}
	}
	if err == nil {
		return adopt(parent, child)
	}
	if !apierrors.IsNotFound(err) {
		return nil, nil, err
	}
	return r.createChild(ctx, parent, sub)
}

// madeChild is the uid of the child Loop the parent's status says it made
// for the step in flight; "" for none yet.
func madeChild(parent *v1alpha1.Loop) string {
	if a := parent.Status.Action; a != nil {
		return a.ChildUID
	}
	return ""
}

// createChild creates the child Loop of the sub-loop from its LoopTemplate,
// or adopts it when it was created before a restart.
func (r *LoopReconciler) createChild(ctx context.Context, parent *v1alpha1.Loop, sub *executor.SubLoop) (*v1alpha1.Loop, *executor.ActionFailure, error) {
	key := types.NamespacedName{Namespace: parent.Namespace, Name: sub.Child}
	child, failure, err := r.newChild(ctx, parent, sub)
	if child == nil {
		return nil, failure, err
	}
	if child.Spec.Runner != nil && child.Spec.Runner.Workspace != nil && child.Spec.Runner.Workspace.ClaimName == pod.WorkspaceClaim(parent.Name) {
		// The child works in its parent's workspace: it must be there first.
		if r.Actions != nil {
			if err := r.Actions.Workspace(ctx, parent); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := createLoopObject(ctx, r.Client, child); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, nil, fmt.Errorf("create child Loop %s: %w", sub.Child, err)
		}
		// Created before a restart, not yet in the cache: adopt it.
		if err := r.APIReader.Get(ctx, key, child); err != nil {
			return nil, nil, err
		}
		return adopt(parent, child)
	}
	log.FromContext(ctx).Info("Child Loop created", "child", child.Name, "template", sub.Loop)
	r.event(parent, corev1.EventTypeNormal, v1alpha1.EventReasonChildCreated, "Create", "state %s runs LoopTemplate %s as Loop %s", sub.State, sub.Loop, child.Name)
	if sub.Worktree != "" {
		r.event(parent, corev1.EventTypeWarning, v1alpha1.EventReasonWorktreeNotSupported, "Create",
			"state %s: a cluster runs the sub-loop in the parent's workspace, not in a worktree of branch %s", sub.State, sub.Worktree)
	}
	return child, nil, nil
}

// createLoopObject creates a Loop. It goes as unstructured JSON: the manager's
// client speaks protobuf, which custom resources cannot.
func createLoopObject(ctx context.Context, c client.Client, loop *v1alpha1.Loop) error {
	loop.APIVersion, loop.Kind = v1alpha1.GroupVersion.String(), "Loop"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(loop)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	if err := c.Create(ctx, u); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, loop)
}

// adopt takes a child Loop found by name when this Loop controls it.
func adopt(parent, child *v1alpha1.Loop) (*v1alpha1.Loop, *executor.ActionFailure, error) {
	if !metav1.IsControlledBy(child, parent) {
		return nil, childFailure("ChildNameTaken", "Loop %s exists and is not a child of this Loop", child.Name), nil
	}
	if uid := madeChild(parent); uid != "" && string(child.UID) != uid {
		return nil, childFailure(ReasonChildDeleted, "child Loop %s was deleted before it ended (a Loop of that name was made again)", child.Name), nil
	}
	if !child.DeletionTimestamp.IsZero() {
		return nil, childFailure(ReasonChildDeleted, "child Loop %s was deleted before it ended", child.Name), nil
	}
	return child, nil, nil
}

// ReasonChildDeleted ends a sub-loop state whose child Loop was deleted
// before it ended: the child is never made again for the same step.
const ReasonChildDeleted = "ChildDeleted"

func childFailure(reason, format string, args ...any) *executor.ActionFailure {
	return &executor.ActionFailure{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// newChild builds the child Loop of a sub-loop from its LoopTemplate: the
// template's spec copied (a later edit of the template does not change
// it), its context bound as the state says, its timeout clamped to the
// parent's, and what the template leaves unset (runner, agent, llm) taken
// from the parent. It is owned by the parent, in its shard.
func (r *LoopReconciler) newChild(ctx context.Context, parent *v1alpha1.Loop, sub *executor.SubLoop) (*v1alpha1.Loop, *executor.ActionFailure, error) {
	ancestry := templateAncestry(parent)
	if slices.Contains(ancestry, sub.Loop) {
		return nil, childFailure("SubLoopCycle", "LoopTemplate %s is already running above this Loop: %s -> %s", sub.Loop, strings.Join(ancestry, " -> "), sub.Loop), nil
	}
	if len(ancestry)+1 > executor.MaxSubLoopDepth {
		return nil, childFailure("SubLoopTooDeep", "sub-loops nest deeper than %d", executor.MaxSubLoopDepth), nil
	}
	tpl := &v1alpha1.LoopTemplate{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: parent.Namespace, Name: sub.Loop}, tpl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, childFailure("LoopTemplateNotFound", "no LoopTemplate %q in namespace %s (looprun apply -f uploads the loops a loop runs)", sub.Loop, parent.Namespace), nil
		}
		return nil, nil, err
	}
	spec, failure := templateSpec(tpl, sub)
	if failure != nil {
		return nil, failure, nil
	}
	executor.ClampTimeout(spec, sub.Timeout)
	executor.ClampBudget(spec, sub.Budget)
	spec.Suspend = parent.Spec.Suspend
	spec.TTLSecondsAfterFinished = nil // it goes with its parent
	spec.ResumeFrom = nil
	if spec.Runner == nil {
		spec.Runner = parent.Spec.Runner.DeepCopy()
		shareWorkspace(spec.Runner, parent.Name)
	}
	if spec.Agent == nil {
		spec.Agent = parent.Spec.Agent.DeepCopy()
	}
	if spec.LLM == nil {
		spec.LLM = parent.Spec.LLM.DeepCopy()
	}
	if errs := executor.Validate(spec); len(errs) > 0 {
		return nil, childFailure("InvalidLoopTemplate", "LoopTemplate %s: %v", sub.Loop, errs.ToAggregate()), nil
	}
	child := &v1alpha1.Loop{
		ObjectMeta: metav1.ObjectMeta{
			Name: sub.Child, Namespace: parent.Namespace,
			Labels: map[string]string{
				v1alpha1.LabelParent:   v1alpha1.LabelValue(parent.Name),
				v1alpha1.LabelTemplate: v1alpha1.LabelValue(sub.Loop),
			},
		},
		Spec: *spec,
	}
	if shard := parent.Labels[v1alpha1.LabelShard]; shard != "" {
		child.Labels[v1alpha1.LabelShard] = shard
	}
	child.Annotations = childAnnotations(ancestry, sub.Loop)
	if tp := tracing.StateParent(&parent.Status.RunState); tp != "" {
		child.Annotations[v1alpha1.AnnotationTraceParent] = tp // its run goes in the parent's trace
	}
	if err := controllerutil.SetControllerReference(parent, child, r.Scheme); err != nil {
		return nil, nil, err
	}
	return child, nil, nil
}

// templateSpec is the spec of a Loop made from a LoopTemplate, a copy of
// the template's, its context bound as sub says (with, passthrough).
func templateSpec(tpl *v1alpha1.LoopTemplate, sub *executor.SubLoop) (*v1alpha1.LoopSpec, *executor.ActionFailure) {
	spec := tpl.Spec.LoopSpec.DeepCopy()
	own, err := executor.DecodeContext(spec.Context)
	if err != nil {
		return nil, childFailure("InvalidLoopTemplate", "LoopTemplate %s: %v", tpl.Name, err)
	}
	cctx, err := executor.ChildContext(sub, own, tpl.Spec.Parameters)
	if err != nil {
		return nil, childFailure("InvalidBinding", "%v", err)
	}
	spec.Context = nil
	for k, v := range cctx {
		spec.SetContext(k, v)
	}
	return spec, nil
}

// shareWorkspace makes a child that runs as its parent does work in its
// parent's files, as a sub-loop runs in its parent's directory: a
// workspace the parent has made for itself is the child's claim too, and
// the child works in the parent's checkout, which it neither clones nor
// pushes.
func shareWorkspace(rs *v1alpha1.RunnerSpec, parent string) {
	if rs == nil || rs.Workspace == nil {
		return
	}
	w := rs.Workspace
	if w.Git != nil {
		w.WorkingDir = w.GetRelWorkingDir()
		w.Git = nil
	}
	if w.VolumeClaimTemplate != nil {
		w.VolumeClaimTemplate = nil
		w.ClaimName = pod.WorkspaceClaim(parent)
	}
}

// passOn gives a running child what its parent was asked: suspend (and
// its end), and a stop.
func (r *LoopReconciler) passOn(ctx context.Context, parent, child *v1alpha1.Loop) error {
	if child.Spec.Suspend == parent.Spec.Suspend {
		return nil
	}
	patch := client.MergeFrom(child.DeepCopy())
	child.Spec.Suspend = parent.Spec.Suspend
	return client.IgnoreNotFound(r.Client.Patch(ctx, child, patch))
}

// stopChild asks the child in flight, if any, to stop.
func (r *LoopReconciler) stopChild(ctx context.Context, parent *v1alpha1.Loop) error {
	a := parent.Status.Action
	if a == nil || a.Child == "" {
		return nil
	}
	child, err := r.runningChild(ctx, parent, a.Child)
	if child == nil {
		return err
	}
	return r.stopLoop(ctx, parent, child)
}

// runningChild gets the child Loop name of parent, nil when there is none,
// it is not the parent's, or it has ended.
func (r *LoopReconciler) runningChild(ctx context.Context, parent *v1alpha1.Loop, name string) (*v1alpha1.Loop, error) {
	child := &v1alpha1.Loop{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: parent.Namespace, Name: name}, child); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(child, parent) || child.Status.Phase.IsFinished() {
		return nil, nil
	}
	return child, nil
}

// unrecordedChild finds the child Loop of a step whose status write was
// lost (a conflict with a spec edit or a request): the parent's status does
// not name it, but the step it will take again runs it. Suspend and stop
// reach it too.
func (s *step) unrecordedChild(ctx context.Context) (*v1alpha1.Loop, error) {
	run := &s.loop.Status.RunState
	if run.Action != nil || run.Phase.IsFinished() || !hasSubLoops(&s.loop.Spec) {
		return nil, nil
	}
	probe := run.DeepCopy()
	if probe.Phase == "" && s.loop.Spec.ResumeFrom == nil {
		s.m.Start(probe, runID(s.loop), s.now) // the step that started it was lost too
	}
	st, _ := s.m.Plan(probe, s.now)
	if st.Kind != executor.StepLoop {
		return nil, nil
	}
	return s.r.runningChild(ctx, s.loop, st.Loop.Child)
}

func hasSubLoops(spec *v1alpha1.LoopSpec) bool {
	for _, st := range spec.States {
		if st.Loop != "" {
			return true
		}
	}
	return false
}

// stopLoop asks a child Loop to stop, once per request of its parent.
func (r *LoopReconciler) stopLoop(ctx context.Context, parent, child *v1alpha1.Loop) error {
	patch := client.MergeFrom(child.DeepCopy())
	if child.Annotations == nil {
		child.Annotations = map[string]string{}
	}
	child.Annotations[v1alpha1.RequestAnnotation] = v1alpha1.StopRequest(string(parent.UID) + "-" + parent.Status.LastRequest)
	return client.IgnoreNotFound(r.Client.Patch(ctx, child, patch))
}

// pruneChildren deletes the parent's finished child Loops beyond the
// newest spec.history.keepChildren (their event logs go with them), never
// the child in flight nor one still running.
func (r *LoopReconciler) pruneChildren(ctx context.Context, parent *v1alpha1.Loop) error {
	list := &v1alpha1.LoopList{}
	if err := r.Client.List(ctx, list, client.InNamespace(parent.Namespace), client.MatchingLabels{v1alpha1.LabelParent: v1alpha1.LabelValue(parent.Name)}); err != nil {
		return fmt.Errorf("list child Loops: %w", err)
	}
	var done []*v1alpha1.Loop
	for i := range list.Items {
		c := &list.Items[i]
		if !metav1.IsControlledBy(c, parent) || !c.DeletionTimestamp.IsZero() || !c.Status.Phase.IsFinished() {
			continue
		}
		if a := parent.Status.Action; a != nil && a.Child == c.Name {
			continue
		}
		done = append(done, c)
	}
	keep := int(parent.Spec.GetKeepChildren())
	if len(done) <= keep {
		return nil
	}
	slices.SortFunc(done, func(a, b *v1alpha1.Loop) int { // newest first
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	var errs []error
	for _, c := range done[keep:] {
		if err := r.Client.Delete(ctx, c, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// childLoops is the background work of sub-loop states: child Loops, each
// owned by its parent, whose end wakes the parent.
type childLoops struct{}

// Forget implements runner.Background: a child goes with its parent
// (owner references); nothing is kept here.
func (childLoops) Forget(types.NamespacedName) {}

// Wakes implements runner.Background: a child Loop's end (or suspension,
// or deletion) wakes its parent.
func (childLoops) Wakes() runner.Wake {
	return runner.Wake{Owns: &v1alpha1.Loop{}, Predicates: []predicate.Predicate{childEnded}}
}

// childEnded lets through the changes of a child Loop its parent waits
// for: its phase (it ended, or was suspended), and its deletion.
var childEnded = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.Loop)
		n, ok2 := e.ObjectNew.(*v1alpha1.Loop)
		return ok1 && ok2 && o.Status.Phase != n.Status.Phase
	},
}
