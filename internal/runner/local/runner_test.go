package local

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner/process"
	"github.com/looprun/looprun/test/proc"
)

func run(t *testing.T, r *Runner, a *executor.Action) executor.ActionResult {
	t.Helper()
	return r.Run(context.Background(), a)
}

// With output files, each action's tail is its own and the files keep everything.
func TestOutputFilesKeepEverything(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	r := &Runner{Stdout: open("out"), Stderr: open("err"), OutputWindow: 8}
	first := run(t, r, &executor.Action{Command: "echo first; echo e1 >&2"})
	second := run(t, r, &executor.Action{Command: "echo 0123456789abcdef"})
	if first.Output != "first\n" || first.Stderr != "e1\n" || first.OutputTruncated {
		t.Errorf("first %+v", first)
	}
	if second.Output != "9abcdef\n" || !second.OutputTruncated || second.Stderr != "" {
		t.Errorf("second %+v", second)
	}
	all, _ := os.ReadFile(filepath.Join(dir, "out"))
	if string(all) != "first\n0123456789abcdef\n" {
		t.Errorf("output file %q", all)
	}
}

func TestExitCodesAndOutput(t *testing.T) {
	r := &Runner{}
	tests := []struct {
		cmd            string
		code           int
		stdout, stderr string
	}{
		{"echo hello", 0, "hello\n", ""},
		{"echo oops >&2; exit 1", 1, "", "oops\n"},
		{"exit 3", 3, "", ""},
		{"kill -9 $$", -9, "", ""},
		{"kill -TERM $$", -15, "", ""},
	}
	for _, tt := range tests {
		res := run(t, r, &executor.Action{Command: tt.cmd, Timeout: 10 * time.Second})
		if res.ExitCode != tt.code || res.Output != tt.stdout || res.Stderr != tt.stderr {
			t.Errorf("%q: exit %d out %q err %q", tt.cmd, res.ExitCode, res.Output, res.Stderr)
		}
	}
}

func TestCannotStart(t *testing.T) {
	res := run(t, &Runner{Shell: "/nonexistent/shell"}, &executor.Action{Command: "true"})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "cannot start /nonexistent/shell") {
		t.Errorf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
}

func TestRunsInDirWithEnv(t *testing.T) {
	dir := t.TempDir()
	res := run(t, &Runner{Dir: dir, Env: []string{"GREETING=hi"}}, &executor.Action{Command: "echo $GREETING; pwd"})
	if res.Output != "hi\n"+dir+"\n" {
		t.Errorf("output %q", res.Output)
	}
}

// A timeout kills the whole process group, grandchildren included, and exits 124.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	late := filepath.Join(dir, "late")
	cmd := "(sleep 30; touch " + late + ") & echo $! > " + pidFile + "; sleep 30"
	start := time.Now()
	res := run(t, &Runner{}, &executor.Action{Command: cmd, Timeout: 300 * time.Millisecond})
	if res.ExitCode != evaluate.ExitTimeout || !strings.Contains(res.Stderr, "timed out") {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	proc.WaitGone(t, pid) // the grandchild does not survive the timeout
}

func TestCancelKillsAction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	res := (&Runner{}).Run(ctx, &executor.Action{Command: "sleep 30", Timeout: time.Minute})
	if res.ExitCode != -9 || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d after %v", res.ExitCode, time.Since(start))
	}
}

func TestBackgroundChildDoesNotHang(t *testing.T) {
	start := time.Now()
	res := run(t, &Runner{}, &executor.Action{Command: "sleep 30 & echo started", Timeout: time.Minute})
	if res.ExitCode != 0 || res.Output != "started\n" || time.Since(start) > 10*time.Second {
		t.Errorf("exit %d out %q after %v", res.ExitCode, res.Output, time.Since(start))
	}
}

