package main

// looprun get: Loops listed as kubectl get lists them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
)

// loopResource is how kubectl -o name names a Loop: loop.looprun.io/NAME.
var loopResource = "loop." + v1alpha1.GroupVersion.Group

// getOptions are looprun get's flags and arguments, and what complete
// makes of them.
type getOptions struct {
	k             *kube
	output        string
	allNamespaces bool
	selector      string
	watch         bool

	// names are the Loops named on the command line (none: all of them).
	names []string
	// sel is the parsed --selector; jp the parsed -o jsonpath= template.
	sel labels.Selector
	jp  *jsonpath.JSONPath
	// single: one Loop was named, so yaml, json and jsonpath print the
	// Loop itself rather than a List.
	single bool
	// headerDone: the table's header is printed (a watch prints it with
	// its first line when the list was empty).
	headerDone bool

	out, errOut io.Writer
}

func newGetCommand(k *kube) *cobra.Command {
	o := &getOptions{k: k}
	cmd := &cobra.Command{
		Use:   "get [NAME...]",
		Short: "List Loops in the cluster: state, iteration, phase, verdict, age",
		Long: "List the Loops of a namespace (or of all, -A), or the ones named, as kubectl get lists\n" +
			"them: a child Loop (a sub-loop's) under its parent. -w prints the list, then a line each\n" +
			"time a Loop changes, until Ctrl-C.",
		Example: `  looprun get
  looprun get -A -l team=blue
  looprun get count -o wide
  looprun get -o jsonpath='{.items[*].metadata.name}'
  looprun get -w`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(cmd, args); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals...)
			defer stop()
			return o.run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, name, yaml, json or jsonpath=TEMPLATE")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list the Loops of all namespaces (a NAMESPACE column first)")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector, as kubectl's (team=blue, tier in (a,b), !draft)")
	f.BoolVarP(&o.watch, "watch", "w", false, "after the list, print a line each time a Loop changes, until Ctrl-C")
	return cmd
}

// complete reads the arguments and parses the selector and the template.
func (o *getOptions) complete(cmd *cobra.Command, args []string) error {
	o.out, o.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
	o.names = nil
	for _, a := range args {
		name, _ := o.k.loopTarget(a, true)
		o.names = append(o.names, name)
	}
	o.single = len(o.names) == 1
	var err error
	if o.sel, err = labels.Parse(o.selector); err != nil {
		return fmt.Errorf("--selector %q: %w", o.selector, err)
	}
	if tmpl, ok := strings.CutPrefix(o.output, "jsonpath="); ok {
		o.jp = jsonpath.New("output").AllowMissingKeys(true)
		if err := o.jp.Parse(tmpl); err != nil {
			return fmt.Errorf("-o jsonpath: %w", err)
		}
	}
	return nil
}

// validate refuses what kubectl refuses: names with -A or -l, an
// unknown output format.
func (o *getOptions) validate() error {
	switch {
	case o.jp != nil, o.output == "", o.output == "wide", o.output == "name", o.output == "yaml", o.output == "json":
	default:
		return fmt.Errorf("--output %q: want wide, name, yaml, json or jsonpath=TEMPLATE", o.output)
	}
	if len(o.names) > 0 && o.allNamespaces {
		return errors.New("a Loop cannot be named across all namespaces: leave out -A, or name its namespace with -n")
	}
	if len(o.names) > 0 && !o.sel.Empty() {
		return errors.New("name Loops or select them with -l, not both")
	}
	return nil
}

// run fetches the Loops, prints them and, with -w, their changes.
func (o *getOptions) run(ctx context.Context) error {
	if err := o.k.connect(); err != nil {
		return err
	}
	loops, version, err := o.fetch(ctx)
	if err != nil {
		return err
	}
	if len(loops) == 0 && o.jp == nil && o.output != "yaml" && o.output != "json" {
		if o.allNamespaces {
			fmt.Fprintln(o.errOut, "No loops in any namespace.")
		} else {
			fmt.Fprintf(o.errOut, "No loops in namespace %s.\n", o.k.ns)
		}
	} else if err := o.print(loops, false); err != nil {
		return err
	}
	if !o.watch {
		return nil
	}
	return o.follow(ctx, version)
}

