// Package transfer moves runs: it exports a Loop (in a cluster) or a local
// run into one checked document (internal/history), and imports such a
// document into a namespace of any cluster or into a local loops directory,
// where the run continues from where it was.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
)

// droppedAnnotations are not carried: they describe one cluster's copy.
var droppedAnnotations = []string{v1alpha1.ImportingAnnotation, "kubectl.kubernetes.io/last-applied-configuration"}

// portable is the Loop as an export carries it: name, labels, annotations,
// spec, and the run state; nothing that belongs to one cluster.
func portable(loop *v1alpha1.Loop) v1alpha1.Loop {
	out := v1alpha1.Loop{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop"},
		ObjectMeta: metav1.ObjectMeta{Name: loop.Name, Namespace: loop.Namespace, Labels: loop.Labels},
		Spec:       *loop.Spec.DeepCopy(),
	}
	for k, v := range loop.Annotations {
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[k] = v
	}
	for _, k := range droppedAnnotations {
		delete(out.Annotations, k)
	}
	out.Status.RunState = *loop.Status.RunState.DeepCopy()
	if a := out.Status.Action; a != nil {
		a.ChildUID = "" // a uid names an object of one cluster: the child moves with a new one
	}
	out.Status.LastRequest = loop.Status.LastRequest
	return out
}

// ExportCluster reads a Loop, its event log and checkpoints, its child
// Loops (each exported the same way) and the LoopTemplates its sub-loop
// states name. A checkpoint that fails its check stops the export, naming it.
func ExportCluster(ctx context.Context, r client.Reader, key client.ObjectKey, now time.Time) (*history.Run, error) {
	return exportCluster(ctx, r, key, now, 0)
}

func exportCluster(ctx context.Context, r client.Reader, key client.ObjectKey, now time.Time, depth int) (*history.Run, error) {
	if depth > executor.MaxSubLoopDepth {
		return nil, fmt.Errorf("export %s: sub-loops nest deeper than %d", key.Name, executor.MaxSubLoopDepth)
	}
	loop := &v1alpha1.Loop{}
	if err := r.Get(ctx, key, loop); err != nil {
		return nil, err
	}
	events, err := configmaps.Read(ctx, r, loop)
	if err != nil {
		return nil, fmt.Errorf("read the event log of %s: %w", key.Name, err)
	}
	run := &history.Run{ExportedAt: now.UTC(), Source: fmt.Sprintf("cluster/%s/%s", key.Namespace, key.Name), Loop: portable(loop), Events: events}
	kept, err := configmaps.Checkpoints(ctx, r, loop)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", key.Name, err)
	}
	for _, k := range kept {
		if k.Err != nil {
			return nil, fmt.Errorf("export %s: %w", key.Name, k.Err)
		}
		run.Checkpoints = append(run.Checkpoints, *k.Checkpoint)
	}
	var children v1alpha1.LoopList
	if err := r.List(ctx, &children, client.InNamespace(key.Namespace), client.MatchingLabels{v1alpha1.LabelParent: key.Name}); err != nil {
		return nil, fmt.Errorf("list the child Loops of %s: %w", key.Name, err)
	}
	slices.SortFunc(children.Items, func(a, b v1alpha1.Loop) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for i := range children.Items {
		c := &children.Items[i]
		if !metav1.IsControlledBy(c, loop) {
			continue
		}
		child, err := exportCluster(ctx, r, client.ObjectKeyFromObject(c), now, depth+1)
		if err != nil {
			return nil, fmt.Errorf("export the child %s of %s: %w", c.Name, key.Name, err)
		}
		run.Children = append(run.Children, *child)
	}
	run.Templates, err = templatesOf(ctx, r, loop)
	return run, err
}

// templatesOf reads the LoopTemplates the loop's sub-loop states name
// (those whose name has no template), as portable objects.
func templatesOf(ctx context.Context, r client.Reader, loop *v1alpha1.Loop) ([]v1alpha1.LoopTemplate, error) {
	var out []v1alpha1.LoopTemplate
	seen := map[string]bool{}
	for _, sn := range slices.Sorted(maps.Keys(loop.Spec.States)) {
		name := loop.Spec.States[sn].Loop
		if name == "" || seen[name] || strings.Contains(name, "${") {
			continue
		}
		seen[name] = true
		t := &v1alpha1.LoopTemplate{}
		err := r.Get(ctx, client.ObjectKey{Namespace: loop.Namespace, Name: name}, t)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read LoopTemplate %s: %w", name, err)
		}
		out = append(out, v1alpha1.LoopTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LoopTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: t.Name, Labels: t.Labels, Annotations: t.Annotations},
			Spec:       t.Spec,
		})
	}
	return out, nil
}

