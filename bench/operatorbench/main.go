// Command operatorbench measures the Loop controller against a real
// kube-apiserver and etcd (the envtest binaries):
//
//   - overhead per transition: from the moment an action's process ends to
//     the moment the next action is started, over one Loop of N transitions
//     of `true` (p50, p99);
//   - throughput: many Loops at once, transitions per second.
//
// Run it with bench/run.sh (it sets KUBEBUILDER_ASSETS).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/bench/internal/fleet"
	"github.com/looprun/looprun/bench/internal/timing"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/test/fixture"
)

func main() {
	transitions := flag.Int("transitions", 1000, "transitions of the latency Loop")
	sizes := flag.String("loops", "200,1000", "Loops of each throughput run, comma-separated")
	perLoop := flag.Int("per-loop", 10, "transitions of each throughput Loop")
	workers := flag.Int("workers", 8, "max concurrent reconciles")
	rounds = flag.Int("rounds", 3, "rounds of each throughput run (the Loops, then the replay of their writes); the median round's ratio counts")
	idle = flag.Int("idle", 1000, "idle (suspended) Loops for the memory figure; 0 skips it")
	verbose = flag.Bool("requests", false, "print the API requests each transition cost")
	apiProfile = flag.String("apiserver-profile", "", "save an 8 s CPU profile of the API server taken during the throughput run")
	segmentBytes = flag.Int("segment-bytes", 0, "size cap of an event-log segment (0: the manager's default)")
	managerProfile = flag.String("manager-profile", "", "save a CPU profile of the manager (this process) over the throughput run")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	var loops []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "operatorbench: -loops: %q is not a count of Loops\n", f)
			os.Exit(2)
		}
		loops = append(loops, n)
	}
	if err := run(*transitions, loops, *perLoop, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "operatorbench:", err)
		os.Exit(1)
	}
}

var (
	verbose        *bool
	apiProfile     *string
	managerProfile *string
	segmentBytes   *int
	idle           *int
	rounds         *int
)

func run(transitions int, loops []int, perLoop, workers int) error {
	cfg, c, stop, err := fixture.StartEnv(true)
	if err != nil {
		return err
	}
	defer stop()
	scheme := c.Scheme()
	workdir, err := os.MkdirTemp("", "operatorbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workdir)
	tr := &timing.Gaps{}
	cacheOpts, clientOpts := controllers.CacheOptions("")
	mgr, err := fixture.StartManager(controllers.RestConfig(cfg), ctrl.Options{Scheme: scheme, Cache: cacheOpts, Client: clientOpts},
		func(mgr ctrl.Manager) error {
			r := controllers.NewReconciler(mgr, controllers.Config{AllowLocalActions: true, LocalWorkdir: workdir, Workers: workers, SegmentBytes: *segmentBytes})
			r.Actions = timing.Local{Actions: r.Actions.(*local.Actions), Gaps: tr}
			return r.SetupWithManager(mgr)
		})
	if err != nil {
		return err
	}
	defer func() { _ = mgr.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}

	// Latency: one Loop, many transitions.
	// The bench reads Loops from the manager's cache: polling the API
	// server would load what it measures.
	if _, _, err := runLoops(ctx, c, mgr.GetClient(), "latency", 1, transitions); err != nil {
		return err
	}
	gaps := tr.Take()
	p50, p99 := timing.Percentile(gaps, 50), timing.Percentile(gaps, 99)
	fmt.Printf("overhead per transition (action end -> next action start), %d transitions: p50 %v, p99 %v (targets <= 15ms, <= 100ms)\n",
		len(gaps), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))

	// Throughput: many Loops at once, each run next to the replay of its
	// own writes (the ceiling), in rounds: the machine's load drifts, and
	// the ratio of one round's two runs is what carries.
	failed := p50 > 15*time.Millisecond || p99 > 100*time.Millisecond
	for i, n := range loops {
		ratio, rate, err := throughput(ctx, cfg, c, mgr.GetClient(), n, perLoop, workers, i == 0)
		if err != nil {
			return err
		}
		failed = failed || ratio < 0.9 || rate < 300
	}
	if *idle > 0 {
		perLoop, err := idleMemory(ctx, c, *idle)
		if err != nil {
			return err
		}
		fmt.Printf("memory per idle Loop: %.1f KiB of manager heap (%d suspended Loops; goal <= 20 KiB)\n", perLoop/1024, *idle)
	}
	if failed {
		return fmt.Errorf("a target was missed")
	}
	return nil
}

