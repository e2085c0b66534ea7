// Command simcompat walks little-loops' bundled loops (its loops/ and
// loops/oracles/; lib/ holds fragments, not loops) with `ll-loop simulate`
// and `looprun simulate -o json` under each scenario, and compares the
// walks: the states entered, the final state, the iteration count, the
// number of actions that would have run and how the walk ended. It
// prints, per scenario, how many loops agree and how the others differ
// (docs/compat.md, "simulate", records the counts). A developer tool: CI
// has no copy of the original.
//
// ll-loop runs with its clock jumping over waits, as looprun's simulation
// does (a loop's backoff: 300 would otherwise take 300 s a step), and, by
// default, with its LLM judge scripted as looprun's is (-judge scripted):
// ll-loop asks its real judge about the simulated output, which a machine
// without a host CLI answers by ending the walk in error (-judge host).
// -cache keeps ll-loop's outputs (they change only with its commit), so
// that a second run takes looprun's time alone.
//
//	go run ./hack/simcompat -little-loops PATH [-python /usr/bin/python3] [-looprun BIN] [-judge scripted|host] [-scenario all-pass,...] [-run REGEXP] [-cache DIR] [-j 2] [-v]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// timeout bounds one simulation: one that takes longer is stopped and
// counted as no walk.
const timeout = 2 * time.Minute

var scenarios = []string{"all-pass", "all-fail", "all-error", "first-fail", "alternating"}

type options struct {
	repo, python, cache, bin, judge string
	verbose                         bool
}

func main() {
	var o options
	flag.StringVar(&o.repo, "little-loops", "", "a checkout of little-loops (its scripts/ directory is used)")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "the Python that runs ll-loop")
	flag.StringVar(&o.bin, "looprun", "", "the looprun binary to compare (with simulate -o json); default: built from ./cmd/looprun")
	flag.StringVar(&o.cache, "cache", "", "keep ll-loop's outputs in this directory, and reuse them")
	flag.StringVar(&o.judge, "judge", "scripted", "ll-loop's LLM judge: scripted (the scenario's verdict, as looprun's) or host (its host CLI, as ll-loop has it)")
	only := flag.String("run", "", "walk only the loops whose names (oracles/NAME for an oracle) match this regular expression")
	which := flag.String("scenario", strings.Join(scenarios, ","), "the scenarios, separated by commas")
	jobs := flag.Int("j", 2, "simulations at once")
	flag.BoolVar(&o.verbose, "v", false, "print both walks of each loop that differs")
	flag.Parse()
	if o.repo == "" {
		fmt.Fprintln(os.Stderr, "simcompat: -little-loops PATH is required")
		os.Exit(2)
	}
	if o.judge != "scripted" && o.judge != "host" {
		fmt.Fprintf(os.Stderr, "simcompat: -judge %q: want scripted or host\n", o.judge)
		os.Exit(2)
	}
	match, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simcompat: -run:", err)
		os.Exit(2)
	}
	scens := strings.Split(*which, ",")
	for _, s := range scens {
		if !slices.Contains(scenarios, s) {
			fmt.Fprintf(os.Stderr, "simcompat: -scenario %q: want some of %v\n", s, scenarios)
			os.Exit(2)
		}
	}
	if err := run(o, match, scens, max(*jobs, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "simcompat:", err)
		os.Exit(1)
	}
}

// loops lists the bundled loops as paths under the loops directory.
func loops(dir string, match *regexp.Regexp) ([]string, error) {
	var names []string
	for _, pattern := range []string{"*.yaml", "oracles/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			rel, _ := filepath.Rel(dir, p)
			if name := strings.TrimSuffix(rel, ".yaml"); match.MatchString(name) {
				names = append(names, name)
			}
		}
	}
	return names, nil
}

type result struct {
	name, scenario string
	ll, ours       Walk
	diff           []string
}

