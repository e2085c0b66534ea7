// Command nodebench measures, on a real cluster with the operator installed
// (the end-to-end cluster of hack/e2e), what each step of a Loop costs: the
// wall time of each shell step (the Loop's iteration seen moving on, from
// a watch of the Loop), p50 and p99 over one Loop of N steps, and the Pods
// the run made; in Pod mode also the time the controller adds (the
// previous action Pod seen finished → the next Pod seen created) next to
// the kubelet's own Pod start (created → its action container seen
// running); in Warm mode the hand-off's own cost, timed directly against
// the run's runner Pod: handing a step over (one signed request) and a
// `true` step handed over and waited for, less what the wrapper measured
// of the command itself.
//
//	hack/e2e/cluster.sh up && helm install ... (see bench/RESULTS.md)
//	KUBECONFIG=bin/e2e/admin.kubeconfig go run ./bench/nodebench -steps 100 -mode pod
//	KUBECONFIG=bin/e2e/admin.kubeconfig go run ./bench/nodebench -steps 100 -mode warm
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/bench/internal/timing"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
	"github.com/looprun/looprun/test/fixture"
)

func main() {
	steps := flag.Int("steps", 100, "steps of the measured Loop")
	image := flag.String("image", "", "image of the actions (default: the operator's runner image)")
	mode := flag.String("mode", "pod", "how the steps run: pod (a Pod per step) or warm (spec.runner.mode: Warm)")
	handoffs := flag.Int("handoffs", 200, "direct hand-offs timed in warm mode")
	flag.Parse()
	if *mode != "pod" && *mode != "warm" {
		fmt.Fprintln(os.Stderr, "nodebench: -mode is pod or warm")
		os.Exit(2)
	}
	if err := run(*steps, *image, *mode == "warm", *handoffs); err != nil {
		fmt.Fprintln(os.Stderr, "nodebench:", err)
		os.Exit(1)
	}
}

// seen is when the watch first saw a Pod in each of its states.
type seen struct {
	created, running, finished time.Time
}

func run(steps int, image string, warm bool, handoffs int) error {
	if steps < 2 || steps > 1000 {
		return fmt.Errorf("-steps %d: between 2 and 1000", steps)
	}
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: fixture.Scheme()})
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
	spec.Runner = &v1alpha1.RunnerSpec{Image: image}
	if warm {
		// The last step holds the run (and its runner) while the
		// hand-off is timed.
		spec.Runner.Mode = v1alpha1.RunnerModeWarm
		spec.States["step"] = v1alpha1.State{Action: fmt.Sprintf("test ${state.iteration} -ge %d", steps), OnSuccess: "hold", OnFailure: "step"}
		spec.States["hold"] = v1alpha1.State{Action: "sleep 600", Next: "done"}
	}
	// Every Pod stays until the end, so the watch sees each one whole.
	spec.History = &v1alpha1.HistorySpec{KeepPods: ptr.To(n + 5)}
	start := time.Now()
	if err := c.Create(ctx, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "steps"}, Spec: spec}); err != nil {
		return err
	}
	type followed struct {
		pods  map[string]*seen
		order []string
		err   error
	}
	podsSeen := make(chan followed, 1)
	if !warm {
		go func() {
			p, o, err := follow(w, steps, time.Duration(steps)*10*time.Second+time.Minute)
			podsSeen <- followed{p, o, err}
		}()
	}
	walls, err := stepWalls(ctx, c, ns.Name, steps, time.Duration(steps)*10*time.Second+time.Minute)
	if err != nil {
		return err
	}
	total := time.Since(start)
	made, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelLoop + "=steps"})
	if err != nil {
		return err
	}
	mode := "pod"
	if warm {
		mode = "warm"
	}
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
	fmt.Printf("mode %s: %d steps in %s; %d Pods made by the run\n", mode, steps, total.Round(time.Millisecond), len(made.Items))
	fmt.Printf("shell step wall (iteration seen -> next iteration seen): p50 %s  p99 %s  (n=%d)\n",
		ms(timing.Percentile(walls, 50)), ms(timing.Percentile(walls, 99)), len(walls))
	if warm {
		if err := handoffCost(ctx, c, ns.Name, handoffs); err != nil {
			return err
		}
		return execCost(ctx, cfg, cs, ns.Name, handoffs)
	}
	f := <-podsSeen
	if f.err != nil {
		return f.err
	}
	report(f.pods, f.order, total)
	return nil
}