// throughput runs n Loops of perLoop transitions at once, then replays
// their API writes with no controller (the ceiling), in rounds, and prints
// each round's rates and the median round's ratio. The first run of the
// bench (first) may save the manager's profile and print its requests.
func throughput(ctx context.Context, cfg *rest.Config, c client.Client, r client.Reader, n, perLoop, workers int, first bool) (ratio, rate float64, err error) {
	total := n * perLoop
	var ratios, rates, bounds []float64
	for round := 1; round <= max(*rounds, 1); round++ {
		first := first && round == 1
		if first && *apiProfile != "" {
			go profileAPIServer(ctx, cfg, *apiProfile)
		}
		if first && *managerProfile != "" {
			f, err := os.Create(*managerProfile)
			if err != nil {
				return 0, 0, err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return 0, 0, err
			}
		}
		before, cpu := requestCounts(cfg), timing.ReadCPU()
		elapsed, ns, err := runLoops(ctx, c, r, "throughput", n, perLoop)
		pprof.StopCPUProfile()
		if err != nil {
			return 0, 0, err
		}
		used := cpu.Since()
		if round == 1 && *verbose {
			after := requestCounts(cfg)
			for k, v := range after {
				if d := v - before[k]; d > 0 {
					fmt.Printf("requests %-60s %6.0f (%.2f per transition)\n", k, d, d/float64(total))
				}
			}
		}
		rate := float64(total) / elapsed.Seconds()
		fmt.Printf("round %d: %d Loops x %d transitions = %d in %v: %.0f transitions/s (target >= 300), %d workers\n",
			round, n, perLoop, total, elapsed.Round(time.Millisecond), rate, workers)
		fmt.Println("  " + used.Per(total))
		bare, ceilingCPU, err := ceiling(ctx, cfg, c, ns, workers, writes)
		if err != nil {
			return 0, 0, err
		}
		fmt.Printf("  ceiling: the same API writes (a status patch and a segment write per transition) replayed with no controller and no actions: %.0f transitions/s; the operator reached %.0f%% of it\n",
			bare, 100*rate/bare)
		fmt.Println("  " + ceilingCPU.Per(total))
		// The actions' processes run on the same processors as the API
		// server, and the ceiling runs none: the same writes with the same
		// actions, and no controller, is what the controller itself adds to.
		withActions, actionsCPU, err := ceiling(ctx, cfg, c, ns, workers, writesAndActions)
		if err != nil {
			return 0, 0, err
		}
		fmt.Printf("  the same writes and the same actions (bash, as the local runner starts them) with no controller: %.0f transitions/s (%.0f%% of the ceiling); the operator reached %.0f%% of it\n",
			withActions, 100*withActions/bare, 100*rate/withActions)
		fmt.Println("  " + actionsCPU.Per(total))
		if round == 1 {
			alone, statusCPU, err := ceiling(ctx, cfg, c, ns, workers, statusOnly)
			if err != nil {
				return 0, 0, err
			}
			fmt.Printf("  ceiling of the status patches alone (no event log): %.0f transitions/s\n", alone)
			fmt.Println("  " + statusCPU.Per(total))
		}
		ratios, rates, bounds = append(ratios, rate/bare), append(rates, rate), append(bounds, withActions/bare)
		if err := fleet.Delete(ctx, c, ns); err != nil {
			return 0, 0, err
		}
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	ratio, rate = median(ratios), median(rates)
	fmt.Printf("throughput, %d Loops x %d transitions: median %.0f transitions/s; median ratio to the ceiling %.0f%% over %d rounds (target >= 90%%); the same writes and actions with no controller: median %.0f%% of the ceiling\n",
		n, perLoop, rate, 100*ratio, len(ratios), 100*median(bounds))
	return ratio, rate, nil
}

// ceiling replays the API writes of the Loops in ns with no controller
// (see replayMode): the rate, and the CPU it cost.
func ceiling(ctx context.Context, cfg *rest.Config, c client.Client, ns string, workers int, mode replayMode) (float64, timing.CPU, error) {
	loops, plans, err := replayPlan(ctx, c, ns)
	if err != nil {
		return 0, timing.CPU{}, err
	}
	// The manager's settings for ConfigMaps: protobuf.
	cms, err := client.New(controllers.RestConfig(cfg), client.Options{Scheme: c.Scheme()})
	if err != nil {
		return 0, timing.CPU{}, err
	}
	cpu := timing.ReadCPU()
	elapsed, total, replayNS, err := replay(ctx, c, cms, loops, plans, workers, mode)
	if err != nil {
		return 0, timing.CPU{}, err
	}
	used := cpu.Since()
	if err := fleet.Delete(ctx, c, replayNS); err != nil {
		return 0, timing.CPU{}, err
	}
	return float64(total) / elapsed.Seconds(), used, nil
}

// runLoops creates n Loops of `transitions` self-transitions of `true` in a
// new namespace, one after another, and waits, reading through r, for all
// of them to finish.
func runLoops(ctx context.Context, c client.Client, r client.Reader, prefix string, n, transitions int) (time.Duration, string, error) {
	start := time.Now()
	ns, err := fleet.Create(ctx, c, prefix, n, fleet.Spin(transitions), 1)
	if err != nil {
		return 0, "", err
	}
	if err := fleet.WaitFinished(ctx, r, ns, n, transitions, 10*time.Minute); err != nil {
		return 0, "", err
	}
	return time.Since(start), ns, nil
}

// profileAPIServer saves a CPU profile of the API server (for looking into
// where a run's time goes).
func profileAPIServer(ctx context.Context, cfg *rest.Config, out string) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "8").DoRaw(ctx)
	if err == nil {
		_ = os.WriteFile(out, b, 0o644)
	}
}

