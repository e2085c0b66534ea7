package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/safefile"
)

// applyFlags are the flags of looprun apply.
type applyFlags struct {
	file  string
	input string
	set   []string
	// dryRun is kubectl's: none, client (print the objects, touch
	// nothing) or server (the API server checks them, stores nothing).
	dryRun string
}

// The values of --dry-run.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

func newApplyCommand(g *globals, k *kube) *cobra.Command {
	f := &applyFlags{}
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--input VALUE] [--set KEY=VALUE]... [--dry-run[=client|server]]",
		Short: "Create or update a Loop from a loop file (a Loop manifest or a little-loops YAML file), and the LoopTemplates of the loops it runs; or a LoopSchedule",
		Long: "Apply a loop file server-side: first a LoopTemplate for each loop it runs as a sub-loop\n" +
			"(loop: oracles/NAME is the template oracles-NAME), then the Loop.\n" +
			"--input and --set give the Loop's context as looprun run's INPUT and --context do.\n" +
			"--dry-run (=client) prints the objects as YAML and talks to no cluster, as\n" +
			"kubectl apply --dry-run=client -o yaml; --dry-run=server has the API server check them\n" +
			"(schema, validation rules, admission) and store nothing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, g, k)
		},
	}
	cmd.Flags().StringVarP(&f.file, "filename", "f", "", "the loop file")
	cmd.Flags().StringVar(&f.input, "input", "", "the loop's input, as looprun run FILE INPUT: into the context variable its input_key names (default input)")
	cmd.Flags().StringArrayVar(&f.set, "set", nil, "set a context variable, KEY=VALUE (repeatable; looprun run's --context)")
	cmd.Flags().StringVar(&f.dryRun, "dry-run", dryRunNone, "client: print the objects as YAML, touch no cluster; server: the API server checks them and stores nothing")
	cmd.Flags().Lookup("dry-run").NoOptDefVal = dryRunClient
	return cmd
}

func (f *applyFlags) run(cmd *cobra.Command, g *globals, k *kube) error {
	if f.file == "" {
		return fmt.Errorf("apply needs -f FILE")
	}
	switch f.dryRun {
	case dryRunNone, dryRunClient, dryRunServer:
	default:
		return fmt.Errorf("--dry-run %q: want client or server (none: apply)", f.dryRun)
	}
	if sched, err := readSchedule(f.file); err != nil || sched != nil {
		if err != nil {
			return err
		}
		if f.input != "" || len(f.set) > 0 {
			return fmt.Errorf("%s is a LoopSchedule: --input and --set give a Loop its context; write it in the schedule's loop.spec.context", f.file)
		}
		return f.applyObjects(cmd, k, []client.Object{sched}, sched.Namespace)
	}
	lf, err := loadLoop(f.file, g, cmd.ErrOrStderr(), false)
	if err != nil {
		return err
	}
	spec := &lf.Loop.Spec
	if cmd.Flags().Changed("input") {
		setInput(spec, lf.InputKey, f.input)
	}
	if err := setContext(spec, f.set); err != nil {
		return err
	}
	given := operatorContext(spec)
	if lf.LittleLoops() {
		given = append(given, slices.Collect(maps.Keys(loopfile.Thresholds))...) // written into what is sent
	}
	if err := preflight(lf, applyHow(f.file), given...); err != nil {
		return err
	}
	objs, err := clusterObjects(lf, g, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	return f.applyObjects(cmd, k, objs, lf.Loop.Namespace)
}

// applyObjects applies objs, in order, in the namespace -n names, else the
// file's (fileNS), else the context's; --dry-run=client prints them.
func (f *applyFlags) applyObjects(cmd *cobra.Command, k *kube, objs []client.Object, fileNS string) error {
	out := cmd.OutOrStdout()
	if f.dryRun == dryRunClient {
		return printObjects(out, objs, k.namespaceFlag(), fileNS)
	}
	if err := k.connect(); err != nil {
		return err
	}
	ns := k.ns
	if fileNS != "" && k.namespaceFlag() == "" {
		ns = fileNS
	}
	suffix := ""
	if f.dryRun == dryRunServer {
		suffix = " (server dry run)"
	}
	// The loops it runs first: a sub-loop state finds its template.
	for _, obj := range objs {
		obj.SetNamespace(ns)
		verb, err := k.apply(cmd.Context(), obj, f.dryRun == dryRunServer)
		if err != nil {
			return fmt.Errorf("%s: %w", objectRef(obj), err)
		}
		if _, err := fmt.Fprintf(out, "%s %s%s\n", objectRef(obj), verb, suffix); err != nil {
			return err
		}
	}
	return nil
}

// readSchedule reads file as a LoopSchedule; nil when it is not one (a
// loop file).
func readSchedule(file string) (*v1alpha1.LoopSchedule, error) {
	data, err := safefile.Read(file, safefile.MaxLoopFile)
	if err != nil {
		return nil, err
	}
	var meta metav1.TypeMeta
	if yaml.Unmarshal(data, &meta) != nil || meta.Kind != "LoopSchedule" {
		return nil, nil //nolint:nilnil // not a schedule: the file is read as a loop
	}
	if meta.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("%s: a LoopSchedule is apiVersion %s, not %q", file, v1alpha1.GroupVersion, meta.APIVersion)
	}
	sched := &v1alpha1.LoopSchedule{}
	if err := yaml.UnmarshalStrict(data, sched); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if sched.Name == "" {
		return nil, fmt.Errorf("%s: metadata.name is required", file)
	}
	return sched, nil
}

