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
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/bench/internal/fleet"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/local"
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

const (
	// goal is the most heap an idle Loop may cost the manager (DESIGN §6).
	goal = 20 << 10
	// creators is how many goroutines create the Loops.
	creators = 8
	// waitLimit bounds each wait for the Loops.
	waitLimit = 15 * time.Minute
)

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
	before := fleet.LiveHeap()
	start := time.Now()
	idleNS, err := fleet.Create(ctx, c, "idle", idle, fleet.Idle(), creators)
	if err != nil {
		return err
	}
	if err := fleet.WaitFor(ctx, op.mgr.GetClient(), idleNS, idle, waitLimit, fleet.Suspended); err != nil {
		return err
	}
	idleTime := time.Since(start)
	time.Sleep(2 * time.Second) // let what the creation left settle
	perIdle := float64(fleet.LiveHeap()-before) / float64(idle)
	fmt.Printf("idle: %d suspended Loops created and reconciled in %v; manager heap %.1f KiB per idle Loop (goal <= %d KiB)\n",
		idle, idleTime.Round(time.Millisecond), perIdle/1024, goal>>10)

	// Running Loops beside them: throughput.
	start = time.Now()
	runNS, err := fleet.Create(ctx, c, "run", running, fleet.Spin(perLoop), creators)
	if err != nil {
		return err
	}
	if err := fleet.WaitFinished(ctx, op.mgr.GetClient(), runNS, running, perLoop, waitLimit); err != nil {
		return err
	}
	elapsed := time.Since(start)
	total := running * perLoop
	fmt.Printf("running: %d Loops x %d transitions = %d in %v beside %d idle: %.0f transitions/s\n",
		running, perLoop, total, elapsed.Round(time.Millisecond), idle, float64(total)/elapsed.Seconds())
	fmt.Printf("live heap of the process (manager and bench) with %d Loops in the manager's cache: %.1f MiB\n", idle+running, float64(fleet.LiveHeap())/(1<<20))

	// Restart: Loops created while no manager runs wait; a new manager
	// syncs its cache of all the Loops and starts them.
	if err := op.stop(); err != nil {
		return err
	}
	waitNS, err := fleet.Create(ctx, c, "wait", running, fleet.Spin(1), creators)
	if err != nil {
		return err
	}
	restart := time.Now()
	op, err = startOperator(cfg, c, workdir, workers)
	if err != nil {
		return err
	}
	defer func() { _ = op.stop() }()
	// The wait reads the new manager's cache, which must have started.
	if !op.mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the restarted manager's cache did not sync")
	}
	if err := fleet.WaitFinished(ctx, op.mgr.GetClient(), waitNS, running, 1, waitLimit); err != nil {
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
			r.Actions = counted{Actions: r.Actions.(*local.Actions), op: op}
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
	*local.Actions
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