// An agent printing stream-json: the action's output (and its log) is the
// assistant's text as it came, and the result record's usage is reported.
func TestAgentStream(t *testing.T) {
	dir := t.TempDir()
	stub := `#!/bin/sh
echo '{"type":"system","subtype":"init","model":"claude-haiku-4-5"}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"working on: '"$1"'"}]}}'
echo 'a plain line'
printf '%s\n' '{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash"},{"type":"text","text":"done\nVERDICT: ok"}]}}'
echo '{"type":"result","is_error":false,"total_cost_usd":0.5,"usage":{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":5,"cache_creation_input_tokens":6}}'
`
	if err := os.WriteFile(filepath.Join(dir, "agent"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	r := &Runner{Stdout: &log, Dir: dir}
	a := &executor.Action{State: "fix", Iteration: 2, RunDir: "runs/r1/", Command: "fix it", Agent: true, AgentStream: true, AgentCommand: []string{filepath.Join(dir, "agent")}, Timeout: 10 * time.Second,
		Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "VERDICT: ok"}}
	res := run(t, r, a)
	want := "working on: fix it\na plain line\ndone\nVERDICT: ok\n"
	if res.Output != want || log.String() != want {
		t.Errorf("output %q, log %q, want %q", res.Output, log.String(), want)
	}
	if res.Verdict == nil || res.Verdict.Verdict != v1alpha1.VerdictSuccess {
		t.Errorf("verdict %+v: the judge did not read the text", res.Verdict)
	}
	if u := res.Usage; u == nil || *u != (agentstream.Usage{InputTokens: 3, OutputTokens: 4, CacheReadTokens: 5, CacheCreationTokens: 6, Model: "claude-haiku-4-5", CLICostUSD: 0.5}) {
		t.Errorf("usage %+v", u)
	}
	row, err := os.ReadFile(filepath.Join(dir, "runs/r1/usage.jsonl"))
	if err != nil || !strings.HasPrefix(string(row), `{"iteration": 2, "state": "fix", "action_type": "prompt", "input_tokens": 3, "output_tokens": 4, "cache_read_tokens": 5, "cache_creation_tokens": 6, "model": "claude-haiku-4-5", "timestamp": "`) ||
		!strings.HasSuffix(string(row), `+00:00", "gen_ai.usage.input_tokens": 3, "gen_ai.usage.output_tokens": 4, "gen_ai.usage.cache_read.input_tokens": 5, "gen_ai.usage.cache_creation.input_tokens": 6}`+"\n") {
		t.Errorf("usage.jsonl %q %v", row, err)
	}
	// A plain-text agent: its output as printed, usage unknown.
	a.AgentCommand = []string{"echo"}
	if res := run(t, &Runner{}, a); res.Output != "fix it\n" || res.Usage != nil {
		t.Errorf("plain agent: output %q usage %+v", res.Output, res.Usage)
	}
}

func TestAgentCommandStub(t *testing.T) {
	dir := t.TempDir()
	stub := "#!/bin/sh\nprintf 'agent args:'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo\n"
	if err := os.WriteFile(filepath.Join(dir, "claude"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	res := run(t, &Runner{}, &executor.Action{Command: "/fix the tests", Agent: true, Timeout: 10 * time.Second})
	if res.Output != "agent args: [--dangerously-skip-permissions] [--verbose] [--output-format] [stream-json] [-p] [/fix the tests]\n" {
		t.Errorf("output %q", res.Output)
	}
	res = run(t, &Runner{AgentCommand: []string{"claude", "--model", "x", "-p"}}, &executor.Action{Command: "hi", Agent: true})
	if res.Output != "agent args: [--model] [x] [-p] [hi]\n" {
		t.Errorf("configured command output %q", res.Output)
	}
}

// An action printing 1 GiB keeps only the window and leaves memory flat.
func TestHugeOutputMemoryIsFlat(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := run(t, &Runner{}, &executor.Action{Command: "head -c 1073741824 /dev/zero | tr '\\0' x; echo; echo END", Timeout: 2 * time.Minute})
	runtime.ReadMemStats(&after)
	if res.ExitCode != 0 || len(res.Output) != process.DefaultOutputWindow || !strings.HasSuffix(res.Output, "x\nEND\n") || !res.OutputTruncated {
		t.Fatalf("exit %d, kept %d bytes, truncated %v", res.ExitCode, len(res.Output), res.OutputTruncated)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
		t.Errorf("allocated %d MiB while reading 1 GiB", grown>>20)
	}
}

// A command that calls the agent several times (a learning gate's explore
// calls) writes one prompt row per call that reported usage, each with
// that call's model; a sub-loop's action writes its row where UsageTo
// says (the top run's run_dir, state and iteration).
func TestUsageRowsPerCallAndTarget(t *testing.T) {
	dir := t.TempDir()
	call := func(model string, in int) string {
		return `echo '{"type":"system","subtype":"init","model":"` + model + `"}'; ` +
			`echo '{"type":"result","is_error":false,"usage":{"input_tokens":` + strconv.Itoa(in) + `,"output_tokens":1}}'; `
	}
	gate := &executor.Action{State: "gate", Iteration: 3, RunDir: "runs/r1/", CallsAgent: true, AgentStream: true, Timeout: 10 * time.Second,
		Command: call("m1", 7) + "echo 'looprun-learning: explore 2 x'; " + call("m2", 9) + "echo '{\"type\":\"result\",\"is_error\":false}'"}
	res := run(t, &Runner{Dir: dir}, gate)
	if res.Usage == nil || res.Usage.InputTokens != 16 {
		t.Fatalf("usage %+v", res.Usage)
	}
	b, err := os.ReadFile(filepath.Join(dir, "runs/r1/usage.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(rows) != 2 ||
		!strings.HasPrefix(rows[0], `{"iteration": 3, "state": "gate", "action_type": "prompt", "input_tokens": 7, "output_tokens": 1, "cache_read_tokens": 0, "cache_creation_tokens": 0, "model": "m1", `) ||
		!strings.HasPrefix(rows[1], `{"iteration": 3, "state": "gate", "action_type": "prompt", "input_tokens": 9, "output_tokens": 1, "cache_read_tokens": 0, "cache_creation_tokens": 0, "model": "m2", `) {
		t.Errorf("usage.jsonl:\n%s", b)
	}
	child := &executor.Action{State: "ask", Iteration: 1, RunDir: "child/", Agent: true, AgentStream: true, Timeout: 10 * time.Second,
		AgentCommand: []string{"sh", "-c", call("m3", 5)}, Command: "x",
		UsageTo: &executor.UsageTarget{RunDir: "runs/top/", State: "sub", Iteration: 4}}
	run(t, &Runner{Dir: dir}, child)
	b, err = os.ReadFile(filepath.Join(dir, "runs/top/usage.jsonl"))
	if err != nil || !strings.HasPrefix(string(b), `{"iteration": 4, "state": "sub", "action_type": "prompt", "input_tokens": 5, `) {
		t.Errorf("the child's row %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "child", "usage.jsonl")); !os.IsNotExist(err) {
		t.Errorf("the child's own run_dir got a usage row: %v", err)
	}
}
