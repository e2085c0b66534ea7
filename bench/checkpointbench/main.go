// Command checkpointbench measures saving and loading one checkpoint of a
// run state holding 100 captured results of 4 KiB each (about 400 KiB of
// JSON): locally (history.Take, append to the checkpoints file with an
// fsync; read it back, find it, check its SHA-256) and in a cluster
// (the same checkpoint written into an event-log ConfigMap segment of a
// real API server, and read back and checked). Targets: save p95 <= 50 ms,
// load p95 <= 20 ms.
//
// Run it with bench/run.sh (it sets KUBEBUILDER_ASSETS).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/bench/internal/timing"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/test/fixture"
)

const (
	saveTarget = 50 * time.Millisecond
	loadTarget = 20 * time.Millisecond
)

func main() {
	ctrl.SetLogger(logr.Discard())
	rounds := flag.Int("rounds", 100, "checkpoints saved and loaded per measurement")
	flag.Parse()
	ok, err := run(*rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpointbench:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// runState is a run state with 100 captures of 4 KiB.
func runState(iteration int32) *v1alpha1.RunState {
	now := metav1.Now()
	run := &v1alpha1.RunState{RunID: "bench", CurrentState: "work", Iteration: iteration, Phase: v1alpha1.PhaseRunning,
		LastSeq: int64(5 * iteration), StartedAt: &now, UpdatedAt: &now, Captured: map[string]v1alpha1.CapturedResult{}}
	line := strings.Repeat("x", 63) + "\n"
	for c := range 100 {
		run.Captured[fmt.Sprintf("capture-%03d", c)] = v1alpha1.CapturedResult{Output: strings.Repeat(line, 64)[:4096], ExitCode: 0, DurationMs: 12}
	}
	return run
}

// runStates is one run state per round, iterations 1, 2, ...
func runStates(rounds int) []*v1alpha1.RunState {
	runs := make([]*v1alpha1.RunState, rounds)
	var iteration int32
	for i := range runs {
		iteration++
		runs[i] = runState(iteration)
	}
	return runs
}

func run(rounds int) (bool, error) {
	cp, err := history.Take("bench", runState(1), time.Now())
	if err != nil {
		return false, err
	}
	fmt.Printf("checkpoint: %d KiB of run state, 100 captures of 4 KiB\n", len(cp.Run)>>10)
	localSave, localLoad, err := local(rounds)
	if err != nil {
		return false, err
	}
	clusterSave, clusterLoad, err := cluster(rounds)
	if err != nil {
		return false, err
	}
	ok := true
	for _, m := range []struct {
		name   string
		d      []time.Duration
		target time.Duration
	}{
		{"local save (Take + append + fsync)", localSave, saveTarget},
		{"local load (read + find + SHA-256)", localLoad, loadTarget},
		{"cluster save (Take + ConfigMap segment write)", clusterSave, saveTarget},
		{"cluster load (ConfigMap read + find + SHA-256)", clusterLoad, loadTarget},
	} {
		p50, p95 := timing.Percentile(m.d, 50), timing.Percentile(m.d, 95)
		verdict := "ok"
		if p95 > m.target {
			verdict, ok = "MISSED", false
		}
		fmt.Printf("%-48s p50 %6.2f ms  p95 %6.2f ms  (target p95 <= %v: %s)\n", m.name, ms(p50), ms(p95), m.target, verdict)
	}
	return ok, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// local saves checkpoints to a checkpoints file, then loads each back.
func local(rounds int) (save, load []time.Duration, err error) {
	dir, err := os.MkdirTemp("", "checkpointbench")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bench.checkpoints.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	runs := runStates(rounds)
	for i := range rounds {
		start := time.Now()
		cp, err := history.Take("bench", runs[i], time.Now())
		if err == nil {
			var line []byte
			if line, err = cp.Line(); err == nil {
				if _, err = f.Write(line); err == nil {
					err = f.Sync()
				}
			}
		}
		if err != nil {
			return nil, nil, err
		}
		save = append(save, time.Since(start))
	}
	for i := range rounds {
		start := time.Now()
		if _, err := localrun.LoadCheckpoint(path, runs[i].LastSeq); err != nil {
			return nil, nil, err
		}
		load = append(load, time.Since(start))
	}
	return save, load, nil
}

// cluster saves checkpoints into a Loop's event log on a real API server,
// then loads each back.
func cluster(rounds int) (save, load []time.Duration, err error) {
	cfg, base, stop, err := fixture.StartEnv(true)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	// As the operator talks to the API server: ConfigMaps as protobuf.
	c, err := client.New(controllers.RestConfig(cfg), client.Options{Scheme: base.Scheme()})
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "checkpointbench"}}
	if err := base.Create(ctx, ns); err != nil {
		return nil, nil, err
	}
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns.Name},
		Spec: v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{"work": {Action: "true", Next: "done"}, "done": {Terminal: true}}}}
	if err := base.Create(ctx, loop); err != nil {
		return nil, nil, err
	}
	log := &configmaps.Log{Client: c, Reader: c, Scheme: c.Scheme()}
	runs := runStates(rounds)
	for i := range rounds {
		start := time.Now()
		cp, err := history.Take("bench", runs[i], time.Now())
		if err == nil {
			err = log.Append(ctx, loop, nil, cp)
		}
		if err != nil {
			return nil, nil, err
		}
		save = append(save, time.Since(start))
	}
	if n := loop.Status.Checkpoints; n == nil || int(n.Count()) != rounds {
		return nil, nil, fmt.Errorf("%d checkpoints saved, the index has %v", rounds, n)
	}
	for i := range rounds {
		start := time.Now()
		if _, _, err := configmaps.FindCheckpoint(ctx, c, loop, &runs[i].Iteration); err != nil {
			return nil, nil, err
		}
		load = append(load, time.Since(start))
	}
	return save, load, nil
}