// ImportCluster recreates an exported run as the Loop key: the Loop is
// created held back (looprun.io/importing), its status and event log are
// written, then it is let go and the operator continues it. A run that was
// running or interrupted goes on (a loop_resume event says so); a finished
// run is kept as it ended.
//
// Its children are imported as its child Loops, and the LoopTemplates it
// carries are created where the namespace has none of that name. The
// child in flight is named as the imported parent names it.
func ImportCluster(ctx context.Context, c client.Client, scheme *runtime.Scheme, run *history.Run, key client.ObjectKey, now time.Time) (*v1alpha1.Loop, error) {
	if err := validate(run); err != nil {
		return nil, err
	}
	return importCluster(ctx, c, scheme, run, key, now, nil)
}

func importCluster(ctx context.Context, c client.Client, scheme *runtime.Scheme, run *history.Run, key client.ObjectKey, now time.Time, parent *v1alpha1.Loop) (*v1alpha1.Loop, error) {
	src := portable(&run.Loop)
	loop := &v1alpha1.Loop{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: src.Labels, Annotations: src.Annotations},
		Spec:       src.Spec,
	}
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[v1alpha1.ImportingAnnotation] = run.Source
	if parent != nil {
		if loop.Labels == nil {
			loop.Labels = map[string]string{}
		}
		loop.Labels[v1alpha1.LabelParent] = parent.Name
		if err := controllerutil.SetControllerReference(parent, loop, scheme); err != nil {
			return nil, err
		}
	}
	if err := c.Create(ctx, loop); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("loop %s already exists in namespace %s: import under another name (--name)", key.Name, key.Namespace)
		}
		return nil, err
	}
	state, events, err := continued(loop.Name, &loop.Spec, &src.Status.RunState, run.Events, now, true)
	if err != nil {
		return nil, err
	}
	names := nameChildren(run, key.Name, state)
	loop.Status.RunState = *state
	loop.Status.LastRequest = src.Status.LastRequest
	if err := createTemplates(ctx, c, key.Namespace, run.Templates); err != nil {
		return nil, err
	}
	for i := range run.Children {
		child := &run.Children[i]
		if _, err := importCluster(ctx, c, scheme, child, client.ObjectKey{Namespace: key.Namespace, Name: names[child.Loop.Name]}, now, loop); err != nil {
			return nil, fmt.Errorf("import the child %s of %s: %w", child.Loop.Name, key.Name, err)
		}
	}
	log := &configmaps.Log{Client: c, Reader: c, Scheme: scheme}
	if err := log.Rebuild(ctx, loop, events, run.Checkpoints); err != nil {
		return nil, fmt.Errorf("write the event log of %s: %w", key.Name, err)
	}
	if err := c.Status().Update(ctx, loop); err != nil {
		return nil, fmt.Errorf("write the status of %s: %w", key.Name, err)
	}
	patch := client.MergeFrom(loop.DeepCopy())
	delete(loop.Annotations, v1alpha1.ImportingAnnotation)
	if err := c.Patch(ctx, loop, patch); err != nil {
		return nil, fmt.Errorf("release %s to the operator: %w", key.Name, err)
	}
	return loop, nil
}

// validate checks what an export carries before anything is written: the
// loop is valid, and its run fits it; the same for each child.
func validate(run *history.Run) error {
	if errs := executor.Validate(&run.Loop.Spec); len(errs) > 0 {
		return fmt.Errorf("the exported loop is invalid: %w", errs.ToAggregate())
	}
	if err := executor.ValidateRun(&run.Loop.Spec, &run.Loop.Status.RunState); err != nil {
		return fmt.Errorf("the exported run does not fit its loop: %w", err)
	}
	for i := range run.Children {
		if err := localrun.ValidateName(run.Children[i].Loop.Name); err != nil {
			return fmt.Errorf("child %d: %w", i, err)
		}
		if err := validate(&run.Children[i]); err != nil {
			return fmt.Errorf("child %s: %w", run.Children[i].Loop.Name, err)
		}
	}
	return nil
}

// nameChildren names the children of an imported run (exported name to
// imported name): the child in flight as the run, imported as name, names
// it, so that it finds it (its run state says so too); the others as they
// were.
func nameChildren(run *history.Run, name string, state *v1alpha1.RunState) map[string]string {
	names := map[string]string{}
	for i := range run.Children {
		n := run.Children[i].Loop.Name
		names[n] = n
	}
	if a := state.Action; a != nil && a.Child != "" {
		to := executor.ChildName(name, state.RunID, a.State, a.Iteration)
		if _, ok := names[a.Child]; ok {
			names[a.Child] = to
		}
		a.Child = to
	}
	return names
}

// createTemplates creates the LoopTemplates an export carries that the
// namespace does not have; one it has is left as it is.
func createTemplates(ctx context.Context, c client.Client, ns string, templates []v1alpha1.LoopTemplate) error {
	for i := range templates {
		t := templates[i].DeepCopy()
		t.Namespace, t.ResourceVersion, t.UID = ns, "", ""
		if err := c.Create(ctx, t); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create LoopTemplate %s: %w", t.Name, err)
		}
	}
	return nil
}

