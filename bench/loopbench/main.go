// Command loopbench measures the local engine's cost per iteration: a
// self-loop of `true` run by the looprun binary (whole process, durable
// persistence), against a Go program that spawns `bash -c true` as many
// times. Each command runs short (200 iterations) and long (600): the
// difference between the two is the cost of 400 iterations, so what a
// run pays once (the process starting, the loop file read, the last
// fsyncs) is measured apart from what each iteration pays. Runs alternate
// so all see the same machine.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	short = 200
	long  = 600
	// target is the most the engine may add to each iteration.
	target = 300 * time.Microsecond
)

func main() {
	rounds := flag.Int("rounds", 15, "measured rounds of each command")
	keep := flag.Bool("keep", false, "keep the build directory")
	compare := flag.String("compare", "", "another looprun binary (an earlier build) to measure in the same run")
	flag.Parse()
	if len(flag.Args()) == 2 && flag.Arg(0) == "spawn" {
		n, err := strconv.Atoi(flag.Arg(1))
		if err == nil {
			err = spawn(n)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(*rounds, *keep, *compare); err != nil {
		fmt.Fprintln(os.Stderr, "loopbench:", err)
		os.Exit(1)
	}
}

// spawn is the baseline: what running the actions alone costs.
func spawn(n int) error {
	for range n {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			return err
		}
	}
	return nil
}

// subject is a command measured short and long.
type subject struct {
	name string
	run  func(iterations int) error
	// times[0] are the short runs, times[1] the long ones, round by round.
	times [2][]time.Duration
}

func run(rounds int, keep bool, compare string) error {
	dir, err := os.MkdirTemp("", "loopbench")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	looprun := filepath.Join(dir, "looprun")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if out, err := exec.Command("go", "build", "-o", looprun, "./cmd/looprun").CombinedOutput(); err != nil {
		return fmt.Errorf("build looprun: %w\n%s", err, out)
	}
	loop, err := filepath.Abs("bench/self-loop.yaml")
	if err != nil {
		return err
	}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	runWith := func(bin string) func(int) error {
		return func(n int) error {
			cmd := exec.Command(bin, "run", "-q", "--max-steps", strconv.Itoa(n), loop)
			cmd.Dir = work
			out, err := cmd.CombinedOutput()
			// The loop ends by max_iterations: exit code 1 is expected.
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == 1 && strings.Contains(string(out), "max_iterations") {
				return nil
			}
			if err != nil {
				return fmt.Errorf("looprun: %w\n%s", err, out)
			}
			return nil
		}
	}
	base := &subject{name: "baseline (Go spawning bash -c true)", run: func(n int) error {
		return exec.Command(self, "spawn", strconv.Itoa(n)).Run()
	}}
	ours := &subject{name: "looprun run (whole process, fsynced)", run: runWith(looprun)}
	subjects := []*subject{base, ours}
	if compare != "" {
		subjects = append(subjects, &subject{name: compare, run: runWith(compare)})
	}
	if err := alternate(rounds, subjects); err != nil {
		return err
	}
	if err := checkDurable(work); err != nil {
		return err
	}

	fmt.Printf("rounds: %d, iterations per run: %d and %d\n", rounds, short, long)
	fmt.Printf("%s: %v per iteration\n", base.name, perIteration(base.times[1], long))
	perIter, fixed := overhead(base, ours)
	fmt.Printf("%s: %v per iteration\n", ours.name, perIteration(ours.times[1], long))
	fmt.Printf("overhead per iteration: %v (target <= %v)\n", median(perIter).Round(time.Microsecond), target)
	fmt.Printf("per-round overhead per iteration, sorted: %v\n", sorted(perIter))
	fmt.Printf("once per run (start, load, last sync): %v\n", median(fixed).Round(10*time.Microsecond))
	if compare != "" {
		other := subjects[2]
		perIterC, fixedC := overhead(base, other)
		fmt.Printf("%s (same run): overhead per iteration %v, once per run %v; this build minus it: %v per iteration\n",
			other.name, median(perIterC).Round(time.Microsecond), median(fixedC).Round(10*time.Microsecond),
			(median(perIter) - median(perIterC)).Round(time.Microsecond))
	}
	if over := median(perIter); over > target {
		return fmt.Errorf("overhead %v per iteration is above the %v target", over, target)
	}
	return nil
}

// overhead is, round by round, what s adds to each iteration over the
// baseline (from the difference between its long and short runs) and what
// it adds once per run.
func overhead(base, s *subject) (perIter, fixed []time.Duration) {
	for r := range base.times[0] {
		b := base.times[1][r] - base.times[0][r]
		o := s.times[1][r] - s.times[0][r]
		per := (o - b) / (long - short)
		perIter = append(perIter, per)
		fixed = append(fixed, s.times[0][r]-base.times[0][r]-per*short)
	}
	return perIter, fixed
}

func perIteration(d []time.Duration, n int) time.Duration {
	return (median(d) / time.Duration(n)).Round(time.Microsecond)
}

// checkDurable makes sure the last run (a long one) wrote what it should.
func checkDurable(work string) error {
	b, err := os.ReadFile(filepath.Join(work, ".loops", ".running", "bench-self-loop.events.jsonl"))
	if err != nil {
		return err
	}
	if n := strings.Count(string(b), "\n"); n < 5*long {
		return fmt.Errorf("event log has %d lines, want at least %d", n, 5*long)
	}
	return nil
}

// alternate runs each subject short and long in turn, rounds times after
// two warm-up rounds.
func alternate(rounds int, subjects []*subject) error {
	for r := -2; r < rounds; r++ {
		for i, n := range []int{short, long} {
			for _, s := range subjects {
				d, err := timeIt(func() error { return s.run(n) })
				if err != nil {
					return err
				}
				if r >= 0 {
					s.times[i] = append(s.times[i], d)
				}
			}
		}
	}
	return nil
}

func timeIt(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func sorted(d []time.Duration) []string {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.Round(time.Microsecond).String()
	}
	return out
}