// listOptions select the Loops get lists and watches.
func (o *getOptions) listOptions() []client.ListOption {
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: o.sel}}
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(o.k.ns))
	}
	return opts
}

// fetch reads the Loops named, or lists them, and returns the resource
// version a watch goes on from.
func (o *getOptions) fetch(ctx context.Context) ([]v1alpha1.Loop, string, error) {
	list := &v1alpha1.LoopList{}
	if len(o.names) == 0 {
		err := o.k.c.List(ctx, list, o.listOptions()...)
		return list.Items, list.ResourceVersion, err
	}
	if o.watch {
		// The version to watch from, read before the Loops: a change
		// between the two is printed once more, never missed.
		if err := o.k.c.List(ctx, list, client.InNamespace(o.k.ns), client.Limit(1)); err != nil {
			return nil, "", err
		}
	}
	var loops []v1alpha1.Loop
	for _, name := range o.names {
		loop, err := o.k.getLoop(ctx, name)
		if err != nil {
			return nil, "", err
		}
		loops = append(loops, *loop)
	}
	return loops, list.ResourceVersion, nil
}

// print renders Loops in the output format; a table starts with its
// header unless one was printed before. The Loops of a list are shown as
// a tree; a watch's changes (change) one a line.
func (o *getOptions) print(loops []v1alpha1.Loop, change bool) error {
	switch {
	case o.output == "name":
		for _, l := range loops {
			fmt.Fprintf(o.out, "%s/%s\n", loopResource, l.Name)
		}
		return nil
	case o.output == "yaml", o.output == "json", o.jp != nil:
		return o.printObject(loops)
	}
	cols := columns{namespace: o.allNamespaces, wide: o.output == "wide"}
	t := newTable(o.out)
	if !o.headerDone {
		t = newTable(o.out, cols.headers()...)
		o.headerDone = true
	}
	now := o.k.clock()
	var rows []treeRow
	if change {
		for i := range loops {
			rows = append(rows, treeRow{loop: &loops[i]})
		}
	} else {
		rows = loopTree(loops)
	}
	for _, r := range rows {
		t.row(cols.cells(r, now)...)
	}
	return t.flush()
}

// printObject prints Loops as yaml, json or through a jsonpath template:
// the Loop itself when one was named, else a List of them, as kubectl does.
func (o *getOptions) printObject(loops []v1alpha1.Loop) error {
	for i := range loops {
		loops[i].APIVersion, loops[i].Kind = v1alpha1.GroupVersion.String(), "Loop"
		loops[i].ManagedFields = nil
	}
	var v any = &v1alpha1.LoopList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: loops}
	if o.single && len(loops) == 1 {
		v = &loops[0]
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.jp != nil {
		// The template reads the object as JSON, field names as kubectl's.
		var data any
		if err := json.Unmarshal(b, &data); err != nil {
			return err
		}
		return o.jp.Execute(o.out, data)
	}
	if o.output == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(o.out, strings.TrimRight(string(b), "\n"))
	return err
}

// follow prints each change of the Loops get lists, from version on, until
// ctx ends (Ctrl-C). A watch the server closes is opened again from the
// last version seen; one too old to go on from lists the Loops again.
func (o *getOptions) follow(ctx context.Context, version string) error {
	for ctx.Err() == nil {
		opts := o.listOptions()
		if len(o.names) > 0 {
			opts = []client.ListOption{client.InNamespace(o.k.ns)}
			if o.single {
				opts = append(opts, client.MatchingFields{"metadata.name": o.names[0]})
			}
		}
		opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version, AllowWatchBookmarks: true}})
		w, err := o.k.c.Watch(ctx, &v1alpha1.LoopList{}, opts...)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		version, err = o.printChanges(ctx, w, version)
		w.Stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// printChanges prints a line per change a watch reports and returns the
