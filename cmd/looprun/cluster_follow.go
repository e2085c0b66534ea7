package main

// looprun watch and looprun logs: a Loop's steps and its action Pods'
// logs, followed as they come.

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
)

func newWatchCommand(k *kube) *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Follow a Loop as looprun run shows a local run, until it ends; exit code as for run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			loop, err := k.getLoop(cmd.Context(), name)
			if err != nil {
				return err
			}
			w := &watcher{k: k, out: cmd.OutOrStdout(), verbose: verbose}
			for !w.show(cmd.Context(), loop) {
				if loop, err = k.nextVersion(cmd.Context(), loop); err != nil {
					return err
				}
			}
			return outcome(&loop.Status.RunState, loop.Name, false, nil)
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show whole actions")
	return cmd
}

// watcher prints a Loop's progress from its event log, as looprun run
// prints a local run's, and what its conditions say between events (a
// wait for an approval, a rate limit, a paused budget).
type watcher struct {
	k       *kube
	out     io.Writer
	verbose bool
	p       *progress
	seq     int64
	// segment is the event-log segment the last read ended in.
	segment int32
	said    string
	// hook is the phase of the exit hook last shown.
	hook v1alpha1.ExitHookPhase
}

// show prints what is new of the Loop and reports whether it has ended.
func (w *watcher) show(ctx context.Context, l *v1alpha1.Loop) bool {
	if w.p == nil {
		ctxValues, _ := executor.DecodeContext(l.Spec.Context)
		w.p = newProgress(w.out, terminalStyle(w.out), w.verbose, header{loop: l.Name, spec: &l.Spec, context: ctxValues}, nil)
	}
	printed := w.newEvents(ctx, l)
	if a := l.Status.Action; a != nil && a.Pod != "" && !l.Status.Phase.IsFinished() {
		pod := types.NamespacedName{Namespace: l.Namespace, Name: a.Pod}
		step, since := a.Step, a.StartedAt
		w.p.streamFor(func(lines *lineCap) outputStream { return w.k.followPod(pod, step, since, lines) })
	}
	say := string(l.Status.Phase)
	if c := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ReadyCondition); c != nil && c.Message != "" {
		say += ": " + c.Message
	}
	if !printed && say != w.said && say != "" && !l.Status.Phase.IsFinished() && l.Status.Phase != v1alpha1.PhasePaused {
		w.p.println("       " + w.p.style.dim("· "+printable(say)))
	}
	w.said = say
	if h := l.Status.ExitHook; h != nil && h.Phase != w.hook {
		w.p.exitHook(h)
		w.hook = h.Phase
	}
	return watchEnds(l)
}

// newEvents prints the events of the Loop's log not printed yet, and
// reports whether there were any.
func (w *watcher) newEvents(ctx context.Context, l *v1alpha1.Loop) bool {
	el := l.Status.EventLog
	if el == nil || l.Status.LastSeq <= w.seq {
		return false
	}
	// Only the segments not read to their end yet: a long run's log is
	// not read again at every step.
	unread, from := *l, *el
	from.FirstSegment = max(from.FirstSegment, w.segment)
	unread.Status.EventLog = &from
	evs, err := configmaps.Read(ctx, w.k.c, &unread)
	if err != nil {
		return false
	}
	printed := false
	for _, e := range evs {
		if e.Seq > w.seq {
			w.p.print([]executor.Event{e})
			w.seq, printed = e.Seq, true
		}
	}
	w.segment = from.LastSegment
	return printed
}

// watchEnds reports whether a watch of the Loop ends: as looprun run
// ends, when the run pauses on its budget (exit 3, and how to go on) or
// has finished, its exit hook too.
func watchEnds(l *v1alpha1.Loop) bool {
	if l.Status.ObservedGeneration != l.Generation {
		return false
	}
	if l.Status.Phase == v1alpha1.PhasePaused {
		return true
	}
	// A run that has ended still has its push and exit hook to run when
	// its spec has them: the operator writes the end first, then runs them.
	return l.Status.Phase.IsFinished() &&
		!executor.NeedsPush(&l.Spec, &l.Status.RunState) && !executor.NeedsExitHook(&l.Spec, &l.Status.RunState)
}

