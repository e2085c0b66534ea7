// Command uibench writes a large local run for the web view's benchmark
// and browser test: a loop of -states states (a ring and a terminal one), run in-process
// (every action succeeds at once, 10 ms apart) for -iterations steps, kept
// under DIR/.loops as `looprun run` keeps a run (imported whole).
//
//	go run ./bench/uibench -dir DIR [-states 128] [-iterations 10000]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
)

func main() {
	dir := flag.String("dir", "", "directory to write the run under (DIR/.loops)")
	states := flag.Int("states", 128, "states of the loop")
	iterations := flag.Int("iterations", 10000, "steps the run takes")
	flag.Parse()
	if err := write(*dir, *states, *iterations); err != nil {
		fmt.Fprintln(os.Stderr, "uibench:", err)
		os.Exit(1)
	}
}

func write(dir string, states, iterations int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "name: big\ninitial: s000\nmax_steps: %d\nmax_edge_revisits: %d\nstates:\n", iterations, iterations)
	ring := states - 1 // and done
	for i := range ring {
		fmt.Fprintf(&b, "  s%03d:\n    action: 'echo step %d'\n    next: s%03d\n", i, i, (i+1)%ring)
	}
	b.WriteString("  done:\n    terminal: true\n")
	path := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	lf, err := loopfile.Load(path, loopfile.Options{LoopsDir: filepath.Join(dir, ".loops")})
	if err != nil {
		return err
	}
	m, err := executor.New("big", &lf.Loop.Spec, executor.Options{LittleLoops: true})
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Duration(iterations) * 10 * time.Millisecond)
	run := &struct{ v1alpha1.RunState }{}
	evs := m.Start(&run.RunState, "big-1", now)
	for range 10 * iterations {
		step, more := m.Plan(&run.RunState, now)
		evs = append(evs, more...)
		if step.Kind == executor.StepAction {
			now = now.Add(10 * time.Millisecond)
			step, more = m.Complete(&run.RunState, &executor.ActionResult{Output: "ok\n", Duration: 5 * time.Millisecond}, now)
			evs = append(evs, more...)
		}
		if run.Phase.IsFinished() {
			break
		}
	}
	store, err := localrun.NewStore(filepath.Join(dir, ".loops"), "big")
	if err != nil {
		return err
	}
	if err := store.Import([]byte(b.String()), &run.RunState, evs, nil); err != nil {
		return err
	}
	fmt.Printf("big: %d states, %d iterations, %d events, %s\n", states, run.Iteration, len(evs), run.Phase)
	return nil
}
