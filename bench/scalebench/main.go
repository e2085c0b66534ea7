// Command scalebench puts 10,000 Loops on one manager, against a real
// kube-apiserver and etcd (the envtest binaries), and records:
//
//   - the manager's live heap per idle (suspended) Loop, with 9,000 of them;
//   - throughput with 1,000 Loops running at once beside them;
//   - after a manager restart with all of them in the cache, the time to the
//     first transition, to every waiting Loop's first action, and to the
//     end of the run.
//
// Run it with bench/run.sh (it sets KUBEBUILDER_ASSETS).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/localjobs"
	"github.com/looprun/looprun/test/fixture"
)

func main() {
	idle := flag.Int("idle", 9000, "idle (suspended) Loops")
	running := flag.Int("running", 1000, "Loops running at once")
	perLoop := flag.Int("per-loop", 5, "transitions of each running Loop")
	workers := flag.Int("workers", 8, "max concurrent reconciles")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	if err := run(*idle, *running, *perLoop, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

// goal is the most heap an idle Loop may cost the manager (DESIGN §6).
const goal = 20 << 10

func run(idle, running, perLoop, workers int) error {
	cfg, c, stop, err := fixture.StartEnv(true)
	if err != nil {
		return err
	}
	defer stop()
	workdir, err := os.MkdirTemp("", "scalebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workdir)
	ctx := context.Background()

	op, err := startOperator(cfg, c, workdir, workers)
	if err != nil {
		return err
	}
	fmt.Printf("machine: %d CPUs, %s; %d reconcile workers\n", goruntime.NumCPU(), goruntime.Version(), workers)

	// Idle Loops: what each costs the manager's heap.
	before := heap()
	start := time.Now()
	idleNS, err := createLoops(ctx, c, "idle", idle, idleSpec())
	if err != nil {
		return err
	}
	if err := waitFor(ctx, op.mgr.GetClient(), idleNS, idle, func(l *v1alpha1.Loop) bool { return l.Status.Phase == v1alpha1.PhaseSuspended }); err != nil {
		return err
	}
	idleTime := time.Since(start)
	time.Sleep(2 * time.Second) // let what the creation left settle
	perIdle := float64(heap()-before) / float64(idle)
	fmt.Printf("idle: %d suspended Loops created and reconciled in %v; manager heap %.1f KiB per idle Loop (goal <= %d KiB)\n",
		idle, idleTime.Round(time.Millisecond), perIdle/1024, goal>>10)

	// Running Loops beside them: throughput.
	start = time.Now()
	runNS, err := createLoops(ctx, c, "run", running, runSpec(perLoop))
	if err != nil {
		return err
	}
	if err := waitFinished(ctx, op.mgr.GetClient(), runNS, running, perLoop); err != nil {
		return err
	}
	elapsed := time.Since(start)
	total := running * perLoop
	fmt.Printf("running: %d Loops x %d transitions = %d in %v beside %d idle: %.0f transitions/s\n",
		running, perLoop, total, elapsed.Round(time.Millisecond), idle, float64(total)/elapsed.Seconds())
	fmt.Printf("live heap of the process (manager and bench) with %d Loops in the manager's cache: %.1f MiB\n", idle+running, float64(heap())/(1<<20))

	// Restart: Loops created while no manager runs wait; a new manager
	// syncs its cache of all the Loops and starts them.
	if err := op.stop(); err != nil {
		return err
	}
	waitNS, err := createLoops(ctx, c, "wait", running, runSpec(1))
	if err != nil {
		return err
	}
	restart := time.Now()
	op, err = startOperator(cfg, c, workdir, workers)
	if err != nil {
		return err
	}
	defer func() { _ = op.stop() }()
	if err := waitFinished(ctx, op.mgr.GetClient(), waitNS, running, 1); err != nil {
		return err
	}
	done := time.Since(restart)
	first, all := op.firstStart.Load(), op.lastStart.Load()
	if first == 0 || int(op.starts.Load()) < running {
		return fmt.Errorf("the restarted manager started %d actions, want %d", op.starts.Load(), running)
	}
	fmt.Printf("restart with %d Loops (%d waiting to start): first transition after %v, every waiting Loop's first action after %v, all ended after %v\n",
		idle+2*running, running, time.Duration(first-restart.UnixNano()).Round(time.Millisecond),
		time.Duration(all-restart.UnixNano()).Round(time.Millisecond), done.Round(time.Millisecond))
	if perIdle > goal {
		return fmt.Errorf("an idle Loop costs %.1f KiB, above the %d KiB goal", perIdle/1024, goal>>10)
	}
	return nil
}

// operator is a manager with the Loop controller, its local actions
// counted.
type operator struct {
	mgr *fixture.Manager
	// starts counts the actions started; firstStart and lastStart are
	// when the first and the latest started (Unix nanoseconds).
	starts                *atomic.Int64
	firstStart, lastStart *atomic.Int64
}

func startOperator(cfg *rest.Config, c client.Client, workdir string, workers int) (*operator, error) {
	op := &operator{starts: &atomic.Int64{}, firstStart: &atomic.Int64{}, lastStart: &atomic.Int64{}}
	cacheOpts, clientOpts := controllers.CacheOptions("")
	mgr, err := fixture.StartManager(controllers.RestConfig(cfg), ctrl.Options{Scheme: c.Scheme(), Cache: cacheOpts, Client: clientOpts},
		func(mgr ctrl.Manager) error {
			r := controllers.NewReconciler(mgr, controllers.Config{AllowLocalActions: true, LocalWorkdir: workdir, Workers: workers})
			r.Actions = counted{Actions: r.Actions.(*localjobs.Actions), op: op}
			return r.SetupWithManager(mgr)
		})
	if err != nil {
		return nil, err
	}
	op.mgr = mgr
	return op, nil
}

func (op *operator) stop() error { return op.mgr.Stop() }

// counted is the local runner, its starts counted.
type counted struct {
	*localjobs.Actions
	op *operator
}

// Start implements runner.Runner.
func (c counted) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	now := time.Now().UnixNano()
	c.op.firstStart.CompareAndSwap(0, now)
	c.op.lastStart.Store(now)
	c.op.starts.Add(1)
	return c.Actions.Start(ctx, loop, a)
}

func idleSpec() v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "check", Suspend: true, States: map[string]v1alpha1.State{
		"check": {Action: "make test", OnSuccess: "done", OnFailure: "fix"},
		"fix":   {Action: "/fix the failing tests", Next: "check"},
		"done":  {Terminal: true},
	}}
}

