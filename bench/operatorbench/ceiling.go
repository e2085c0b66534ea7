package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner/local"
)

// step is what the API server held for a Loop after one transition: the
// status and the event-log segment.
type step struct {
	status      v1alpha1.LoopStatus
	events      string
	checkpoints string
}

// replayPlan rebuilds, from Loops the controller finished, the writes it
// made for each transition: the status of each step (the checkpoint taken
// at that step holds its run state) and the segment as it stood then.
func replayPlan(ctx context.Context, c client.Client, ns string) ([]v1alpha1.Loop, [][]step, error) {
	var list v1alpha1.LoopList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	plans := make([][]step, 0, len(list.Items))
	for i := range list.Items {
		loop := &list.Items[i]
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: configmaps.SegmentName(loop.Name, 1)}, cm); err != nil {
			return nil, nil, err
		}
		cps, bad := history.Parse([]byte(cm.Data[configmaps.CheckpointsKey]))
		if bad > 0 || len(cps) == 0 {
			return nil, nil, fmt.Errorf("%s: no readable checkpoints to replay", loop.Name)
		}
		events := strings.SplitAfter(cm.Data[configmaps.EventsKey], "\n")
		cpLines := strings.SplitAfter(cm.Data[configmaps.CheckpointsKey], "\n")
		plan := make([]step, 0, len(cps))
		for j, cp := range cps {
			run, err := cp.RunState()
			if err != nil {
				return nil, nil, err
			}
			st := *loop.Status.DeepCopy()
			st.RunState = *run
			ref := cp.Ref(1)
			st.Checkpoints = &v1alpha1.CheckpointIndex{Latest: &ref,
				Segments: []v1alpha1.CheckpointSegment{{Segment: 1, Kept: int32(j + 1), MinIteration: cps[0].Iteration, MaxIteration: cp.Iteration}}}
			if st.EventLog != nil {
				st.EventLog.LastSeq, st.EventLog.Count = cp.Seq, cp.Seq
			}
			plan = append(plan, step{
				status:      st,
				events:      strings.Join(events[:min(int(cp.Seq), len(events))], ""),
				checkpoints: strings.Join(cpLines[:j+1], ""),
			})
		}
		plans = append(plans, plan)
	}
	return list.Items, plans, nil
}

// actionRunner runs the replayed actions as the operator's local runner does.
var actionRunner = &local.Runner{Dir: os.TempDir()}

// replayMode is what a replay does per transition.
type replayMode int

const (
	// statusOnly: the status patch alone.
	statusOnly replayMode = iota
	// writes: the status patch and the event-log segment write (the ceiling).
	writes
	// writesAndActions: the writes, and the transition's action run as the
	// operator's local runner runs it (`true` under bash).
	writesAndActions
)

// replay makes the API writes the design needs per transition, one status
// patch of the Loop (made as the operator makes it) and one event-log
// segment write, with no controller (c writes Loops, cms ConfigMaps; see
// replayMode for what else), for the Loops and steps of a plan, from
// `workers` goroutines like the controller's. With writes, its rate is the
// most any controller keeping to the design can reach against this API
// server on this machine. The Loops carry the importing annotation, so the
// running operator leaves them be.
func replay(ctx context.Context, c, cms client.Client, loops []v1alpha1.Loop, plans [][]step, workers int, mode replayMode) (time.Duration, int, string, error) {
	if mode == writesAndActions {
		return replayWithActions(ctx, c, cms, loops, plans, workers)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "replay-"}}
	if err := c.Create(ctx, ns); err != nil {
		return 0, 0, "", err
	}
	work := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := replayLoop(ctx, c, cms, ns.Name, &loops[i], plans[i], mode); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	total := 0
	for i := range loops {
		select {
		case work <- i:
			total += len(plans[i])
		case err := <-errs:
			close(work)
			wg.Wait()
			return 0, 0, "", err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, 0, "", err
	default:
	}
	return time.Since(start), total, ns.Name, nil
}

// replayer replays the writes of one Loop, a step at a time.
type replayer struct {
	loop *v1alpha1.Loop
	cm   *corev1.ConfigMap
	plan []step
	next int
}

