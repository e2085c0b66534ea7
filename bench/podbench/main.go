// Command podbench measures the controller's overhead per step when actions
// run as Pods, against a real kube-apiserver and etcd (the envtest binaries)
// with the test kubelet running the Pods: from the moment the kubelet writes
// a finished Pod's status to the moment the next Pod is created (status
// write, watch, reconcile, result read, create), p50 and p99 over one Loop
// of N steps. The same Loop then runs with local actions in the same
// process, for the ratio.
//
// Run it with bench/run.sh (it sets KUBEBUILDER_ASSETS).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/bench/internal/timing"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/fixture"
	"github.com/looprun/looprun/test/kubelet"
)

func main() {
	steps := flag.Int("steps", 200, "steps of the measured Loop")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	if err := run(*steps); err != nil {
		fmt.Fprintln(os.Stderr, "podbench:", err)
		os.Exit(1)
	}
}

// timedPods notes when each Pod step starts.
type timedPods struct {
	runner.Runner
	g *timing.Gaps
}

func (t timedPods) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	t.g.Start(loop.Namespace + "/" + loop.Name)
	return t.Runner.Start(ctx, loop, a)
}

func run(steps int) error {
	cfg, c, stop, err := fixture.StartEnv(true)
	if err != nil {
		return err
	}
	defer stop()
	scheme := c.Scheme()
	dir, err := os.MkdirTemp("", "podbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	podGaps := &timing.Gaps{}
	k, err := fixture.StartKubelet(cfg, &kubelet.Kubelet{OnFinish: func(p *corev1.Pod) {
		podGaps.End(p.Namespace+"/"+p.OwnerReferences[0].Name, time.Now())
	}}, false)
	if err != nil {
		return err
	}
	defer k.Stop()

	podOp, err := startOperator(cfg, scheme, controllers.Config{Pods: pod.Options{
		Images: pod.Images{Entrypoint: "bench/entrypoint", Runner: "bench/bash"}}}, func(r runner.Runner) runner.Runner {
		return timedPods{Runner: r, g: podGaps}
	})
	if err != nil {
		return err
	}
	if err := runLoop(ctx, c, "pods", steps); err != nil {
		return err
	}
	podOp()

	localGaps := &timing.Gaps{}
	localOp, err := startOperator(cfg, scheme, controllers.Config{AllowLocalActions: true, LocalWorkdir: filepath.Join(dir, "local")},
		func(r runner.Runner) runner.Runner {
			return timing.Local{Actions: r.(*local.Actions), Gaps: localGaps}
		})
	if err != nil {
		return err
	}
	if err := runLoop(ctx, c, "local", steps); err != nil {
		return err
	}
	localOp()

	pods, locals := podGaps.Take(), localGaps.Take()
	pp50, pp99 := timing.Percentile(pods, 50), timing.Percentile(pods, 99)
	lp50, lp99 := timing.Percentile(locals, 50), timing.Percentile(locals, 99)
	fmt.Printf("overhead per Pod step (finished Pod status written -> next Pod created), %d steps: p50 %v, p99 %v\n",
		len(pods), pp50.Round(10*time.Microsecond), pp99.Round(10*time.Microsecond))
	fmt.Printf("overhead per local step (action ended -> next action started), %d steps: p50 %v, p99 %v\n",
		len(locals), lp50.Round(10*time.Microsecond), lp99.Round(10*time.Microsecond))
	if lp50 > 0 {
		fmt.Printf("ratio Pod/local: p50 %.1fx, p99 %.1fx\n", float64(pp50)/float64(lp50), float64(pp99)/float64(lp99))
	}
	return nil
}

// startOperator runs the Loop controller as cmd/manager does, its action
// runner wrapped; the returned function stops it.
func startOperator(cfg *rest.Config, scheme *runtime.Scheme, c controllers.Config, wrap func(runner.Runner) runner.Runner) (func(), error) {
	cacheOpts, clientOpts := controllers.CacheOptions("")
	mgr, err := fixture.StartManager(controllers.RestConfig(cfg), ctrl.Options{Scheme: scheme, Cache: cacheOpts, Client: clientOpts},
		func(mgr ctrl.Manager) error {
			r := controllers.NewReconciler(mgr, c)
			r.Actions = wrap(r.Actions)
			return r.SetupWithManager(mgr)
		})
	if err != nil {
		return nil, err
	}
	return func() { _ = mgr.Stop() }, nil
}

// runLoop runs one Loop of `steps` self-transitions of `true` in a new
// namespace (with the default service account a cluster would have) to its end.
func runLoop(ctx context.Context, c client.Client, prefix string, steps int) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}); err != nil {
		return err
	}
	max := int32(steps)           //nolint:gosec // a flag of a few hundred
	revisits := int32(steps + 10) //nolint:gosec // a flag of a few hundred
	keep := int32(5)
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: prefix}, Spec: v1alpha1.LoopSpec{
		Initial: "spin", MaxIterations: &max, MaxEdgeRevisits: &revisits, History: &v1alpha1.HistorySpec{KeepPods: &keep},
		States: map[string]v1alpha1.State{"spin": {Action: "true", OnSuccess: "$current"}, "done": {Terminal: true}},
	}}
	if err := c.Create(ctx, loop); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(loop), loop); err != nil {
			return err
		}
		if loop.Status.Phase.IsFinished() {
			if loop.Status.TerminatedBy != v1alpha1.TerminatedMaxIterations || loop.Status.Iteration != max {
				return fmt.Errorf("%s ended %s at %d: %s", prefix, loop.Status.TerminatedBy, loop.Status.Iteration, loop.Status.Message)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: the Loop did not finish in time", prefix)
}
