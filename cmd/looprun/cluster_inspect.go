package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
)

func newDescribeCommand(k *kube) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Summarise a Loop: status, state, iteration, retries, time, conditions, history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			loop, err := k.getLoop(cmd.Context(), name)
			if err != nil {
				return err
			}
			events, err := configmaps.Read(cmd.Context(), k.c, loop)
			if err != nil {
				return err
			}
			if err := describe(cmd.OutOrStdout(), loop, events, k.clock()); err != nil {
				return err
			}
			children := &v1alpha1.LoopList{}
			if err := k.c.List(cmd.Context(), children, client.InNamespace(loop.Namespace), client.MatchingLabels{v1alpha1.LabelParent: v1alpha1.LabelValue(loop.Name)}); err != nil {
				return err
			}
			return describeChildren(cmd.OutOrStdout(), loop, children.Items, k.clock())
		},
	}
}

// describeChildren lists the child Loops the Loop's sub-loop states made,
// oldest first.
func describeChildren(out io.Writer, parent *v1alpha1.Loop, children []v1alpha1.Loop, now time.Time) error {
	var mine []v1alpha1.Loop
	for _, c := range children {
		if metav1.IsControlledBy(&c, parent) {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	slices.SortFunc(mine, func(a, b v1alpha1.Loop) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	fmt.Fprintln(out, "Children:")
	t := newFields(out, "  ", "NAME", "TEMPLATE", "STATE", "PHASE", "AGE")
	for _, c := range mine {
		t.row(c.Name, c.Labels[v1alpha1.LabelTemplate], orNone(c.Status.CurrentState), orNone(string(c.Status.Phase)), age(c.CreationTimestamp.Time, now))
	}
	return t.flush()
}

func describe(out io.Writer, loop *v1alpha1.Loop, events []executor.Event, now time.Time) error {
	fields := newFields(out, "")
	describeRun(fields.field, loop, now)
	describeHistory(fields.field, loop)
	if err := fields.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "Conditions:")
	conds := newFields(out, "  ", "TYPE", "STATUS", "REASON", "MESSAGE")
	for _, c := range loop.Status.Conditions {
		conds.row(c.Type, c.Status, c.Reason, c.Message)
	}
	if err := conds.flush(); err != nil {
		return err
	}
	if len(events) > 5 {
		events = events[len(events)-5:]
	}
	fmt.Fprintln(out, "Recent events:")
	for _, e := range events {
		fmt.Fprintf(out, "  %s\n", eventLine(e, fmt.Sprintf("%-8s", age(e.Time, now))))
	}
	return nil
}

type rowFunc func(k string, format string, v ...any)

// describeRun writes where the run is: phase, state, iteration, retries, time.
func describeRun(row rowFunc, loop *v1alpha1.Loop, now time.Time) {
	st := loop.Status
	row("Name", "%s", loop.Name)
	row("Namespace", "%s", loop.Namespace)
	if p := loop.Labels[v1alpha1.LabelParent]; p != "" {
		row("Parent", "loop/%s (runs LoopTemplate %s)", p, loop.Labels[v1alpha1.LabelTemplate])
	}
	phase := string(st.Phase)
	if st.TerminatedBy != "" {
		phase += " (" + string(st.TerminatedBy) + ")"
	}
	row("Phase", "%s", orNone(phase))
	if st.Message != "" {
		row("Message", "%s", st.Message)
	}
	row("State", "%s", orNone(st.CurrentState))
	row("Iteration", "%d of %d", st.Iteration, loop.Spec.GetMaxIterations())
	retries := fmt.Sprintf("%d of the current action", st.Retries)
	if len(st.RetryCounts) > 0 {
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(st.RetryCounts)) {
			parts = append(parts, fmt.Sprintf("%s=%d", s, st.RetryCounts[s]))
		}
		retries += "; re-entries " + strings.Join(parts, ", ")
	}
	row("Retries", "%s", retries)
	if st.StartedAt != nil {
		row("Started", "%s", st.StartedAt.UTC().Format(time.RFC3339))
		row("Running time", "%s", secondsSpan(executor.Elapsed(&st.RunState, runningUntil(&st.RunState, now))))
	}
	if st.LastResult != nil {
		row("Last verdict", "%s", st.LastResult.Verdict)
	}
	describeGit(row, st.Git)
	if h := st.ExitHook; h != nil {
		row("Exit hook", "%s", describeExitHook(h))
	}
	if u := st.Usage; u != nil {
		row("Usage", "%s", describeUsage(&u.UsageTotals))
		for _, name := range slices.Sorted(maps.Keys(u.States)) {
			t := u.States[name]
			row("  "+name, "%s", describeUsage(&t))
		}
	}
	describeBudget(row, loop)
	if a := st.Action; a != nil && a.Child != "" {
		row("Action", "state %s, iteration %d: sub-loop %s, child loop/%s", a.State, a.Iteration, a.Loop, a.Child)
	} else if a != nil {
		where := ""
		if a.Pod != "" {
			where = ", pod " + a.Pod
		}
		if st.Phase.IsFinished() {
			where += " (cut off: runs again if the run is continued)"
		}
		row("Action", "state %s, iteration %d%s", a.State, a.Iteration, where)
	} else {
		row("Action", "<none>")
	}
	if loop.Spec.Suspend {
		row("Suspended", "yes (spec.suspend)")
	}
}

// describeHistory writes what is kept of the run's past.
func describeHistory(row rowFunc, loop *v1alpha1.Loop) {
	st := loop.Status
	if f := loop.Spec.ResumeFrom; f != nil {
		row("Forked from", "loop/%s", f.Loop)
	}
	if ix := st.Checkpoints; ix != nil && ix.Latest != nil {
		row("Checkpoints", "%d (newest: iteration %d, state %s)", ix.Count(), ix.Latest.Iteration, ix.Latest.State)
	} else {
		row("Checkpoints", "none")
	}
	if el := st.EventLog; el != nil {
		row("Event log", "%d segment(s), %d events, %d bytes", el.LastSegment-el.FirstSegment+1, el.Count, el.Bytes)
	}
}

// eventLine renders an event on one line, as history prints it.
func eventLine(e executor.Event, when string) string {
	parts := make([]string, 0, len(e.Data))
	for _, k := range slices.Sorted(maps.Keys(e.Data)) {
		if ms, err := strconv.ParseFloat(fmt.Sprint(e.Data[k]), 64); err == nil && strings.HasSuffix(k, "_ms") && ms >= 0 {
			// A duration, as people read it.
			parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimSuffix(k, "_ms"), span(time.Duration(ms*float64(time.Millisecond)))))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%s", k, compact(e.Data[k])))
	}
	return printable(strings.TrimRight(fmt.Sprintf("%4d  %s  %-16s %s", e.Seq, when, e.Type, strings.Join(parts, " ")), " "))
}

