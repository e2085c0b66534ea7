// Package transfer moves runs: it exports a Loop (in a cluster) or a local
// run into one checked document (internal/history), and imports such a
// document into a namespace of any cluster or into a local loops directory,
// where the run continues from where it was.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	out.Status.LastRequest = loop.Status.LastRequest
	return out
}

// ExportCluster reads a Loop, its event log and checkpoints. A checkpoint
// that fails its check stops the export, naming it.
func ExportCluster(ctx context.Context, r client.Reader, key client.ObjectKey, now time.Time) (*history.Run, error) {
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
	return run, nil
}

// ImportCluster recreates an exported run as the Loop key: the Loop is
// created held back (looprun.io/importing), its status and event log are
// written, then it is let go and the operator continues it. A run that was
// running or interrupted goes on (a loop_resume event says so); a finished
// run is kept as it ended.
func ImportCluster(ctx context.Context, c client.Client, scheme *runtime.Scheme, run *history.Run, key client.ObjectKey, now time.Time) (*v1alpha1.Loop, error) {
	if err := validate(run); err != nil {
		return nil, err
	}
	src := portable(&run.Loop)
	loop := &v1alpha1.Loop{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: src.Labels, Annotations: src.Annotations},
		Spec:       src.Spec,
	}
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[v1alpha1.ImportingAnnotation] = run.Source
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
	loop.Status.RunState = *state
	loop.Status.LastRequest = src.Status.LastRequest
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
// loop is valid, and its run fits it.
func validate(run *history.Run) error {
	if errs := executor.Validate(&run.Loop.Spec); len(errs) > 0 {
		return fmt.Errorf("the exported loop is invalid: %w", errs.ToAggregate())
	}
	if err := executor.ValidateRun(&run.Loop.Spec, &run.Loop.Status.RunState); err != nil {
		return fmt.Errorf("the exported run does not fit its loop: %w", err)
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
// file it runs, its state file, event log and checkpoints.
func ExportLocal(loopsDir, name string, now time.Time) (*history.Run, error) {
	saved, err := localrun.Open(loopsDir, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no local run of %q in %s", name, loopsDir)
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
	loop.Status.RunState = *state
	return &history.Run{ExportedAt: now.UTC(), Source: "local/" + loopsDir + "/" + name, Loop: portable(loop), Events: events, Checkpoints: cps}, nil
}

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
	manifest, err := loopfile.ManifestYAML(&src)
	if err != nil {
		return nil, err
	}
	if err := store.Import(manifest, state, events, run.Checkpoints); err != nil {
		return nil, err
	}
	return store, nil
}
