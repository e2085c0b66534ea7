// Command nodebench measures, on a real cluster with the operator installed
// (the end-to-end cluster of hack/e2e), what each step of a Loop costs: the
// time the controller adds (the previous action Pod seen finished → the
// next Pod seen created) next to the kubelet's own Pod start (created →
// its action container seen running), p50 and p99 over one Loop of N steps,
// all from one watch of the Loop's Pods, in one run.
//
//	hack/e2e/cluster.sh up && helm install ... (see bench/RESULTS.md)
//	KUBECONFIG=bin/e2e/admin.kubeconfig go run ./bench/nodebench -steps 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/bench/internal/timing"
	"github.com/looprun/looprun/test/fixture"
)

func main() {
	steps := flag.Int("steps", 100, "steps of the measured Loop")
	image := flag.String("image", "", "image of the actions (default: the operator's runner image)")
	flag.Parse()
	if err := run(*steps, *image); err != nil {
		fmt.Fprintln(os.Stderr, "nodebench:", err)
		os.Exit(1)
	}
}

// seen is when the watch first saw a Pod in each of its states.
type seen struct {
	created, running, finished time.Time
}

func run(steps int, image string) error {
	if steps < 2 || steps > 1000 {
		return fmt.Errorf("-steps %d: between 2 and 1000", steps)
	}
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: fixture.Scheme()})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "nodebench-"}}
	if err := c.Create(ctx, ns); err != nil {
		return err
	}
	defer func() { _ = c.Delete(context.Background(), ns) }()

	w, err := cs.CoreV1().Pods(ns.Name).Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelLoop + "=steps"})
	if err != nil {
		return err
	}
	defer w.Stop()

	n := int32(steps)
	spec := v1alpha1.LoopSpec{Initial: "step", MaxIterations: ptr.To(n + 5), States: map[string]v1alpha1.State{
		"step": {Action: fmt.Sprintf("test ${state.iteration} -ge %d", steps), OnSuccess: "done", OnFailure: "step"},
		"done": {Terminal: true},
	}}
	if image != "" {
		spec.Runner = &v1alpha1.RunnerSpec{Image: image}
	}
	// Every Pod stays until the end, so the watch sees each one whole.
	spec.History = &v1alpha1.HistorySpec{KeepPods: ptr.To(n + 5)}
	start := time.Now()
	if err := c.Create(ctx, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "steps"}, Spec: spec}); err != nil {
		return err
	}
	pods, order, err := follow(w, steps, time.Duration(steps)*10*time.Second+time.Minute)
	if err != nil {
		return err
	}
	report(pods, order, time.Since(start))
	return nil
}

// follow records when the watch first saw each Pod created, running and
// finished, until steps Pods finished.
func follow(w watch.Interface, steps int, limit time.Duration) (map[string]*seen, []string, error) {
	pods := map[string]*seen{}
	var order []string
	deadline := time.After(limit)
	for finished := 0; finished < steps; {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.ResultChan():
			if !ok {
				return nil, nil, fmt.Errorf("the watch ended")
			}
		case <-deadline:
			return nil, nil, fmt.Errorf("only %d Pods in %s", len(order), limit)
		}
		p, isPod := ev.Object.(*corev1.Pod)
		if !isPod || ev.Type == watch.Deleted {
			continue
		}
		now := time.Now()
		s := pods[p.Name]
		if s == nil {
			s = &seen{created: now}
			pods[p.Name] = s
			order = append(order, p.Name)
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name != "action" {
				continue
			}
			if (st.State.Running != nil || st.State.Terminated != nil) && s.running.IsZero() {
				s.running = now
			}
			if st.State.Terminated != nil && s.finished.IsZero() {
				s.finished = now
				finished++
			}
		}
	}
	return pods, order, nil
}

func report(pods map[string]*seen, order []string, total time.Duration) {
	var controller, kubelet []time.Duration
	for i, name := range order {
		s := pods[name]
		if !s.running.IsZero() {
			kubelet = append(kubelet, s.running.Sub(s.created))
		}
		if i > 0 && !pods[order[i-1]].finished.IsZero() {
			controller = append(controller, s.created.Sub(pods[order[i-1]].finished))
		}
	}
	sort.Slice(controller, func(i, j int) bool { return controller[i] < controller[j] })
	sort.Slice(kubelet, func(i, j int) bool { return kubelet[i] < kubelet[j] })
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Printf("steps: %d Pods in %s (%s per step)\n", len(order), ms(total), ms(total/time.Duration(len(order))))
	fmt.Printf("controller (previous Pod finished -> next Pod created): p50 %s  p99 %s  (n=%d)\n",
		ms(timing.Percentile(controller, 50)), ms(timing.Percentile(controller, 99)), len(controller))
	fmt.Printf("kubelet (Pod created -> action running):                p50 %s  p99 %s  (n=%d)\n",
		ms(timing.Percentile(kubelet, 50)), ms(timing.Percentile(kubelet, 99)), len(kubelet))
}