// sinceStart is when an event happened for history: its UTC time of day,
// and how long after the run's first event.
func sinceStart(start time.Time) func(time.Time) string {
	return func(t time.Time) string {
		return fmt.Sprintf("%s %8s", t.UTC().Format("15:04:05"), "+"+span(t.Sub(start)))
	}
}

func newCheckpointsCommand(g *globals, k *kube) *cobra.Command {
	var local bool
	cmd := &cobra.Command{
		Use:   "checkpoints NAME",
		Short: "List a run's checkpoints, each checked against its SHA-256",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, cluster := k.localOrLoop(args[0], local)
			var rows []checkpointRow
			var err error
			if cluster {
				rows, err = k.clusterCheckpoints(cmd.Context(), name)
			} else {
				rows, err = localCheckpoints(g, name)
			}
			if err != nil {
				return err
			}
			return printCheckpoints(cmd.OutOrStdout(), rows)
		},
	}
	cmd.Flags().BoolVar(&local, "local", false, "the local run's checkpoints (under --loops-dir)")
	return cmd
}

// checkpointRow is a checkpoint as checkpoints lists it; err says why it
// does not check against its SHA-256.
type checkpointRow struct {
	iteration int32
	state     string
	taken     time.Time
	seq       int64
	err       error
}

// localCheckpoints are the checkpoints of the local run name.
func localCheckpoints(g *globals, name string) ([]checkpointRow, error) {
	store, err := localStore(g, name)
	if err != nil {
		return nil, err
	}
	good, bad, err := store.Checkpoints()
	if err != nil {
		return nil, err
	}
	var rows []checkpointRow
	for _, c := range good {
		rows = append(rows, checkpointRow{iteration: c.Iteration, state: c.State, taken: c.Time, seq: c.Seq})
	}
	for _, err := range bad {
		rows = append(rows, checkpointRow{err: err})
	}
	return rows, nil
}

