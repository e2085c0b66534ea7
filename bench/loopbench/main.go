// Command loopbench measures the local engine's cost per iteration: a
// 200-iteration loop of `true` run by the looprun binary (whole process,
// durable persistence), against a Go program that spawns `bash -c true` 200
// times. Runs alternate so both see the same machine.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const iterations = 200

func main() {
	rounds := flag.Int("rounds", 15, "measured rounds of each command")
	keep := flag.Bool("keep", false, "keep the build directory")
	compare := flag.String("compare", "", "another looprun binary (an earlier build) to measure in the same run")
	flag.Parse()
	if len(flag.Args()) == 1 && flag.Arg(0) == "spawn" {
		spawn()
		return
	}
	if err := run(*rounds, *keep, *compare); err != nil {
		fmt.Fprintln(os.Stderr, "loopbench:", err)
		os.Exit(1)
	}
}

// spawn is the baseline: what running the actions alone costs.
func spawn() {
	for i := 0; i < iterations; i++ {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
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
	runWith := func(bin string) error {
		cmd := exec.Command(bin, "run", "-q", loop)
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
	ours := func() error { return runWith(looprun) }
	base := func() error { return exec.Command(self, "spawn").Run() }

	commands := []func() error{base, ours}
	if compare != "" {
		commands = append(commands, func() error { return runWith(compare) })
	}
	times, err := alternate(rounds, commands)
	if err != nil {
		return err
	}
	tBase, tOurs := times[0], times[1]
	if err := checkDurable(work); err != nil {
		return err
	}
	mb, mo := median(tBase), median(tOurs)
	over := (mo - mb) / iterations
	fmt.Printf("rounds: %d, iterations per round: %d\n", rounds, iterations)
	fmt.Printf("baseline (Go spawning bash -c true): median %v, %v per iteration\n", mb.Round(time.Microsecond), (mb / iterations).Round(time.Microsecond))
	fmt.Printf("looprun run (whole process, fsynced): median %v, %v per iteration\n", mo.Round(time.Microsecond), (mo / iterations).Round(time.Microsecond))
	fmt.Printf("overhead per iteration: %v (target <= 300µs)\n", over.Round(time.Microsecond))
	fmt.Printf("per-round overhead, sorted: %v\n", perRound(tBase, tOurs))
	if compare != "" {
		mc := median(times[2])
		fmt.Printf("%s (same run): median %v, overhead per iteration %v; this build minus it: %v per iteration\n",
			compare, mc.Round(time.Microsecond), ((mc - mb) / iterations).Round(time.Microsecond), ((mo - mc) / iterations).Round(time.Microsecond))
	}
	if over > 300*time.Microsecond {
		return fmt.Errorf("overhead %v per iteration is above the 300µs target", over)
	}
	return nil
}

// checkDurable makes sure the run wrote what it should.
func checkDurable(work string) error {
	b, err := os.ReadFile(filepath.Join(work, ".loops", ".running", "bench-self-loop.events.jsonl"))
	if err != nil {
		return err
	}
	if n := strings.Count(string(b), "\n"); n < 5*iterations {
		return fmt.Errorf("event log has %d lines, want at least %d", n, 5*iterations)
	}
	return nil
}

// alternate runs the commands in turn, rounds times after two warm-up
// rounds, and returns the times of each.
func alternate(rounds int, commands []func() error) ([][]time.Duration, error) {
	times := make([][]time.Duration, len(commands))
	for r := -2; r < rounds; r++ {
		for i, c := range commands {
			d, err := timeIt(c)
			if err != nil {
				return nil, err
			}
			if r >= 0 {
				times[i] = append(times[i], d)
			}
		}
	}
	return times, nil
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

func perRound(base, ours []time.Duration) []string {
	var d []time.Duration
	for i := range base {
		d = append(d, (ours[i]-base[i])/iterations)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	out := make([]string, len(d))
	for i, x := range d {
		out[i] = x.Round(time.Microsecond).String()
	}
	return out
}
