package main

import (
	"context"
	"fmt"
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
	"github.com/looprun/looprun/internal/history"
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

// replay makes the API writes the design needs per transition, one status
// patch of the Loop (made as the operator makes it) and one event-log
// segment write, with no controller and
// no actions (c writes Loops, cms ConfigMaps; the segment writes only
// withLog), for the Loops and steps of a plan, from `workers` goroutines
// like the controller's. Its rate is the most any controller keeping to
// the design can reach against this API server on this machine. The Loops
// carry the importing annotation, so the running operator leaves them be.
func replay(ctx context.Context, c, cms client.Client, loops []v1alpha1.Loop, plans [][]step, workers int, withLog bool) (time.Duration, int, string, error) {
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
				if err := replayLoop(ctx, c, cms, ns.Name, &loops[i], plans[i], withLog); err != nil {
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

func replayLoop(ctx context.Context, c, cms client.Client, ns string, src *v1alpha1.Loop, plan []step, withLog bool) error {
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: src.Name,
		Annotations: map[string]string{v1alpha1.ImportingAnnotation: "replay"},
	}, Spec: *src.Spec.DeepCopy()}
	if err := c.Create(ctx, loop); err != nil {
		return err
	}
	var cm *corev1.ConfigMap
	for _, s := range plan {
		before := loop.DeepCopy()
		loop.Status = *s.status.DeepCopy()
		now := metav1.Now()
		loop.Status.UpdatedAt = &now
		if err := controllers.PatchStatus(ctx, c, before, loop); err != nil {
			return err
		}
		if !withLog {
			continue
		}
		if cm == nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: configmaps.SegmentName(loop.Name, 1),
				Labels: map[string]string{v1alpha1.LabelLoop: loop.Name, v1alpha1.LabelEventLog: "true"},
			}, Data: map[string]string{configmaps.EventsKey: s.events, configmaps.CheckpointsKey: s.checkpoints}}
			if err := controllerutil.SetControllerReference(loop, cm, c.Scheme()); err != nil {
				return err
			}
			if err := cms.Create(ctx, cm); err != nil {
				return err
			}
			continue
		}
		cm.Data[configmaps.EventsKey], cm.Data[configmaps.CheckpointsKey] = s.events, s.checkpoints
		if err := cms.Update(ctx, cm); err != nil {
			return err
		}
	}
	return nil
}