// continued prepares an imported run state to go on where it was; with
// resume, a run that was running or interrupted is resumed now. The Pod of
// an action in flight ran where the run came from: it is forgotten.
func continued(name string, spec *v1alpha1.LoopSpec, run *v1alpha1.RunState, events []executor.Event, now time.Time, resume bool) (*v1alpha1.RunState, []executor.Event, error) {
	run = run.DeepCopy()
	if run.Action != nil {
		run.Action.Pod = ""
	}
	for _, e := range events {
		run.LastSeq = max(run.LastSeq, e.Seq)
	}
	if !resume || run.Phase == "" || run.Phase == v1alpha1.PhasePending || run.Phase.IsFinished() && run.Phase != v1alpha1.PhaseInterrupted {
		return run, events, nil
	}
	m, err := executor.New(name, spec, executor.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("the exported loop is invalid: %w", err)
	}
	evs, _ := m.Resume(run, now)
	return run, append(append([]executor.Event(nil), events...), evs...), nil
}

// ExportLocal reads the local run of the loop name under loopsDir: the loop
// file it runs, its state file, event log and checkpoints, and the child
// runs of its sub-loops (each exported the same way).
func ExportLocal(loopsDir, name string, now time.Time) (*history.Run, error) {
	return exportLocal(loopsDir, name, now, 0)
}

func exportLocal(loopsDir, name string, now time.Time, depth int) (*history.Run, error) {
	if depth > executor.MaxSubLoopDepth {
		return nil, fmt.Errorf("export %s: sub-loops nest deeper than %d", name, executor.MaxSubLoopDepth)
	}
	saved, err := localrun.Open(loopsDir, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no local run of %q in %s", errNoRun, name, loopsDir)
	}
	if err != nil {
		return nil, err
	}
	store, state, lf := saved.Store, saved.Run, saved.Loop
	events, err := eventlog.Read(store.EventsPath())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", store.EventsPath(), err)
	}
	cps, bad, err := store.Checkpoints()
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("export %s: %w", name, errors.Join(bad...))
	}
	loop := lf.Loop.DeepCopy()
	loop.Name = loopfile.KubernetesName(name)
	if depth > 0 {
		loop.Name = name // a child's run is found by its name
	}
	loop.Status.RunState = *state
	run := &history.Run{ExportedAt: now.UTC(), Source: "local/" + loopsDir + "/" + name, Loop: portable(loop), Events: events, Checkpoints: cps}
	seen := map[string]bool{}
	for _, e := range events {
		child := executor.SubLoopStartOf(e).Child
		if e.Type != executor.EventSubLoopStart || child == "" || seen[child] || executor.Forwarded(e) {
			continue
		}
		seen[child] = true
		c, err := exportLocal(loopsDir, child, now, depth+1)
		if err != nil {
			if errors.Is(err, errNoRun) {
				continue // it never saved a step
			}
			return nil, fmt.Errorf("export the child %s of %s: %w", child, name, err)
		}
		run.Children = append(run.Children, *c)
	}
	return run, nil
}

// errNoRun is a run that is not there.
var errNoRun = errors.New("no such local run")

// ImportLocal writes an exported run as the local run name under loopsDir,
// ready for `looprun resume`: the loop as a manifest beside the state
// file, the state file, event log and checkpoints. An existing run of that
// name is refused unless overwrite.
func ImportLocal(loopsDir string, run *history.Run, name string, overwrite bool, now time.Time) (*localrun.Store, error) {
	if err := validate(run); err != nil {
		return nil, err
	}
	store, err := localrun.NewStore(loopsDir, name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(store.StatePath()); err == nil && !overwrite {
		return nil, fmt.Errorf("a local run of %q exists in %s: import under another name (--name) or --overwrite", name, loopsDir)
	}
	src := portable(&run.Loop)
	src.Name = name
	// looprun resume does the resuming.
	state, events, err := continued(name, &src.Spec, &src.Status.RunState, run.Events, now, false)
	if err != nil {
		return nil, err
	}
	names := nameChildren(run, name, state)
	for i := range run.Children {
		child := run.Children[i]
		to := names[child.Loop.Name]
		if to != child.Loop.Name {
			// The child in flight, renamed: its run id is its name.
			child.Loop = *child.Loop.DeepCopy()
			child.Loop.Status.RunID = to
		}
		if _, err := ImportLocal(loopsDir, &child, to, overwrite, now); err != nil {
			return nil, fmt.Errorf("import the child %s of %s: %w", child.Loop.Name, name, err)
		}
	}
	manifest, err := loopfile.ManifestYAML(&src)
	if err != nil {
		return nil, err
	}
	if err := store.Import(manifest, state, events, run.Checkpoints); err != nil {
		return nil, err
	}
	return store, nil
}