// nextVersion waits for the Loop to change and returns the new version.
func (k *kube) nextVersion(ctx context.Context, loop *v1alpha1.Loop) (*v1alpha1.Loop, error) {
	w, err := k.c.Watch(ctx, &v1alpha1.LoopList{}, client.InNamespace(loop.Namespace),
		client.MatchingFields{"metadata.name": loop.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: loop.ResourceVersion}})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Modified, watch.Added:
			if l, ok := ev.Object.(*v1alpha1.Loop); ok && l.ResourceVersion != loop.ResourceVersion {
				return l, nil
			}
		case watch.Deleted:
			return nil, &exitError{code: 1, msg: fmt.Sprintf("loop %s was deleted", loop.Name)}
		case watch.Error:
			// Too old a version, say: read it again.
			return k.getLoop(ctx, loop.Name)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return k.getLoop(ctx, loop.Name) // the watch ended: read it again
}

func newLogsCommand(k *kube) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the logs of a Loop's action Pods, step by step, in order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			return k.logs(cmd.Context(), cmd.OutOrStdout(), name, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new steps' logs until the loop ends")
	return cmd
}

type stepPod struct {
	pod              *corev1.Pod
	iteration, retry int
}

// stepPods lists a Loop's action Pods in the order they ran, and the
// list's resourceVersion (to watch for what comes after).
func (k *kube) stepPods(ctx context.Context, loop *v1alpha1.Loop) ([]stepPod, string, error) {
	list := &corev1.PodList{}
	if err := k.c.List(ctx, list, client.InNamespace(loop.Namespace), client.MatchingLabels{v1alpha1.LabelLoop: v1alpha1.LabelValue(loop.Name)}); err != nil {
		return nil, "", err
	}
	var out []stepPod
	for i := range list.Items {
		p := &list.Items[i]
		if !metav1.IsControlledBy(p, loop) {
			continue
		}
		it, _ := strconv.Atoi(p.Labels[v1alpha1.LabelIteration])
		retry, _ := strconv.Atoi(p.Labels[v1alpha1.LabelRetry])
		out = append(out, stepPod{p, it, retry})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.pod.CreationTimestamp.Equal(&b.pod.CreationTimestamp) {
			return a.pod.CreationTimestamp.Before(&b.pod.CreationTimestamp)
		}
		if a.iteration != b.iteration {
			return a.iteration < b.iteration
		}
		return a.retry < b.retry
	})
	return out, list.ResourceVersion, nil
}

func (k *kube) logs(ctx context.Context, out io.Writer, name string, follow bool) error {
	shown := map[string]bool{}
	for {
		loop, err := k.getLoop(ctx, name)
		if err != nil {
			return err
		}
		progressed, podsVersion, err := k.showNewLogs(ctx, out, loop, shown, follow)
		if err != nil {
			return err
		}
		if !follow {
			if len(shown) == 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("loop %s has no finished action Pods (actions may run locally, or history.keepPods pruned them)", name)}
			}
			return nil
		}
		if loop.Status.Phase.IsFinished() && !progressed {
			return nil
		}
		if !progressed {
			if err := k.waitForChange(ctx, loop, podsVersion); err != nil {
				return err
			}
		}
	}
}

