package main

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/test/proc"
)

// killRounds is how many times TestKilledRunNeverRerunsAFinishedAction
// kills a run.
const killRounds = 100

// Killed (SIGKILL) at random moments and resumed each time, a run never
// runs an action again once the next one started: before an action
// begins, the end of the one before is on disk. Each action writes its
// iteration; the iterations only ever go up (one cut off by the kill runs
// again under the same number).
func TestKilledRunNeverRerunsAFinishedAction(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "count.yaml", "name: count\ninitial: a\nmax_steps: 1000000\nmax_edge_revisits: 1000000\nstates:\n  a:\n    action: echo $LOOPRUN_ITERATION >> trace\n    throttle: {warn_max: 1000000, hard_max: 1000000}\n    on_yes: $current\n  done:\n    terminal: true\n")
	r := rand.New(rand.NewPCG(1, 2))
	for i := range killRounds {
		cmd := exec.Command(binary, "resume", "-q", "count")
		if i == 0 {
			cmd = exec.Command(binary, "run", "-q", "count.yaml")
		}
		cmd.Dir = dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		if i == 0 {
			// Until the run has a state, there is nothing to resume.
			proc.WaitFile(t, filepath.Join(dir, ".loops/.running/count.state.json"))
		}
		// Once this run has taken a step (on a busy machine a resume can
		// take longer than the moments below to start), a random moment.
		ran := traceLines(dir)
		proc.Until(t, time.Minute, "the resumed run takes a step", func() bool {
			select {
			case <-exited:
				t.Fatalf("round %d: the run ended before taking a step: %v\n%s", i, cmd.ProcessState, stderr.String())
			default:
			}
			return traceLines(dir) > ran
		})
		time.Sleep(time.Duration(r.IntN(40)) * time.Millisecond) // a random moment, not a wait for something
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		// A child the run was forking when killed (not yet exec'd) shares
		// its lock until that child has died too, after the run is
		// reaped: a resume started before then is refused ("already
		// running here").
		proc.Until(t, 10*time.Second, "the killed run's lock to be released", func() bool { return unlocked(dir) })
		if _, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/count.state.json")); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
	}
	last, steps := 0, 0
	for n, line := range strings.Split(strings.TrimSpace(readFile(dir, "trace")), "\n") {
		it, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("trace line %d: %q", n, line)
		}
		if it < last {
			t.Fatalf("trace line %d: iteration %d ran after iteration %d had started: a finished action ran again", n, it, last)
		}
		last, steps = it, steps+1
	}
	if last < killRounds/4 {
		t.Errorf("only %d iterations in %d rounds", last, killRounds)
	}
	t.Logf("%d kills, %d actions run, %d iterations: no finished action ran again", killRounds, steps, last)
}

// unlocked reports whether the run's lock is free: the killed run, and
// any child of it still holding a copy of the descriptor, are gone.
func unlocked(dir string) bool {
	f, err := os.Open(filepath.Join(dir, ".loops/.running/count.lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// traceLines counts the actions the run recorded in its trace file.
func traceLines(dir string) int {
	return strings.Count(readFile(dir, "trace"), "\n")
}

// A run killed outright (SIGKILL) or hung up on (SIGHUP) takes its action
// along: the action does not run on beside a resumed run.
func TestKilledRunTakesItsActionAlong(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "slow.yaml", "name: slow\ninitial: a\nstates:\n  a:\n    action: echo $$ > pid; exec sleep 60\n    next: done\n  done:\n    terminal: true\n")
			cmd := exec.Command(binary, "run", "-q", "slow.yaml")
			cmd.Dir = dir
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := proc.WaitPid(t, filepath.Join(dir, "pid"))
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			proc.WaitGone(t, pid)
			if sig != syscall.SIGKILL {
				sf, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/slow.state.json"))
				if err != nil || sf.Status != localrun.StatusInterrupted {
					t.Errorf("after %s: %+v %v", sig, sf, err)
				}
			}
		})
	}
}
