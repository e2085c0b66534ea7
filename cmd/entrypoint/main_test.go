package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/entrypoint"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/test/proc"
)

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "entrypoint")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return bin
}

type message struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	TimedOut bool   `json:"timedOut"`
	Verdict  *struct {
		Verdict string `json:"verdict"`
	} `json:"verdict"`
}

func TestWrapper(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	term := filepath.Join(dir, "termination-log")
	read := func() message {
		b, err := os.ReadFile(term)
		if err != nil {
			t.Fatal(err)
		}
		var m message
		if err := json.Unmarshal(b, &m); err != nil || len(b) > 4096 {
			t.Fatalf("termination message %q: %v", b, err)
		}
		return m
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"--termination-log", term}, args...)...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}

	code, out := run("--evaluate", `{"type":"output_contains","pattern":"ready"}`, "--", "bash", "-c", "echo ready; exit 3")
	if m := read(); code != 3 || out != "ready\n" || m.ExitCode != 3 || m.Stdout != "ready\n" || m.Verdict == nil || m.Verdict.Verdict != "error" {
		t.Errorf("exit %d, log %q, message %+v", code, out, m)
	}
	code, _ = run("--timeout", "200ms", "--", "bash", "-c", "sleep 30")
	if m := read(); code != 124 || !m.TimedOut {
		t.Errorf("timeout: exit %d, message %+v", code, m)
	}
	code, _ = run("--", "bash", "-c", "kill -KILL $$")
	if m := read(); code != 128+9 || m.ExitCode != -9 {
		t.Errorf("signal: exit %d, message %+v", code, m)
	}
	if code, _ := run("--evaluate", "{not json", "--", "true"); code != 2 {
		t.Errorf("bad --evaluate: exit %d", code)
	}

	// A SIGTERM to the wrapper reaches the action, once it says its trap is set.
	cmd, lines := startWrapper(t, bin, term, "trap 'echo stopping; exit 5' TERM; echo trap set; sleep 30 & wait")
	waitLine(t, lines, "trap set")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if m := read(); cmd.ProcessState.ExitCode() != 5 || !strings.Contains(m.Stdout, "stopping") {
		t.Errorf("forwarded SIGTERM: exit %d, message %+v", cmd.ProcessState.ExitCode(), m)
	}

	// Killed outright, the wrapper takes the action with it.
	cmd, lines = startWrapper(t, bin, term, "echo $$; sleep 30")
	pid, err := strconv.Atoi(<-lines)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	proc.WaitGone(t, pid) // the action died with its killed wrapper

	// The init container's copy.
	dst := filepath.Join(dir, "copied")
	if code, out := run("--copy-to", dst); code != 0 {
		t.Fatalf("copy: %d %s", code, out)
	}
	if out, err := exec.Command(dst, "--termination-log", term, "--", "echo", "from the copy").CombinedOutput(); err != nil || string(out) != "from the copy\n" {
		t.Errorf("copied binary: %v %q", err, out)
	}
}

// startWrapper runs the wrapper on a bash script; lines gets its stdout, line by line.
func startWrapper(t *testing.T, bin, term, script string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin, "--termination-log", term, "--", "bash", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines
}

func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	for l := range lines {
		if l == want {
			return
		}
	}
	t.Fatalf("the action never said %q", want)
}