// waitForChange returns once the Loop, or one of its Pods, changed after
// the versions read (a watch on each, no polling), or ctx ended.
func (k *kube) waitForChange(ctx context.Context, loop *v1alpha1.Loop, podsVersion string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loops, err := k.c.Watch(ctx, &v1alpha1.LoopList{}, client.InNamespace(loop.Namespace),
		client.MatchingFields{"metadata.name": loop.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: loop.ResourceVersion}})
	if err != nil {
		return err
	}
	defer loops.Stop()
	pods, err := k.c.Watch(ctx, &corev1.PodList{}, client.InNamespace(loop.Namespace),
		client.MatchingLabels{v1alpha1.LabelLoop: v1alpha1.LabelValue(loop.Name)}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: podsVersion}})
	if err != nil {
		return err
	}
	defer pods.Stop()
	select {
	case <-loops.ResultChan():
	case <-pods.ResultChan():
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// showNewLogs prints the logs of the Loop's Pods not shown yet, in order,
// up to the first that has not started; with follow, a running one is
// followed to its end.
func (k *kube) showNewLogs(ctx context.Context, out io.Writer, loop *v1alpha1.Loop, shown map[string]bool, follow bool) (bool, string, error) {
	pods, version, err := k.stepPods(ctx, loop)
	if err != nil {
		return false, "", err
	}
	progressed := false
	for _, sp := range pods {
		if sp.pod.Labels[v1alpha1.LabelRunner] != "" {
			// A warm runner's: the steps in its log that ended.
			n, err := k.runnerSteps(ctx, out, sp.pod, shown)
			if err != nil {
				fmt.Fprintf(out, "(no log of runner Pod %s: %v)\n", sp.pod.Name, err)
			}
			progressed = progressed || n > 0
			continue
		}
		if shown[sp.pod.Name] {
			continue
		}
		phase := sp.pod.Status.Phase
		running := phase != corev1.PodSucceeded && phase != corev1.PodFailed
		if running && (!follow || phase == corev1.PodPending) {
			break // not finished (or not started): later
		}
		shown[sp.pod.Name], progressed = true, true
		state := v1alpha1.StateOf(sp.pod.Labels, sp.pod.Annotations)
		fmt.Fprintf(out, "==> iteration %d, state %s (pod %s) <==\n", sp.iteration, state, sp.pod.Name)
		if err := k.podLog(ctx, out, sp.pod, follow); err != nil {
			fmt.Fprintf(out, "(no log: %v)\n", err)
		}
	}
	return progressed, version, nil
}

// runnerSteps prints the steps of a warm runner Pod's log that ended and
// were not shown yet, each as a step Pod's log is shown.
func (k *kube) runnerSteps(ctx context.Context, out io.Writer, p *corev1.Pod, shown map[string]bool) (int, error) {
	rc, err := k.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: v1alpha1.ActionContainerName}).Stream(ctx)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n := 0
	for _, s := range handoff.ParseLog(rc) {
		key := p.Name + "/" + s.ID
		if shown[key] || !s.Ended {
			continue
		}
		shown[key] = true
		n++
		fmt.Fprintf(out, "==> iteration %d, state %s (pod %s, step %s) <==\n%s", s.Iteration, s.State, p.Name, s.ID, s.Output)
	}
	return n, nil
}

// podFollower shows an action Pod's log as it comes.
type podFollower struct {
	cancel context.CancelFunc
	done   chan struct{}
	lines  *lineCap
	shown  atomic.Bool
}

// followPod follows the log of an action's Pod into lines, from when its
// container starts. A warm step (step set) is followed in its runner
// Pod's log from when it started, its frame's lines only, to its frame's
// end.
func (k *kube) followPod(pod types.NamespacedName, step string, since *metav1.Time, lines *lineCap) *podFollower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &podFollower{cancel: cancel, done: make(chan struct{}), lines: lines}
	opts := &corev1.PodLogOptions{Container: v1alpha1.ActionContainerName, Follow: true}
	var filter *handoff.StepFilter
	if step != "" {
		filter = &handoff.StepFilter{ID: step, Emit: lines.write}
		if since != nil {
			// Status times are whole seconds: a little before.
			opts.SinceTime = &metav1.Time{Time: since.Add(-2 * time.Second)}
		}
	}
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			rc, err := k.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(ctx)
			if err != nil { // not started yet
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			f.shown.Store(true)
			buf := make([]byte, 32<<10)
			for {
				n, err := rc.Read(buf)
				if n > 0 && filter != nil {
					_, _ = filter.Write(buf[:n])
				} else if n > 0 {
					lines.write(string(buf[:n]))
				}
				if err != nil || filter != nil && filter.Done() {
					break
				}
			}
			_ = rc.Close()
			return
		}
	}()
	return f
}

// stop waits a moment for the log's end (the container has ended), then
// stops following.
func (f *podFollower) stop() bool {
	select {
	case <-f.done:
	case <-time.After(2 * time.Second):
		f.cancel()
		<-f.done
	}
	f.cancel()
	f.lines.close()
	return f.shown.Load()
}

func (k *kube) podLog(ctx context.Context, out io.Writer, p *corev1.Pod, follow bool) error {
	rc, err := k.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: v1alpha1.ActionContainerName, Follow: follow}).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(out, rc)
	return err
}
