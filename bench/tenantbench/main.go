// Command tenantbench measures what one tenant's volume does to another's
// Loops on one manager, against a real kube-apiserver and etcd (the envtest
// binaries), with local actions:
//
//   - the namespace cap: a quiet namespace's one-step Loop, from creation
//     to its end, alone and then beside a busy namespace with -queued Loops
//     queued behind its cap (the busy namespace's running Loops wait for a
//     file, so the line does not move); and the manager's processor time
//     while the line stands still;
//   - schedules: -schedules every-minute LoopSchedules in a busy namespace
//     beside one in a quiet namespace with startingDeadlineSeconds 5; over
//     -minutes firings, how late each run was created after it was due,
//     and whether the quiet schedule missed one.
//
// Run it with bench/run.sh (it sets KUBEBUILDER_ASSETS).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/bench/internal/fleet"
	"github.com/looprun/looprun/bench/internal/timing"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/test/fixture"
)

func main() {
	queued := flag.Int("queued", 1500, "Loops queued behind the busy namespace's cap")
	capacity := flag.Int("cap", 2, "the cap on running Loops per namespace")
	rounds := flag.Int("rounds", 7, "quiet Loops timed, alone and beside the line")
	schedules := flag.Int("schedules", 300, "every-minute schedules of the busy namespace")
	minutes := flag.Int("minutes", 2, "firings watched")
	only := flag.String("only", "", "run one part: cap or schedules")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	cfg, c, stop, err := fixture.StartEnv(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tenantbench:", err)
		os.Exit(1)
	}
	fmt.Printf("machine: %d CPUs, %s\n", goruntime.NumCPU(), goruntime.Version())
	status := 0
	if *only == "" || *only == "cap" {
		if err := capBench(cfg, c, *queued, *capacity, *rounds); err != nil {
			fmt.Fprintln(os.Stderr, "tenantbench: cap:", err)
			status = 1
		}
	}
	if *only == "" || *only == "schedules" {
		if err := scheduleBench(cfg, c, *schedules, *minutes); err != nil {
			fmt.Fprintln(os.Stderr, "tenantbench: schedules:", err)
			status = 1
		}
	}
	stop()
	os.Exit(status)
}

// oneStep is a Loop of one `true` step.
var oneStep = v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
	"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}

func startManager(cfg *rest.Config, c client.Client, workdir string, capacity int, schedules bool) (*fixture.Manager, error) {
	cacheOpts, clientOpts := controllers.CacheOptions("")
	return fixture.StartManager(controllers.RestConfig(cfg), ctrl.Options{Scheme: c.Scheme(), Cache: cacheOpts, Client: clientOpts},
		func(mgr ctrl.Manager) error {
			r := controllers.NewReconciler(mgr, controllers.Config{AllowLocalActions: true, LocalWorkdir: workdir, MaxRunningPerNamespace: capacity})
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
			if schedules {
				return controllers.NewScheduleReconciler(mgr).SetupWithManager(mgr)
			}
			return nil
		})
}