// stepWalls follows the Loop's status (polling the API server's watch
// through the client's cache-free reads would miss nothing: every status
// write is a watch event) and returns the time between consecutive
// iterations, until the Loop reached iteration steps.
func stepWalls(ctx context.Context, c client.WithWatch, ns string, steps int, limit time.Duration) ([]time.Duration, error) {
	w, err := c.Watch(ctx, &v1alpha1.LoopList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	deadline := time.After(limit)
	var walls []time.Duration
	var last int32
	var lastAt time.Time
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch ended")
			}
			l, isLoop := ev.Object.(*v1alpha1.Loop)
			if !isLoop {
				continue
			}
			now := time.Now()
			it := l.Status.Iteration
			if it > last {
				if last >= 1 {
					// Several iterations in one write share its time.
					per := now.Sub(lastAt) / time.Duration(it-last)
					for range it - last {
						walls = append(walls, per)
					}
				}
				last, lastAt = it, now
			}
			if int(last) >= steps+1 || l.Status.Phase.IsFinished() {
				return walls, nil
			}
		case <-deadline:
			return nil, fmt.Errorf("the Loop reached iteration %d in %s", last, limit)
		}
	}
}

// execCost times the other way to reach the runner Pod: `true` run through
// the API server's exec (the kubelet's streaming), from an in-process
// client, as an operator would use it.
func execCost(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns string, n int) error {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRunner + "=warm"})
	if err != nil {
		return err
	}
	var name string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			name = p.Name
		}
	}
	if name == "" {
		return fmt.Errorf("no running runner Pod")
	}
	var took []time.Duration
	for range n {
		req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "action", Command: []string{"true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		t0 := time.Now()
		exec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return err
		}
		var out, errOut bytes.Buffer
		if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
			return fmt.Errorf("exec: %w: %s", err, errOut.String())
		}
		took = append(took, time.Since(t0))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }
	fmt.Printf("`true` through the API server's exec (in-process client):  p50 %s  p99 %s  (n=%d)\n", ms(timing.Percentile(took, 50)), ms(timing.Percentile(took, 99)), n)
	return nil
}

// handoffCost times hand-offs straight to the run's runner Pod, with the
// Loop's runner key (read from its Secret, as the cluster's admin).
func handoffCost(ctx context.Context, c client.Client, ns string, n int) error {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelRunner: "warm"}); err != nil {
		return err
	}
	var runner *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodRunning {
			runner = &pods.Items[i]
		}
	}
	if runner == nil {
		return fmt.Errorf("no running runner Pod")
	}
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "steps-runner"}, &secret); err != nil {
		return err
	}
	key, err := handoff.ParseKey(string(secret.Data["key"]))
	if err != nil {
		return err
	}
	hc := &handoff.Client{Addr: net.JoinHostPort(runner.Status.PodIP, strconv.Itoa(handoff.Port)), Key: key}
	var hand, whole, command []time.Duration
	for i := range n {
		id := handoff.StepID("bench", int32(i), 0)
		t0 := time.Now()
		st, err := hc.Hand(ctx, id, handoff.Step{State: "bench", Iteration: int32(i), Args: []string{"--timeout", "1m", "--", "true"}})
		if err != nil {
			return fmt.Errorf("hand-off %d: %w", i, err)
		}
		hand = append(hand, time.Since(t0))
		for st.Phase == handoff.Running {
			if st, err = hc.Wait(ctx, id, 10*time.Second); err != nil {
				return err
			}
		}
		whole = append(whole, time.Since(t0))
		var res struct {
			DurationMs int64 `json:"durationMs"`
		}
		_ = json.Unmarshal(st.Result, &res)
		command = append(command, time.Duration(res.DurationMs)*time.Millisecond)
		_ = hc.Collected(ctx, id)
	}
	for _, d := range [][]time.Duration{hand, whole, command} {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }
	fmt.Printf("hand-off (signed PUT answered, from the node):          p50 %s  p99 %s  (n=%d)\n", ms(timing.Percentile(hand, 50)), ms(timing.Percentile(hand, 99)), n)
	fmt.Printf("`true` handed over and its end read (wrapper included): p50 %s  p99 %s\n", ms(timing.Percentile(whole, 50)), ms(timing.Percentile(whole, 99)))
	fmt.Printf("of which the wrapper's own measure of the command:      p50 %s  p99 %s\n", ms(timing.Percentile(command, 50)), ms(timing.Percentile(command, 99)))
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