// version it got to ("" when it must start again from now).
func (o *getOptions) printChanges(ctx context.Context, w watch.Interface, version string) (string, error) {
	for {
		select {
		case <-ctx.Done():
			return version, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return version, nil
			}
			switch ev.Type {
			case watch.Error:
				if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return "", nil
				}
				return version, apierrors.FromObject(ev.Object)
			case watch.Bookmark:
				if l, ok := ev.Object.(*v1alpha1.Loop); ok {
					version = l.ResourceVersion
				}
				continue
			}
			l, ok := ev.Object.(*v1alpha1.Loop)
			if !ok {
				continue
			}
			version = l.ResourceVersion
			if len(o.names) > 0 && !slices.Contains(o.names, l.Name) {
				continue
			}
			if err := o.print([]v1alpha1.Loop{*l}, true); err != nil {
				return version, err
			}
		}
	}
}

// columns are get's table: NAMESPACE first with -A, and with -o wide the
// columns kubectl shows at priority 1 (MESSAGE, RUN, POD, UPDATED).
type columns struct{ namespace, wide bool }

func (c columns) headers() []string {
	h := []string{"NAME", "STATE", "ITERATION", "PHASE", "VERDICT", "REASON", "AGE"}
	if c.namespace {
		h = append([]string{"NAMESPACE"}, h...)
	}
	if c.wide {
		h = append(h, "MESSAGE", "RUN", "POD", "UPDATED")
	}
	return h
}

func (c columns) cells(r treeRow, now time.Time) []any {
	l := r.loop
	verdict := ""
	if l.Status.LastResult != nil {
		verdict = l.Status.LastResult.Verdict
	}
	name := l.Name
	if r.depth > 0 {
		name = strings.Repeat("  ", r.depth-1) + "└─ " + name
	}
	reason, message := "", ""
	if cond := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ReadyCondition); cond != nil {
		// as kubectl get loops shows them: what it waits for, how it ended
		reason, message = cond.Reason, cond.Message
	}
	cells := []any{name, l.Status.CurrentState, l.Status.Iteration, l.Status.Phase, verdict, reason, age(l.CreationTimestamp.Time, now)}
	if c.namespace {
		cells = append([]any{l.Namespace}, cells...)
	}
	if c.wide {
		pod, updated := "", "<unknown>"
		if l.Status.Action != nil {
			pod = l.Status.Action.Pod
		}
		if l.Status.UpdatedAt != nil {
			updated = age(l.Status.UpdatedAt.Time, now)
		}
		cells = append(cells, printable(firstLine(message)), l.Status.RunID, pod, updated)
	}
	return cells
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// treeRow is a Loop and how deep it is below the Loops listed with it.
type treeRow struct {
	loop  *v1alpha1.Loop
	depth int
}

// loopTree orders Loops as a tree: each child Loop (a sub-loop's) right
// under its parent, oldest first; a child whose parent is not in the list
// stands on its own.
func loopTree(loops []v1alpha1.Loop) []treeRow {
	byUID := map[string]bool{}
	for _, l := range loops {
		byUID[string(l.UID)] = true
	}
	children := map[string][]*v1alpha1.Loop{}
	var roots []*v1alpha1.Loop
	for i := range loops {
		l := &loops[i]
		if ref := metav1.GetControllerOf(l); ref != nil && ref.Kind == "Loop" && byUID[string(ref.UID)] {
			children[string(ref.UID)] = append(children[string(ref.UID)], l)
			continue
		}
		roots = append(roots, l)
	}
	var out []treeRow
	var walk func(l *v1alpha1.Loop, depth int)
	walk = func(l *v1alpha1.Loop, depth int) {
		out = append(out, treeRow{l, depth})
		kids := children[string(l.UID)]
		slices.SortFunc(kids, func(a, b *v1alpha1.Loop) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return out
}