// The same action routes the same whether the local runner ran it or the
// wrapper in a Pod did, even when what decides is over 1 MiB before the end
// of its output.
func TestSameRouteWithBothRunners(t *testing.T) {
	bin := build(t)
	term := filepath.Join(t.TempDir(), "termination-log")
	spec := v1alpha1.LoopSpec{Initial: "check", States: map[string]v1alpha1.State{
		"check": {
			Action:    `echo 'errors = 0'; echo NEEDLE; head -c 2097152 /dev/zero | tr '\\0' .; echo`,
			Evaluate:  &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "NEE+DLE"},
			OnSuccess: "found", OnFailure: "missing",
		},
		"found":   {Terminal: true},
		"missing": {Terminal: true},
	}}
	m, err := executor.New("same", &spec, executor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	route := func(run func(*executor.Action) executor.ActionResult) string {
		state := &v1alpha1.RunState{}
		m.Start(state, "r", now)
		step, _ := m.Plan(state, now)
		if step.Action == nil || step.Action.Evaluate == nil {
			t.Fatalf("step %+v carries no evaluator for the runner", step)
		}
		res := run(step.Action)
		if !res.OutputTruncated {
			t.Errorf("output of %d bytes was not cut to a tail", len(res.Output))
		}
		m.Complete(state, &res, now)
		return state.CurrentState
	}
	onLaptop := route(func(a *executor.Action) executor.ActionResult { return (&local.Runner{}).Run(t.Context(), a) })
	inPod := route(func(a *executor.Action) executor.ActionResult {
		eval, err := json.Marshal(a.Evaluate)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "--termination-log", term, "--evaluate", string(eval), "--", "bash", "-c", a.Command).CombinedOutput(); err != nil {
			t.Fatalf("%v: %.200s", err, out)
		}
		return readResult(t, term)
	})
	if onLaptop != "found" || inPod != "found" {
		t.Errorf("routed to %s on a laptop, %s in a Pod; want found for both", onLaptop, inPod)
	}
}

// readResult decodes the result the wrapper wrote to term.
func readResult(t *testing.T, term string) executor.ActionResult {
	t.Helper()
	msg, err := os.ReadFile(term)
	if err != nil {
		t.Fatal(err)
	}
	res, err := entrypoint.Decode(string(msg))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The wrapper runs the action's probe after it, where it ran, and puts
// what it printed in the result.
func TestWrapperRunsTheProbe(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	term := filepath.Join(dir, "termination-log")
	cmd := exec.Command(bin, "--termination-log", term, "--", "bash", "-c", "printf '3\\n4\\n' > history")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LOOPRUN_PROBE=cat -- history")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	res := readResult(t, term)
	if p := res.Probe; p == nil || p.ExitCode != 0 || p.Output != "3\n4\n" || len(p.SHA256) != 64 {
		t.Fatalf("probe %+v", res.Probe)
	}
}

// An agent printing stream-json: the container log and the result have its
// text, the result its usage.
func TestWrapperDecodesAgentStream(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	term := filepath.Join(dir, "termination-log")
	script := `printf '%s\n' '{"type":"system","subtype":"init","model":"m1"}' '{"type":"assistant","message":{"content":[{"type":"text","text":"hello"}]}}' '{"type":"result","usage":{"input_tokens":7,"output_tokens":8}}'`
	cmd := exec.Command(bin, "--termination-log", term, "--", "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), entrypoint.AgentStreamEnv+"=prompt", "LOOPRUN_RUN_DIR=.loops/runs/r1/", "LOOPRUN_STATE=fix", "LOOPRUN_ITERATION=3")
	out, err := cmd.Output()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("log %q, %v", out, err)
	}
	res := readResult(t, term)
	if res.Output != "hello\n" || res.Usage == nil || res.Usage.InputTokens != 7 || res.Usage.OutputTokens != 8 || res.Usage.Model != "m1" {
		t.Fatalf("output %q usage %+v", res.Output, res.Usage)
	}
	row, err := os.ReadFile(filepath.Join(dir, ".loops/runs/r1/usage.jsonl"))
	if err != nil || !strings.HasPrefix(string(row), `{"iteration": 3, "state": "fix", "action_type": "prompt", "input_tokens": 7, "output_tokens": 8, "cache_read_tokens": 0, "cache_creation_tokens": 0, "model": "m1", "timestamp": "`) {
		t.Fatalf("usage.jsonl %q %v", row, err)
	}
}

// The run's run_dir exists when the action starts, as little-loops makes it.
func TestWrapperMakesTheRunDir(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--termination-log", filepath.Join(dir, "termination-log"), "--", "bash", "-c", "echo x > .loops/runs/r1/out")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LOOPRUN_RUN_DIR=.loops/runs/r1/")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".loops/runs/r1/out")); err != nil || string(b) != "x\n" {
		t.Fatalf("%q %v", b, err)
	}
}