// applyHow says how looprun apply gives a loop a variable or its input.
func applyHow(file string) setHow {
	return setHow{cmd: "looprun apply -f " + file, set: "--set", input: "--input VALUE"}
}

// operatorContext are the variables the operator gives a Loop's run
// besides its context: run_dir, max_steps, and input_hash of a text input.
func operatorContext(spec *v1alpha1.LoopSpec) []string {
	names := []string{"run_dir", "max_steps"}
	if _, ok := contextValue(spec, loopfile.DefaultInputKey).(string); ok {
		names = append(names, "input_hash")
	}
	return names
}

// clusterObjects are what looprun apply sends for lf, in order: a
// LoopTemplate for each loop it runs, then the Loop, their loop: states
// naming templates (loopfile.TemplateName). It warns of the sub-loops it
// cannot follow.
func clusterObjects(lf *loopfile.File, g *globals, stderr io.Writer) ([]client.Object, error) {
	loop, templates, err := forCluster(lf, g, stderr)
	if err != nil {
		return nil, err
	}
	objs := make([]client.Object, 0, len(templates)+1)
	for _, t := range templates {
		objs = append(objs, &v1alpha1.LoopTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LoopTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: t.Name, Annotations: t.Annotations},
			Spec:       t.Spec,
		})
	}
	name := loop.Name
	if lf.LittleLoops() {
		// A little-loops name (my_loop) is made a Kubernetes name as
		// convert makes it (my-loop).
		name = loopfile.KubernetesName(name)
	}
	return append(objs, &v1alpha1.Loop{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: loop.Labels, Annotations: loop.Annotations},
		Spec:       loop.Spec,
	}), nil
}

// objectRef is kind/name, as kubectl names an object it applied.
func objectRef(obj client.Object) string {
	kind := "loop"
	switch obj.(type) {
	case *v1alpha1.LoopTemplate:
		kind = "looptemplate"
	case *v1alpha1.LoopSchedule:
		kind = "loopschedule"
	}
	return kind + "/" + obj.GetName()
}

// printObjects writes the objects looprun apply would send as YAML
// documents, in the namespace -n or the file names (else none: kubectl
// apply -f puts them in the context's).
func printObjects(out io.Writer, objs []client.Object, namespaces ...string) error {
	for i, obj := range objs {
		for _, ns := range namespaces {
			if ns != "" {
				obj.SetNamespace(ns)
				break
			}
		}
		u, err := applyContent(obj)
		if err != nil {
			return err
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(out, "---\n"); err != nil {
				return err
			}
		}
		if _, err := out.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// applyManager is the field manager of looprun apply.
const applyManager = "looprun"

// applyContent is obj (its type meta set) as looprun apply sends it: no
// status (the operator's), no creation time.
func applyContent(obj client.Object) (*unstructured.Unstructured, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(content, "status")
	unstructured.RemoveNestedField(content, "metadata", "creationTimestamp")
	return &unstructured.Unstructured{Object: content}, nil
}

// apply applies a Loop or a LoopTemplate (its type meta set) server-side,
// as kubectl apply --server-side does: its spec, labels and annotations are
// the file's, the fields other managers own stay theirs. With dryRun the
// API server checks it and stores nothing. The verb says what changed (or
// would).
func (k *kube) apply(ctx context.Context, obj client.Object, dryRun bool) (string, error) {
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	err := k.c.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	found := err == nil
	u, err := applyContent(obj)
	if err != nil {
		return "", err
	}
	opts := []client.ApplyOption{client.FieldOwner(applyManager), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	if err := k.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
		return "", err
	}
	switch {
	case !found:
		return "created", nil
	case u.GetGeneration() == existing.GetGeneration() && maps.Equal(u.GetLabels(), existing.GetLabels()) && maps.Equal(u.GetAnnotations(), existing.GetAnnotations()):
		return "unchanged", nil
	}
	return "configured", nil
}