func run(o options, match *regexp.Regexp, scens []string, jobs int) error {
	if o.bin == "" {
		o.bin = filepath.Join(os.TempDir(), "simcompat-looprun")
		if out, err := exec.Command("go", "build", "-o", o.bin, "./cmd/looprun").CombinedOutput(); err != nil {
			return fmt.Errorf("build looprun: %w\n%s", err, out)
		}
	}
	dir := filepath.Join(o.repo, "scripts", "little_loops", "loops")
	names, err := loops(dir, match)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("no loops in %s", dir)
	}
	if o.cache != "" {
		if err := os.MkdirAll(filepath.Join(o.cache, o.judge), 0o755); err != nil {
			return err
		}
	}
	type job struct{ name, scenario string }
	work := make(chan job)
	results := make(map[job]result)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				r, err := compare(o, dir, j.name, j.scenario)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				results[j] = r
				mu.Unlock()
			}
		}()
	}
	for _, s := range scens {
		for _, n := range names {
			work <- job{n, s}
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for _, s := range scens {
		agree := 0
		var differ []string
		for _, n := range names {
			r := results[job{n, s}]
			if len(r.diff) == 0 {
				agree++
				continue
			}
			line := fmt.Sprintf("  %-40s %s", n, strings.Join(r.diff, "; "))
			if o.verbose {
				line += "\n" + describe("ll-loop", r.ll) + "\n" + describe("looprun", r.ours)
			}
			differ = append(differ, line)
		}
		fmt.Printf("%s: %d of %d agree (ll-loop's judge: %s)\n", s, agree, len(names), o.judge)
		for _, l := range differ {
			fmt.Println(l)
		}
	}
	return nil
}

func describe(who string, w Walk) string {
	if !w.Walked {
		return fmt.Sprintf("      %s: no walk: %s", who, w.Note)
	}
	return fmt.Sprintf("      %s: %s after %d in %s, %d commands: %s", who, w.TerminatedBy, w.Iterations, w.FinalState, w.Commands, strings.Join(w.Entered, " "))
}

// compare walks one loop under one scenario with both simulators.
func compare(o options, dir, name, scenario string) (result, error) {
	r := result{name: name, scenario: scenario}
	file := filepath.Join(dir, name+".yaml")
	ll, err := llLoop(o, file, name, scenario)
	if err != nil {
		return r, err
	}
	ours, err := looprun(o, file, name, scenario)
	if err != nil {
		return r, err
	}
	r.ll, r.ours, r.diff = ll, ours, Diff(ll, ours)
	return r, nil
}

// llLoop runs ll-loop simulate (or reads its output from the cache) in an
// empty directory.
func llLoop(o options, file, name, scenario string) (Walk, error) {
	cached := ""
	if o.cache != "" {
		cached = filepath.Join(o.cache, o.judge, strings.ReplaceAll(name, "/", "__")+"."+scenario+".out")
		if b, err := os.ReadFile(cached); err == nil {
			return parseOrNote(ParseLLLoop, string(b), ""), nil
		}
	}
	stdout, stderr, err := inEmptyDir(workDir(name, scenario, "ll-loop"), func(wd string) *exec.Cmd {
		cmd := exec.Command(o.python, "-c", llLoopScript, "simulate", file, "--scenario", scenario)
		cmd.Env = append(os.Environ(), "PWD="+wd, "PYTHONPATH="+filepath.Join(o.repo, "scripts"), "SIMCOMPAT_JUDGE="+o.judge)
		return cmd
	})
	if err != nil {
		return Walk{}, fmt.Errorf("%s %s with ll-loop: %w", name, scenario, err)
	}
	if cached != "" {
		if err := os.WriteFile(cached, []byte(stdout), 0o644); err != nil {
			return Walk{}, err
		}
	}
	return parseOrNote(ParseLLLoop, stdout, stderr), nil
}

// llLoopScript runs ll-loop with a clock whose sleeps end at once, the
// time moving on by what was slept. With SIMCOMPAT_JUDGE=scripted, the LLM
// judge (an llm_structured evaluator, an agent state without an
// evaluator) is not asked: the verdict is the scenario's for the judged
// action's exit code (0 yes, 1 no, else error), and a judged state
// without an action takes the scenario's next result, as looprun
// simulate scripts it. Else ll-loop asks its host CLI, which a machine
// without one (no claude on PATH) answers by ending the walk in error.
// The script also prints the state the walk ended in (finalLine), which
// ll-loop's summary leaves out.
const llLoopScript = `import os, sys, time
_time, _monotonic, _offset = time.time, time.monotonic, [0.0]
def _sleep(s):
    _offset[0] += max(0.0, s)
time.sleep = _sleep
time.time = lambda: _time() + _offset[0]
time.monotonic = lambda: _monotonic() + _offset[0]
if os.environ.get("SIMCOMPAT_JUDGE") == "scripted":
    import little_loops.fsm.executor as ex
    from little_loops.fsm.evaluators import EvaluationResult
    _evaluate = ex.FSMExecutor._evaluate
    def _scripted(self, state, action_result, ctx):
        ev = state.evaluate
        if ev is None:
            judged = action_result is not None and self._action_mode(state) == "prompt"
        else:
            judged = ev.type == "llm_structured" and ev.type not in self._contributed_evaluators
        if not judged or not self.fsm.llm.enabled:
            return _evaluate(self, state, action_result, ctx)
        if action_result is not None:
            code = action_result.exit_code
        else:
            self.action_runner.call_count += 1
            code = self.action_runner._scenario_result()
        verdict = {0: "yes", 1: "no"}.get(code, "error")
        self._emit("evaluate", {"type": ev.type if ev else "default", "verdict": verdict, "simulated": True})
        return EvaluationResult(verdict=verdict, details={"simulated": True})
    ex.FSMExecutor._evaluate = _scripted
import little_loops.fsm.executor as _ex
_run = _ex.FSMExecutor.run
def _run_and_tell(self):
    r = _run(self)
    print("[simcompat] final state: " + r.final_state)
    return r
_ex.FSMExecutor.run = _run_and_tell
sys.argv[0] = "ll-loop"
from little_loops.cli.loop import main_loop
sys.exit(main_loop())
`

// looprun runs looprun simulate -o json in an empty directory; it finds the
// bundled sub-loops as ll-loop does, through the little_loops package.
func looprun(o options, file, name, scenario string) (Walk, error) {
	stdout, stderr, err := inEmptyDir(workDir(name, scenario, "looprun"), func(wd string) *exec.Cmd {
		cmd := exec.Command(o.bin, "simulate", file, "--scenario", scenario, "-o", "json", "--loops-dir", filepath.Join(wd, ".loops"))
		cmd.Env = append(os.Environ(), "PWD="+wd, "PYTHONPATH="+filepath.Join(o.repo, "scripts"))
		return cmd
	})
	if err != nil {
		return Walk{}, fmt.Errorf("%s %s with looprun: %w", file, scenario, err)
	}
	return parseOrNote(ParseLooprun, stdout, stderr), nil
}

func parseOrNote(parse func(string) (Walk, error), stdout, stderr string) Walk {
	w, err := parse(stdout)
	if err != nil {
		return Walk{Note: lastLine(stderr)}
	}
	return w
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// workDir is where one simulation runs: a name of its own made of the
// loop's name, the scenario and the simulator, without random digits. A
// simulated output quotes its action, which may name the run_dir (under
// looprun's --loops-dir here), and a failed action's output is read for
// the causes of a transient failure: a random name holding, say, 529 or
// 401 would route a walk as an API error or a refused credential.
func workDir(name, scenario, who string) string {
	return filepath.Join(os.TempDir(), "simcompat", strings.ReplaceAll(name, "/", "__")+"."+scenario+"."+who)
}

// inEmptyDir runs the command in the directory wd, made empty first and
// removed after; an exit status is no error, a command that did not start
// is.
func inEmptyDir(wd string, mk func(wd string) *exec.Cmd) (string, string, error) {
	if err := os.RemoveAll(wd); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return "", "", err
	}
	defer os.RemoveAll(wd)
	cmd := mk(wd)
	cmd.Dir = wd
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	var stopped atomic.Bool
	timer := time.AfterFunc(timeout, func() {
		stopped.Store(true)
		_ = cmd.Process.Kill()
	})
	defer timer.Stop()
	if err := cmd.Wait(); err != nil {
		if exited := (*exec.ExitError)(nil); !errors.As(err, &exited) {
			return "", "", err
		}
	}
	if stopped.Load() {
		fmt.Fprintf(&stderr, "\nsimcompat: stopped after %s\n", timeout)
	}
	return stdout.String(), stderr.String(), nil
}