func runSpec(transitions int) v1alpha1.LoopSpec {
	max := int32(transitions)           //nolint:gosec // a flag of a few thousand
	revisits := int32(transitions + 10) //nolint:gosec // a flag of a few thousand
	return v1alpha1.LoopSpec{Initial: "spin", MaxIterations: &max, MaxEdgeRevisits: &revisits, States: map[string]v1alpha1.State{
		"spin": {Action: "true", OnSuccess: "$current"},
		"done": {Terminal: true},
	}}
}

// createLoops creates n Loops of spec in a new namespace, from 8
// goroutines, and returns the namespace.
func createLoops(ctx context.Context, c client.Client, prefix string, n int, spec v1alpha1.LoopSpec) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		return "", err
	}
	var next atomic.Int64
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("%s-%d", prefix, i)}, Spec: spec}
				if err := c.Create(ctx, loop); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return ns.Name, errors.Join(errs...)
}

// waitFor waits until n Loops of the namespace satisfy cond, reading the
// manager's cache (polling the API server would load what is measured).
func waitFor(ctx context.Context, r client.Reader, ns string, n int, cond func(*v1alpha1.Loop) bool) error {
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		var list v1alpha1.LoopList
		if err := r.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		ok := 0
		for i := range list.Items {
			if cond(&list.Items[i]) {
				ok++
			}
		}
		if ok == n {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s: Loops did not get there in time", ns)
}

// waitFinished waits until the n Loops of the namespace ended, each after
// its transitions.
func waitFinished(ctx context.Context, r client.Reader, ns string, n, transitions int) error {
	var wrong error
	err := waitFor(ctx, r, ns, n, func(l *v1alpha1.Loop) bool {
		if !l.Status.Phase.IsFinished() {
			return false
		}
		if l.Status.TerminatedBy != v1alpha1.TerminatedMaxIterations || int(l.Status.Iteration) != transitions {
			wrong = fmt.Errorf("%s ended %s at %d", l.Name, l.Status.TerminatedBy, l.Status.Iteration)
		}
		return true
	})
	return errors.Join(wrong, err)
}

// heap is the live heap after collection.
func heap() uint64 {
	var m goruntime.MemStats
	for range 3 {
		goruntime.GC()
	}
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}