func capBench(cfg *rest.Config, c client.Client, queued, capacity, rounds int) error {
	ctx := context.Background()
	workdir, err := os.MkdirTemp("", "tenantbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workdir)
	mgr, err := startManager(cfg, c, workdir, capacity, false)
	if err != nil {
		return err
	}
	defer func() { _ = mgr.Stop() }()
	quietNS, err := namespace(ctx, c, "quiet")
	if err != nil {
		return err
	}
	quiet := func(tag string) ([]time.Duration, error) {
		var took []time.Duration
		for i := range rounds {
			loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: quietNS, Name: fmt.Sprintf("%s-%d", tag, i)}, Spec: oneStep}
			start := time.Now()
			if err := c.Create(ctx, loop); err != nil {
				return nil, err
			}
			if err := waitPhase(ctx, mgr.GetClient(), client.ObjectKeyFromObject(loop), v1alpha1.PhaseCompleted, 2*time.Minute); err != nil {
				return nil, err
			}
			took = append(took, time.Since(start))
		}
		return took, nil
	}
	alone, err := quiet("alone")
	if err != nil {
		return err
	}

	// The busy namespace: cap Loops that wait for a file, then the line.
	gate := filepath.Join(workdir, "gate")
	hold := v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
		"wait": {Action: fmt.Sprintf("until [ -f %s ]; do sleep 0.2; done", gate), Next: "done"}, "done": {Terminal: true}}}
	busyNS, err := fleet.Create(ctx, c, "busy", capacity, hold, 2)
	if err != nil {
		return err
	}
	if err := fleet.WaitFor(ctx, mgr.GetClient(), busyNS, capacity, 2*time.Minute, func(l *v1alpha1.Loop) (bool, error) {
		return l.Status.Phase == v1alpha1.PhaseRunning, nil
	}); err != nil {
		return err
	}
	start := time.Now()
	if err := createIn(ctx, c, busyNS, "line", queued, oneStep, 8); err != nil {
		return err
	}
	if err := fleet.WaitFor(ctx, mgr.GetClient(), busyNS, queued, 10*time.Minute, func(l *v1alpha1.Loop) (bool, error) {
		return l.Status.Phase == v1alpha1.PhasePending && len(l.Status.Conditions) > 0, nil
	}); err != nil {
		return err
	}
	fmt.Printf("cap %d: %d Loops queued in one namespace in %v\n", capacity, queued, time.Since(start).Round(time.Millisecond))

	// The line stands still: what the manager spends on it.
	time.Sleep(3 * time.Second)
	cpu := timing.ReadCPU()
	const still = 20 * time.Second
	time.Sleep(still)
	used := cpu.Since()
	fmt.Printf("while %d Loops wait and none moves, over %v: manager and bench %v of processor time (%.1f%% of a core), API server %v\n",
		queued, still, used.Manager.Round(time.Millisecond), 100*float64(used.Manager)/float64(still), used.APIServer.Round(time.Millisecond))

	beside, err := quiet("beside")
	if err != nil {
		return err
	}
	a, b := median(alone), median(beside)
	fmt.Printf("a quiet namespace's one-step Loop, created to Completed (median of %d): alone %v, beside %d queued %v: ratio %.2f (max beside %v)\n",
		rounds, a.Round(time.Millisecond), queued, b.Round(time.Millisecond), float64(b)/float64(a), slices.Max(beside).Round(time.Millisecond))

	// The line moves: every queued Loop runs, the cap held.
	start = time.Now()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		return err
	}
	if err := fleet.WaitFor(ctx, mgr.GetClient(), busyNS, queued+capacity, 20*time.Minute, func(l *v1alpha1.Loop) (bool, error) {
		return l.Status.Phase == v1alpha1.PhaseCompleted, nil
	}); err != nil {
		return err
	}
	d := time.Since(start)
	fmt.Printf("the line drained: %d Loops ran through the cap of %d in %v (%.1f Loops/s)\n", queued+capacity, capacity, d.Round(time.Millisecond), float64(queued+capacity)/d.Seconds())
	return nil
}