// clusterCheckpoints are the checkpoints of the Loop name.
func (k *kube) clusterCheckpoints(ctx context.Context, name string) ([]checkpointRow, error) {
	loop, err := k.getLoop(ctx, name)
	if err != nil {
		return nil, err
	}
	kept, err := configmaps.Checkpoints(ctx, k.c, loop)
	if err != nil {
		return nil, err
	}
	rows := make([]checkpointRow, 0, len(kept))
	for _, c := range kept {
		rows = append(rows, checkpointRow{iteration: c.Ref.Iteration, state: c.Ref.State, taken: c.Ref.Time.Time, seq: c.Ref.Seq, err: c.Err})
	}
	return rows, nil
}

// printCheckpoints lists checkpoints, oldest first; one that does not
// check is a row of dashes and why.
func printCheckpoints(out io.Writer, rows []checkpointRow) error {
	t := newTable(out, "ITERATION", "NEXT STATE", "TAKEN", "SEQ", "CHECK")
	for _, r := range rows {
		if r.err != nil {
			t.row("-", "-", "-", "-", r.err)
			continue
		}
		t.row(r.iteration, r.state, r.taken.UTC().Format(time.RFC3339), r.seq, "ok")
	}
	return t.flush()
}

// describeGit adds what the run's workspace.git did: its clone and push.
func describeGit(row rowFunc, g *v1alpha1.GitStatus) {
	if g == nil {
		return
	}
	if g.Clone != nil {
		row("Clone", "%s", describeGitOp(g.Clone))
	}
	if g.Push != nil {
		row("Push", "%s", describeGitOp(g.Push))
	}
}

// describeGitOp says what a run's clone or push did: "Succeeded: 7e41999c
// to looprun/fix-1, Pod fix-1-push".
func describeGitOp(op *v1alpha1.GitOpStatus) string {
	s := string(op.Phase)
	switch {
	case op.Phase != v1alpha1.ExitHookSucceeded:
	case op.Branch != "" && !op.Pushed:
		s += ": nothing to push (" + short(op.Commit) + ")"
	case op.Branch != "":
		s += ": " + short(op.Commit) + " to " + op.Branch
	default:
		s += ": " + short(op.Commit)
	}
	if op.Pod != "" {
		s += ", Pod " + op.Pod
	}
	if op.Message != "" {
		s += ": " + lastLine(op.Message)
	}
	return printable(s)
}

// lastLine is the last line of s that is not blank (git's error ends what
// it printed).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// describeExitHook says what a run's exit hook did.
func describeExitHook(h *v1alpha1.ExitHookStatus) string {
	s := string(h.Phase)
	if h.ExitCode != nil && h.Phase != v1alpha1.ExitHookRunning {
		s += fmt.Sprintf(" (exit %d)", *h.ExitCode)
	}
	if h.Pod != "" {
		s += ", Pod " + h.Pod
	}
	if h.Message != "" {
		first, _, _ := strings.Cut(h.Message, "\n")
		s += ": " + first
	}
	return printable(s)
}

// runningUntil is when a Loop's running time stops counting: now while it
// runs, else when it last changed (it ended, or holds Paused on its budget
// or Suspended, and nothing of it runs meanwhile).
func runningUntil(run *v1alpha1.RunState, now time.Time) time.Time {
	switch {
	case run.UpdatedAt == nil:
		return now
	case run.Phase.IsFinished(), run.Phase == v1alpha1.PhasePaused, run.Phase == v1alpha1.PhaseSuspended:
		return run.UpdatedAt.Time
	}
	return now
}
