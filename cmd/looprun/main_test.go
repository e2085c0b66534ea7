package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/test/proc"
)

var binary string

func TestMain(m *testing.M) {
	// The tests run looprun in this process too: on a developer's terminal
	// its approval states would ask there and wait. No one types here.
	if null, err := os.Open(os.DevNull); err == nil {
		os.Stdin = null
	}
	dir, err := os.MkdirTemp("", "looprun-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "looprun")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	stopCluster()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// looprun runs the built binary in dir.
func looprun(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const fixLoop = `name: fixer
initial: check
states:
  check:
    action: test -f fixed
    on_yes: done
    on_no: fix
  fix:
    action: touch fixed
    next: check
  done:
    terminal: true
`

func TestRunCompletes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fix.yaml", fixLoop)
	r := looprun(t, dir, "run", "fix.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"[1] check -> fix (failure)", "[2] fix -> check", "[3] check -> done (success)"} {
		if !strings.Contains(steps(r.stdout), want) {
			t.Errorf("progress lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, want := range []string{"Running loop: fix", "] check (", " -> test -f fixed", "verdict: failure (exit code 1)", "Loop completed: done (3 iterations, "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("progress lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "fixed")); err != nil {
		t.Error("the action did not run in the current directory")
	}
	st := looprun(t, dir, "status", "fixer", "-o", "json")
	var sf localrun.StateFile
	if err := json.Unmarshal([]byte(st.stdout), &sf); err != nil || sf.Status != "completed" || sf.Iteration != 3 {
		t.Errorf("status %s (%v)", st.stdout, err)
	}
	if r := looprun(t, dir, "status", "fixer"); !strings.Contains(r.stdout, "Status:") || !strings.Contains(r.stdout, "completed") {
		t.Errorf("status text %q", r.stdout)
	}
	if r := looprun(t, dir, "list"); !strings.Contains(r.stdout, "fixer") || !strings.Contains(r.stdout, "completed") {
		t.Errorf("list %q", r.stdout)
	}
	if r := looprun(t, dir, "list", "--running"); strings.Contains(r.stdout, "fixer") {
		t.Errorf("list --running shows a completed run: %q", r.stdout)
	}
	// A damaged state file is listed and named; the others still are.
	broken := filepath.Join(dir, ".loops", ".running", "broken.state.json")
	if err := os.WriteFile(broken, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := looprun(t, dir, "list"); r.code != 1 || !strings.Contains(r.stdout, "fixer") ||
		!strings.Contains(r.stdout, "broken") || !strings.Contains(r.stdout, "unreadable") || !strings.Contains(r.stderr, "broken.state.json is not a readable state file") {
		t.Errorf("list with a damaged state file: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	h := looprun(t, dir, "history", "fixer", "--tail", "2")
	lines := strings.Split(strings.TrimSpace(h.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "loop_complete") {
		t.Errorf("history %q", h.stdout)
	}
	if r := looprun(t, dir, "history", "fixer", "-o", "json"); !strings.HasPrefix(r.stdout, `{"event":"loop_start","seq":1,`) {
		t.Errorf("history json %q", r.stdout[:min(len(r.stdout), 80)])
	}
	if r := looprun(t, dir, "history", "fixer", "--type", "routee"); r.code != 1 || !strings.Contains(r.stderr, `--type "routee": no such event type`) {
		t.Errorf("history of a misspelt type: exit %d, %q", r.code, r.stderr)
	}
	if r := looprun(t, dir, "history", "fixer", "--type", "loop_fork"); r.code != 0 || r.stdout != "" {
		t.Errorf("history of a type the log lacks: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "run", "fix.yaml", "--max-iterations", "0"); r.code == 0 || !strings.Contains(r.stderr, "--max-iterations 0") {
		t.Errorf("--max-iterations 0: exit %d, %q", r.code, r.stderr)
	}
	if r := looprun(t, dir, "run", "-q", "fix.yaml"); r.code != 0 || r.stderr != "" {
		t.Errorf("-q printed %q (exit %d)", r.stderr, r.code)
	}
}

func TestRunByNameWithContext(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ".loops/greet.yaml", "name: greet\ninitial: hi\nstates:\n  hi:\n    action: echo \"hello ${context.who}\" > out.txt\n    next: done\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "greet", "--context", "who=loop world"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "hello loop world\n" {
		t.Errorf("out.txt %q", b)
	}
	if r := looprun(t, dir, "run", "greet"); r.code != 1 || !strings.Contains(r.stderr, `${context.who}`) || !strings.Contains(r.stderr, `state "hi"`) {
		t.Errorf("missing variable: exit %d, %q", r.code, r.stderr)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fail.yaml", "name: f\ninitial: a\nstates:\n  a:\n    action: exit 1\n    on_yes: done\n    on_no: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n")
	write(t, dir, "spin.yaml", "name: s\ninitial: a\nmax_steps: 3\nstates:\n  a:\n    action: exit 1\n    on_no: a\n    on_yes: done\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "fail.yaml"); r.code != 2 {
		t.Errorf("failure terminal: exit %d", r.code)
	}
	r := looprun(t, dir, "run", "spin.yaml")
	// A little-loops file ends by its step cap as ll-loop says it.
	if r.code != 1 || !strings.Contains(r.stderr, "ended: max_steps") {
		t.Errorf("max iterations: exit %d %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".loops", ".running", "s.events.jsonl")); !strings.Contains(string(b), `"event":"loop_complete"`) || !strings.Contains(string(b), `"terminated_by":"max_steps"`) {
		t.Errorf("loop_complete of a little-loops file: %s", b)
	}
	if r := looprun(t, dir, "run", "spin.yaml", "-n", "1"); !strings.Contains(r.stdout, "after 1 iterations") {
		t.Errorf("-n: %q", r.stdout)
	}
	if r := looprun(t, dir, "run", "nope.yaml"); r.code != 1 {
		t.Errorf("missing file: exit %d", r.code)
	}
}

// Seed FEAT-046: resume returns nothing when there is no saved run, or when
// it completed or failed.
func TestResumeNothing(t *testing.T) {
	dir := t.TempDir()
	if r := looprun(t, dir, "resume", "never-ran"); r.code != 1 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Errorf("no state: %d %q", r.code, r.stderr)
	}
	write(t, dir, "fail.yaml", "name: f\ninitial: a\nstates:\n  a:\n    action: exit 1\n    on_yes: done\n    on_no: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "fail.yaml"); r.code != 2 {
		t.Fatalf("run: exit %d", r.code)
	}
	if r := looprun(t, dir, "resume", "f"); r.code != 1 || !strings.Contains(r.stderr, "nothing to resume") || !strings.Contains(r.stderr, "failed") {
		t.Errorf("failed run: %d %q", r.code, r.stderr)
	}
	if r := looprun(t, dir, "status", "never-ran"); r.code != 1 {
		t.Errorf("status of nothing: exit %d", r.code)
	}
}

// A run that hit max_iterations is resumable with a higher cap.
func TestResumeRaisesCap(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "count.yaml", "name: count\ninitial: a\nmax_steps: 2\nstates:\n  a:\n    action: echo x >> n; test $(wc -l < n) -ge 4\n    on_no: a\n    on_yes: done\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "count.yaml"); r.code != 1 || !strings.Contains(r.stderr, "max_steps") {
		t.Fatalf("run: %d %q", r.code, r.stderr)
	}
	r := looprun(t, dir, "resume", "count", "--max-steps", "10")
	if r.code != 0 || !strings.Contains(steps(r.stdout), "[4] a -> done (success)") {
		t.Errorf("resume: %d %q", r.code, r.stdout)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ok.yaml", fixLoop)
	write(t, dir, "bad.yaml", `name: bad
initial: check
states:
  check:
    action: lint
    evaluate:
      type: output_numeric
      operator: gte
      target: 0
    on_yes: done
    on_no: fixx
  fix:
    action: echo ${captured.nothing.output}
  done:
    terminal: true
`)
	if r := looprun(t, dir, "validate", "ok.yaml"); r.code != 0 || !strings.Contains(r.stdout, "is valid") {
		t.Errorf("valid: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// A name is found as run finds it.
	write(t, dir, ".loops/named.yaml", fixLoop)
	if r := looprun(t, dir, "validate", "named"); r.code != 0 || !strings.Contains(r.stdout, "is valid") {
		t.Errorf("validate NAME: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// As ll-loop validate, a sub-loop is found beside the file naming it
	// (bundled loops name their siblings oracles/NAME); a missing one is an error.
	write(t, dir, "bundle/oracles/gate.yaml", "name: gate\ninitial: a\nstates:\n  a: {terminal: true}\n")
	write(t, dir, "bundle/outer.yaml", "name: outer\ninitial: run\nstates:\n  run:\n    loop: oracles/gate\n    on_yes: done\n  done: {terminal: true}\n")
	if r := looprun(t, dir, "validate", "bundle/outer.yaml"); r.code != 0 {
		t.Errorf("a sibling sub-loop: %d %q %q", r.code, r.stdout, r.stderr)
	}
	write(t, dir, "bundle/lost.yaml", "name: lost\ninitial: run\nstates:\n  run:\n    loop: oracles/nowhere\n    on_yes: done\n  done: {terminal: true}\n")
	if r := looprun(t, dir, "validate", "bundle/lost.yaml"); r.code != 1 || !strings.Contains(r.stdout, `states.run.loop: no loop file "oracles/nowhere"`) {
		t.Errorf("a missing sub-loop: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// An invalid file's warnings come with its errors, in one reading;
	// a warning of its spec is spelt as the file is.
	write(t, dir, "warned.yaml", "name: w\ninitial: a\nstates:\n  a:\n    action: echo ${context.x}\n    bogus: 1\n    on_yes: dnoe\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "validate", "warned.yaml"); r.code != 1 || !strings.Contains(r.stderr, "warning: warned.yaml: line 6: states.a.bogus: unknown key") ||
		!strings.Contains(r.stdout, `warned.yaml: line 7: states.a.on_yes: no state is called "dnoe" (did you mean done?)`) {
		t.Errorf("validate warned.yaml: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	write(t, dir, "warned.yaml", "name: w\ninitial: a\nstates:\n  a:\n    action: echo ${context.x}\n    on_yes: done\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "validate", "warned.yaml"); r.code != 0 || !strings.Contains(r.stderr, "warning: warned.yaml: line 5: states.a.action: ${context.x} goes into a shell command unquoted") {
		t.Errorf("validate warned.yaml: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := looprun(t, dir, "validate", "bad.yaml")
	if r.code != 1 {
		t.Fatalf("invalid: exit %d", r.code)
	}
	for _, want := range []string{
		`states.check.evaluate.operator: must be one of "eq", "ne", "lt", "le", "gt", "ge", not "gte"`,
		`line 11: states.check.on_no: no state is called "fixx" (did you mean fix?)`,
		`states.fix: state "fix" has no way out`,
		`states.fix.action`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("validate output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fix.yaml", fixLoop)
	r := looprun(t, dir, "simulate", "fix.yaml", "--scenario", "first-fail")
	if r.code != 0 || !strings.Contains(steps(r.stdout), "[1] check -> fix (failure)") || !strings.Contains(steps(r.stdout), "check -> done (success)") {
		t.Errorf("first-fail: %d\n%s", r.code, r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "fixed")); err == nil {
		t.Error("simulate ran an action")
	}
	if r := looprun(t, dir, "simulate", "fix.yaml", "--scenario", "all-fail"); r.code != 1 || !strings.Contains(r.stdout, "max_steps") {
		t.Errorf("all-fail: %d\n%s", r.code, r.stdout)
	}
	r = looprun(t, dir, "simulate", "fix.yaml", "--scenario", "all-pass")
	if r.code != 0 || strings.Contains(steps(r.stdout), "-> fix") {
		t.Errorf("all-pass: %d\n%s", r.code, r.stdout)
	}
	// As ll-loop simulate, it says it is one, and sums up the walk.
	if !strings.HasPrefix(r.stdout, "=== SIMULATION: fixer (scenario=all-pass): no action runs ===\n") ||
		!strings.HasSuffix(r.stdout, "=== Summary ===\nStates visited: check → done\nIterations: 1\nWould have executed 1 commands\nTerminated by: terminal\n") {
		t.Errorf("all-pass: no banner or summary:\n%s", r.stdout)
	}
	// As ll-loop simulate: alternating starts with a failure, so check
	// (every odd action) always fails; all-error errs at once.
	if r := looprun(t, dir, "simulate", "fix.yaml", "--scenario", "alternating"); r.code != 1 || !strings.Contains(r.stdout, "max_steps") {
		t.Errorf("alternating: %d\n%s", r.code, r.stdout)
	}
	if r := looprun(t, dir, "simulate", "fix.yaml", "--scenario", "all-error"); r.code != 1 || !strings.Contains(r.stderr, "ended: error: No valid transition") {
		t.Errorf("all-error: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "simulate", "fix.yaml", "--scenario", "chaos"); r.code != 1 {
		t.Errorf("unknown scenario: exit %d", r.code)
	}
	// The state's evaluator judges the simulated output, as in ll-loop
	// simulate: "[simulated output for: echo maybe]" has no "yes".
	write(t, dir, "judge.yaml", "name: judge\ninitial: check\nstates:\n  check:\n    action: echo maybe\n    evaluate: {type: output_contains, pattern: \"for: echo\"}\n    route: {\"yes\": other, _: done}\n  other:\n    action: \"true\"\n    next: done\n  done: {terminal: true}\n")
	if r := looprun(t, dir, "simulate", "judge.yaml", "--scenario", "all-pass"); r.code != 0 || !strings.Contains(steps(r.stdout), "[1] check -> other (success)") {
		t.Errorf("judged simulation: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "simulate", "judge.yaml", "--scenario", "all-fail"); r.code != 0 || !strings.Contains(steps(r.stdout), "[1] check -> done (error)") {
		t.Errorf("judged simulation, failing: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestConvertRoundTrips(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fix_loop.yaml", strings.Replace(fixLoop, "name: fixer", "name: fix_loop", 1)+"max_steps: 9\ntimeout: 90\n")
	r := looprun(t, dir, "convert", "fix_loop.yaml")
	if r.code != 0 || !strings.Contains(r.stdout, "kind: Loop") || !strings.Contains(r.stdout, "name: fix-loop") || strings.Contains(r.stdout, "status") {
		t.Fatalf("convert: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	manifest := write(t, dir, "manifest.yaml", r.stdout)
	a, err := loopfile.Load(filepath.Join(dir, "fix_loop.yaml"), loopfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := loopfile.Load(manifest, loopfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a.Loop.Spec)
	jb, _ := json.Marshal(b.Loop.Spec)
	if string(ja) != string(jb) {
		t.Errorf("specs differ:\n%s\n%s", ja, jb)
	}
}

// A run killed with SIGKILL in the middle of a state resumes and finishes
// with the right final state; the state file is never half-written.
func TestKilledRunResumes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "slow.yaml", `name: slow
initial: a
states:
  a:
    action: echo a >> trace
    next: b
  b:
    action: echo b-start >> trace; test -f go-on || sleep 30; echo b-end >> trace
    next: c
  c:
    action: echo c >> trace
    on_yes: done
  done:
    terminal: true
`)
	cmd := exec.Command(binary, "run", "slow.yaml")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// b runs, and the state file says so (its save runs beside the action).
	proc.Until(t, 10*time.Second, "state b to start", func() bool {
		sf, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/slow.state.json"))
		return strings.Contains(readFile(dir, "trace"), "b-start") && err == nil && sf.ActiveAction != nil && sf.ActiveAction.State == "b"
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	sf, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/slow.state.json"))
	if err != nil {
		t.Fatalf("state file after SIGKILL: %v", err)
	}
	if sf.Status != "running" || sf.CurrentState != "b" || sf.ActiveAction == nil || sf.Iteration != 2 {
		t.Fatalf("saved state %+v", sf)
	}
	write(t, dir, "go-on", "")
	r := looprun(t, dir, "resume", "slow")
	if r.code != 0 {
		t.Fatalf("resume: exit %d %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "Resuming loop: slow in b at iteration 2") {
		t.Errorf("resume output %q", r.stdout)
	}
	sf, _ = localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/slow.state.json"))
	if sf.Status != "completed" || sf.CurrentState != "done" || sf.Iteration != 3 {
		t.Errorf("final state %+v", sf)
	}
	events, err := eventlog.Read(filepath.Join(dir, ".loops/.running/slow.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	enters := 0
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Type == "state_enter" {
			enters++
		}
	}
	if enters != 3 {
		t.Errorf("%d state_enter events, want 3 (the resumed state is not entered twice)", enters)
	}
	if r := looprun(t, dir, "resume", "slow"); r.code != 1 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Errorf("resume of a completed run: %d %q", r.code, r.stderr)
	}
}

// Killing a run at arbitrary moments never leaves a state file that cannot be read.
func TestStateFileSurvivesKills(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "spin.yaml", "name: spin\ninitial: a\nmax_steps: 100000\nmax_edge_revisits: 100000\nstates:\n  a:\n    action: 'true'\n    capture: a\n    throttle: {warn_max: 1000000, hard_max: 1000000}\n    on_yes: $current\n  done:\n    terminal: true\n")
	for i := 0; i < 8; i++ {
		cmd := exec.Command(binary, "run", "-q", "spin.yaml")
		if i > 0 {
			cmd = exec.Command(binary, "resume", "-q", "spin")
		}
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Until the run has a state file, a kill tests nothing (and a
			// busy machine can take longer than the moments below to start).
			proc.WaitFile(t, filepath.Join(dir, ".loops/.running/spin.state.json"))
		}
		time.Sleep(time.Duration(150+37*i) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		sf, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/spin.state.json"))
		if err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		events, err := eventlog.Read(filepath.Join(dir, ".loops/.running/spin.events.jsonl"))
		if err != nil {
			t.Fatalf("kill %d: event log: %v", i, err)
		}
		if int64(len(events)) < sf.LastSeq {
			t.Fatalf("kill %d: state says seq %d, log has %d events", i, sf.LastSeq, len(events))
		}
	}
}

func readFile(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}

// Loop variables are --set KEY=VALUE (run also takes little-loops'
// --context KEY=VALUE); resume's --context is kubectl's, the kubeconfig
// context of resume loop/NAME.
func TestSetAndContextFlags(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "greet.yaml", "name: greet\ninitial: a\nstates:\n  a:\n    action: echo hi ${context.who}\n    next: done\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "greet.yaml", "--set", "who=you"); r.code != 0 || !strings.Contains(readFile(dir, ".loops/.running/greet.stdout.log"), "hi you") {
		t.Errorf("run --set: %d %s", r.code, r.stderr)
	}
	if r := looprun(t, dir, "run", "greet.yaml", "--set", "a.b=c"); r.code == 0 || !strings.Contains(r.stderr, "KEY a name") {
		t.Errorf("run --set a.b=c: %d %q", r.code, r.stderr)
	}
	kubeconfig := write(t, dir, "kubeconfig", "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
	r := looprun(t, dir, "--kubeconfig", kubeconfig, "resume", "loop/greet", "--context", "staging")
	if r.code == 0 || !strings.Contains(r.stderr, "staging") || strings.Contains(r.stderr, "KEY=VALUE") {
		t.Errorf("resume loop/NAME --context: %d %q", r.code, r.stderr)
	}
}

// A run's context gets what little-loops' runner gives it: the positional
// input under input_key, run_dir (created), input_hash, max_steps; a loop
// that would stop at a missing variable or input does not start.
func TestRunContext(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "topic.yaml", `name: topic
initial: a
input_key: topic
required_inputs: [topic]
max_steps: 7
states:
  a:
    action: "printf '%s|%s|%s' '${context.topic}' '${context.max_steps}' '${context.run_dir}' > ${context.run_dir}out.txt"
    next: done
  done:
    terminal: true
`)
	r := looprun(t, dir, "run", "topic.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, `loop topic needs input "topic"`) || !strings.Contains(r.stderr, `${context.topic} is not set (state "a" action)`) {
		t.Fatalf("without input: %d %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, ".loops", ".running", "topic.state.json")); err == nil {
		t.Error("a run refused before it started left a state file")
	}
	// As ll-loop: a value Python counts false is no input; the text "0" is one.
	write(t, dir, "falsy.yaml", `name: falsy
initial: a
required_inputs: [n]
context:
  n: 1
states:
  a:
    action: "true"
    next: done
  done:
    terminal: true
`)
	for _, in := range []string{`{"n": 0}`, `{"n": false}`, `{"n": []}`, `{"n": ""}`} {
		if r := looprun(t, dir, "run", "falsy.yaml", in); r.code != 1 || !strings.Contains(r.stderr, `loop falsy needs input "n"`) {
			t.Errorf("input %s: %d %q", in, r.code, r.stderr)
		}
	}
	if r := looprun(t, dir, "run", "-q", "falsy.yaml", "--context", "n=0"); r.code != 0 {
		t.Errorf(`input "0": %d %q`, r.code, r.stderr)
	}
	if r := looprun(t, dir, "run", "-q", "topic.yaml", "a b"); r.code != 0 {
		t.Fatalf("with input: %d %q", r.code, r.stderr)
	}
	outs, _ := filepath.Glob(filepath.Join(dir, ".loops", "runs", "topic-*", "out.txt"))
	if len(outs) != 1 {
		t.Fatalf("run_dir outputs: %v", outs)
	}
	b, _ := os.ReadFile(outs[0])
	if want := "a b|7|" + filepath.Dir(outs[0]) + "/"; string(b) != want {
		t.Errorf("context rendered %q, want %q", b, want)
	}

	// A JSON object updates the keys the context has; text goes to input,
	// with its hash.
	write(t, dir, "inp.yaml", `name: inp
initial: a
context:
  goal: 1
states:
  a:
    action: "echo ${context.goal} ${context.input:default=-} ${context.input_hash:default=-} > inp.txt"
    next: done
  done:
    terminal: true
`)
	for _, c := range []struct{ input, want string }{
		{`{"goal": 5, "other": 1}`, "5 - -\n"},
		{"abc", "1 abc ba7816bf8f01\n"}, // sha256("abc")
	} {
		if r := looprun(t, dir, "run", "-q", "inp.yaml", c.input); r.code != 0 {
			t.Fatalf("input %q: %d %q", c.input, r.code, r.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "inp.txt")); string(b) != c.want {
			t.Errorf("input %q: %q, want %q", c.input, b, c.want)
		}
	}
	// --context wins over the input and over what the runner adds.
	if r := looprun(t, dir, "run", "-q", "inp.yaml", "abc", "--context", "input=xyz", "--context", "input_hash=h"); r.code != 0 {
		t.Fatalf("--context: %d %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "inp.txt")); string(b) != "1 xyz h\n" {
		t.Errorf("--context over the input: %q", b)
	}
}

// LOOPRUN_LIBRARY_PATH (or --library-path) finds named loops and the
// libraries a loop refers to; resume finds them again.
func TestLibraryPath(t *testing.T) {
	lib, dir := t.TempDir(), t.TempDir()
	write(t, lib, "lib/steps.yaml", "fragments:\n  mark:\n    action: echo run >> marks.txt\n")
	write(t, lib, "marker.yaml", "name: marker\ninitial: a\nimport: [lib/steps.yaml]\nmax_steps: 2\nstates:\n  a:\n    fragment: mark\n    next: a\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "-q", "marker"); r.code != 1 || !strings.Contains(r.stderr, `no loop file "marker"`) {
		t.Fatalf("without a library path: %d %q", r.code, r.stderr)
	}
	t.Setenv("LOOPRUN_LIBRARY_PATH", lib)
	if r := looprun(t, dir, "run", "-q", "marker"); r.code != 1 || !strings.Contains(r.stderr, "max_steps") {
		t.Fatalf("run: %d %q", r.code, r.stderr)
	}
	if r := looprun(t, dir, "resume", "-q", "marker", "--max-steps", "3"); r.code != 1 || !strings.Contains(r.stderr, "max_steps") {
		t.Fatalf("resume: %d %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "marks.txt")); string(b) != "run\nrun\nrun\n" {
		t.Errorf("marks %q", b)
	}
	t.Setenv("LOOPRUN_LIBRARY_PATH", "")
	if r := looprun(t, dir, "validate", "--library-path", lib, "marker"); r.code != 0 {
		t.Errorf("--library-path: %d %q", r.code, r.stderr)
	}
}