func scheduleBench(cfg *rest.Config, c client.Client, schedules, minutes int) error {
	ctx := context.Background()
	workdir, err := os.MkdirTemp("", "tenantbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workdir)
	busyNS, err := namespace(ctx, c, "sched-busy")
	if err != nil {
		return err
	}
	quietNS, err := namespace(ctx, c, "sched-quiet")
	if err != nil {
		return err
	}
	spec := func(deadline *int64) v1alpha1.LoopScheduleSpec {
		return v1alpha1.LoopScheduleSpec{Schedule: "* * * * *", StartingDeadlineSeconds: deadline,
			SuccessfulRunsHistoryLimit: ptr.To[int32](keep), FailedRunsHistoryLimit: ptr.To[int32](keep),
			Loop: &v1alpha1.LoopRunTemplate{Spec: oneStep}}
	}
	// The busy schedules are made first, so that a first-come queue has
	// them all ahead of the quiet one at every firing.
	if err := parallel(schedules, 8, func(i int) error {
		return c.Create(ctx, &v1alpha1.LoopSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: busyNS, Name: fmt.Sprintf("busy-%d", i)}, Spec: spec(nil)})
	}); err != nil {
		return err
	}
	time.Sleep(time.Second)
	if err := c.Create(ctx, &v1alpha1.LoopSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: quietNS, Name: "quiet"}, Spec: spec(ptr.To[int64](5))}); err != nil {
		return err
	}
	// Start just after a minute boundary, so each schedule's first
	// reconcile is not itself at a firing.
	for time.Now().Second() > 40 || time.Now().Second() < 2 {
		time.Sleep(time.Second)
	}
	mgr, err := startManager(cfg, c, workdir, 0, true)
	if err != nil {
		return err
	}
	defer func() { _ = mgr.Stop() }()
	first := time.Now().Truncate(time.Minute).Add(time.Minute)
	last := first.Add(time.Duration(minutes-1) * time.Minute)
	time.Sleep(time.Until(last.Add(50 * time.Second)))

	w := watched{c: c, first: first, last: last}
	busyRuns, _, err := w.lateness(ctx, busyNS)
	if err != nil {
		return err
	}
	quietMax, missed, err := w.lateness(ctx, quietNS)
	if err != nil {
		return err
	}
	missedEvents := w.missedEvents(ctx, quietNS)
	quiet := &v1alpha1.LoopSchedule{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: quietNS, Name: "quiet"}, quiet); err == nil && len(missed) > 0 {
		fmt.Printf("  the quiet schedule's status: %+v\n", quiet.Status)
	}
	fmt.Printf("schedules: %d every-minute schedules beside a quiet one (startingDeadlineSeconds 5), %d firings: the busy namespace's last run of a firing created after %v; the quiet one's runs created at most %v after they were due; missed %d (%v), MissedSchedule Events %d\n",
		schedules, minutes, busyRuns.Round(time.Millisecond), quietMax.Round(time.Millisecond), len(missed), missed, missedEvents)
	if len(missed) > 0 {
		return fmt.Errorf("the quiet schedule missed %d of %d firings", len(missed), minutes)
	}
	return nil
}

// keep is the runs a schedule keeps: all those watched.
const keep = 10

// watched are the firings from first to last.
type watched struct {
	c           client.Client
	first, last time.Time
}

// lateness is how long after its time the latest run of a firing of ns
// was created, at most over the firings, and the firings (HH:MM) with no
// run.
func (w watched) lateness(ctx context.Context, ns string) (time.Duration, []string, error) {
	var list v1alpha1.LoopList
	if err := w.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, nil, err
	}
	// By the minute's Unix time: time.Time values of one instant in two
	// locations are not equal map keys.
	late := map[int64]time.Duration{}
	for _, l := range list.Items {
		due, err := time.Parse(time.RFC3339, l.Annotations[controllers.AnnotationScheduledTime])
		if err != nil || due.Before(w.first) || due.After(w.last) {
			continue
		}
		late[due.Unix()] = max(late[due.Unix()], l.CreationTimestamp.Sub(due))
	}
	var most time.Duration
	for _, d := range late {
		most = max(most, d)
	}
	var missed []string
	for t := w.first; !t.After(w.last); t = t.Add(time.Minute) {
		if _, ok := late[t.Unix()]; !ok {
			missed = append(missed, t.Format("15:04"))
		}
	}
	return most, missed, nil
}

// missedEvents counts (and prints) the MissedSchedule Events of ns.
func (w watched) missedEvents(ctx context.Context, ns string) int {
	var events eventsv1.EventList
	_ = w.c.List(ctx, &events, client.InNamespace(ns))
	n := 0
	for _, e := range events.Items {
		if e.Reason == "MissedSchedule" {
			n++
			fmt.Println("  "+ns+":", e.Note)
		}
	}
	return n
}

func namespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	err := c.Create(ctx, ns)
	return ns.Name, err
}

func createIn(ctx context.Context, c client.Client, ns, prefix string, n int, spec v1alpha1.LoopSpec, workers int) error {
	return parallel(n, workers, func(i int) error {
		return c.Create(ctx, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)}, Spec: spec})
	})
}

func parallel(n, workers int, f func(int) error) error {
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := f(int(i)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func waitPhase(ctx context.Context, r client.Reader, key client.ObjectKey, phase v1alpha1.Phase, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l := &v1alpha1.Loop{}
		if err := r.Get(ctx, key, l); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return l.Status.Phase == phase, nil
	})
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