// requestCounts reads the API server's request counters by verb and resource.
func requestCounts(cfg *rest.Config) map[string]float64 {
	out := map[string]float64{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return out
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndex(line, " ")
		var v float64
		_, _ = fmt.Sscan(line[i+1:], &v)
		labels := line[len("apiserver_request_total{") : i-1]
		key := ""
		for _, kv := range strings.Split(labels, ",") {
			if strings.HasPrefix(kv, "verb=") || strings.HasPrefix(kv, "resource=") || strings.HasPrefix(kv, "subresource=") {
				key += kv + " "
			}
		}
		out[key] += v
	}
	return out
}

// idleMemory creates n suspended Loops (each holding a small machine) and
// reports the growth of the manager's live heap per Loop once they are
// reconciled and the process is at rest.
func idleMemory(ctx context.Context, c client.Client, n int) (float64, error) {
	time.Sleep(2 * time.Second) // let the earlier runs settle
	before := fleet.LiveHeap()
	ns, err := fleet.Create(ctx, c, "idle", n, fleet.Idle(), 1)
	if err != nil {
		return 0, err
	}
	if err := fleet.WaitFor(ctx, c, ns, n, 5*time.Minute, fleet.Suspended); err != nil {
		return 0, err
	}
	time.Sleep(2 * time.Second)
	after := fleet.LiveHeap()
	return (float64(after) - float64(before)) / float64(n), nil
}