// create creates the Loop the steps are written to, in namespace ns.
func newReplayer(ctx context.Context, c client.Client, ns string, src *v1alpha1.Loop, plan []step) (*replayer, error) {
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: src.Name,
		Annotations: map[string]string{v1alpha1.ImportingAnnotation: "replay"},
	}, Spec: *src.Spec.DeepCopy()}
	if err := c.Create(ctx, loop); err != nil {
		return nil, err
	}
	return &replayer{loop: loop, plan: plan}, nil
}

// done reports whether every step was written.
func (r *replayer) done() bool { return r.next >= len(r.plan) }

// write makes the next step's writes: the status patch, and (unless
// statusOnly) the segment's.
func (r *replayer) write(ctx context.Context, c, cms client.Client, mode replayMode) error {
	s := r.plan[r.next]
	r.next++
	before := r.loop.DeepCopy()
	r.loop.Status = *s.status.DeepCopy()
	now := metav1.Now()
	r.loop.Status.UpdatedAt = &now
	if err := controllers.PatchStatus(ctx, c, before, r.loop); err != nil {
		return err
	}
	if mode == statusOnly {
		return nil
	}
	if r.cm != nil {
		r.cm.Data[configmaps.EventsKey], r.cm.Data[configmaps.CheckpointsKey] = s.events, s.checkpoints
		return cms.Update(ctx, r.cm)
	}
	r.cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: r.loop.Namespace, Name: configmaps.SegmentName(r.loop.Name, 1),
		Labels: map[string]string{v1alpha1.LabelLoop: r.loop.Name, v1alpha1.LabelEventLog: "true"},
	}, Data: map[string]string{configmaps.EventsKey: s.events, configmaps.CheckpointsKey: s.checkpoints}}
	if err := controllerutil.SetControllerReference(r.loop, r.cm, c.Scheme()); err != nil {
		return err
	}
	return cms.Create(ctx, r.cm)
}

func replayLoop(ctx context.Context, c, cms client.Client, ns string, src *v1alpha1.Loop, plan []step, mode replayMode) error {
	r, err := newReplayer(ctx, c, ns, src, plan)
	if err != nil {
		return err
	}
	for !r.done() {
		if err := r.write(ctx, c, cms, mode); err != nil {
			return err
		}
	}
	return nil
}

// replayWithActions is replay's writesAndActions: as in the operator, a
// Loop's action runs in the background, and its end puts the Loop in the
// queue of `workers` goroutines that make the step's writes and start the
// next action. Only the controller is missing.
func replayWithActions(ctx context.Context, c, cms client.Client, loops []v1alpha1.Loop, plans [][]step, workers int) (time.Duration, int, string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "replay-"}}
	if err := c.Create(ctx, ns); err != nil {
		return 0, 0, "", err
	}
	ready := make(chan int, len(loops))
	var mu sync.Mutex
	var failed []error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, err)
	}
	act := func(i, iteration int) {
		go func() {
			if res := actionRunner.Run(ctx, &executor.Action{State: "spin", Iteration: int32(iteration), Command: "true"}); res.ExitCode != 0 { //nolint:gosec // a few thousand
				fail(fmt.Errorf("the replayed action failed: %+v", res))
			}
			ready <- i
		}()
	}
	reps := make([]*replayer, len(loops))
	var pending, wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := range ready {
				err := func() (err error) {
					if reps[i] == nil {
						if reps[i], err = newReplayer(ctx, c, ns.Name, &loops[i], plans[i]); err != nil {
							return err
						}
					}
					return reps[i].write(ctx, c, cms, writes)
				}()
				if err != nil || reps[i].done() {
					if err != nil {
						fail(err)
					}
					pending.Done()
					continue
				}
				act(i, reps[i].next+1)
			}
		})
	}
	total := 0
	for i := range loops {
		pending.Add(1)
		total += len(plans[i])
		act(i, 1)
	}
	pending.Wait()
	elapsed := time.Since(start)
	close(ready)
	wg.Wait()
	return elapsed, total, ns.Name, errors.Join(failed...)
}
