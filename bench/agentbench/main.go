// Command agentbench measures what reading an agent's stream-json costs.
//
// Per step: the looprun binary runs a self-loop of an agent action whose
// CLI (a stub) prints a session as claude --output-format stream-json does
// (an init record, three assistant messages, a tool call and its result, a
// result record with usage), against the same loop whose stub prints the
// same assistant text as plain lines with spec.agent.output: text. Each
// runs 100 and 300 iterations; the difference of the two is the cost of
// 200 iterations. Runs alternate so all see the same machine. Target: the
// stream costs at most 0.5 ms more per iteration.
//
// Memory: 1 GiB of stream-json (assistant records, and one line of
// 64 MiB) goes through the local runner's process path; the peak heap in
// use must stay bounded (target: under 64 MiB).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/local"
)

const (
	short, long = 100, 300
	target      = 500 * time.Microsecond
	heapTarget  = 64 << 20
)

const text = "Looking at the failing test.\nThe fixture was stale; regenerated it.\nAll tests pass."

var streamStub = `#!/bin/sh
cat <<'EOF2'
{"type":"system","subtype":"init","session_id":"s","model":"claude-sonnet-4-6","tools":["Bash","Edit"]}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Looking at the failing test."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make test"}}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"FAIL: fixture stale"}]}}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"The fixture was stale; regenerated it."}]}}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"All tests pass."}]}}
{"type":"result","subtype":"success","is_error":false,"result":"All tests pass.","total_cost_usd":0.01,"usage":{"input_tokens":1200,"output_tokens":300,"cache_read_input_tokens":20000,"cache_creation_input_tokens":500}}
EOF2
`

var plainStub = "#!/bin/sh\ncat <<'EOF2'\n" + text + "\nEOF2\n"

func loopFile(stub, output string) string {
	return fmt.Sprintf(`apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: agent-self}
spec:
  initial: fix
  maxEdgeRevisits: 100000
  agent: {command: [%q], output: %s}
  states:
    fix: {action: "fix the tests", actionType: agent, evaluate: {type: exit_code}, onSuccess: fix, onFailure: done}
    done: {terminal: true}
`, stub, output)
}

func main() {
	rounds := flag.Int("rounds", 21, "measured rounds of each command (the median is reported; fewer are swamped by this machine's noise)")
	flag.Parse()
	failed := false
	if err := perStep(*rounds); err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		failed = true
	}
	if err := memory(); err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

func perStep(rounds int) error {
	dir, err := os.MkdirTemp("", "agentbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	looprun := filepath.Join(dir, "looprun")
	if out, err := exec.Command("go", "build", "-o", looprun, "./cmd/looprun").CombinedOutput(); err != nil {
		return fmt.Errorf("build looprun: %w\n%s", err, out)
	}
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			panic(err)
		}
		return p
	}
	stream := write("stream.yaml", loopFile(write("stream-agent", streamStub, 0o755), "stream-json"), 0o644)
	plain := write("plain.yaml", loopFile(write("plain-agent", plainStub, 0o755), "text"), 0o644)
	runLoop := func(file string) func(int) (time.Duration, error) {
		return func(n int) (time.Duration, error) {
			work, err := os.MkdirTemp(dir, "work")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(work)
			cmd := exec.Command(looprun, "run", "-q", "--max-steps", strconv.Itoa(n), file)
			cmd.Dir = work
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == 1 && strings.Contains(string(out), "max_iterations") {
				err = nil
			}
			if err != nil {
				return 0, fmt.Errorf("looprun run %s: %w\n%s", file, err, out)
			}
			return took, nil
		}
	}
	var perIter []time.Duration
	var plainIter []time.Duration
	for r := range rounds + 1 {
		var t [2][2]time.Duration // [stream, plain][short, long]
		for i, f := range []string{stream, plain} {
			for j, n := range []int{short, long} {
				d, err := runLoop(f)(n)
				if err != nil {
					return err
				}
				t[i][j] = d
			}
		}
		if r == 0 {
			continue // warm-up
		}
		s := (t[0][1] - t[0][0]) / (long - short)
		p := (t[1][1] - t[1][0]) / (long - short)
		perIter = append(perIter, s-p)
		plainIter = append(plainIter, p)
	}
	over := median(perIter)
	fmt.Printf("rounds: %d, iterations per run: %d and %d\n", rounds, short, long)
	fmt.Printf("plain-text agent step: %v per iteration\n", median(plainIter).Round(time.Microsecond))
	fmt.Printf("stream-json over plain text: %v per iteration (target <= %v); per round, sorted: %v\n",
		over.Round(time.Microsecond), target, sorted(perIter))
	if over > target {
		return fmt.Errorf("the stream costs %v per iteration, above the %v target", over, target)
	}
	return nil
}

// memory sends 1 GiB of stream-json through the local runner and samples
// the heap in use meanwhile.
func memory() error {
	dir, err := os.MkdirTemp("", "agentbench-mem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// 1 GiB: a 64 MiB line without a newline-free end in sight, then
	// assistant records until the total is reached.
	record := `{"type":"assistant","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", 1000) + `"}]}}`
	script := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' 'y'; echo; yes '%s' | head -c %d; echo; echo '{"type":"result","usage":{"input_tokens":1}}'`,
		64<<20, record, (1<<30)-(64<<20))
	debug.SetGCPercent(50)
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	start := time.Now()
	r := &local.Runner{Dir: dir}
	res := r.Run(context.Background(), &executor.Action{State: "big", Iteration: 1, Command: script, Agent: true, AgentStream: true,
		AgentCommand: []string{"sh", "-c"}, Timeout: 10 * time.Minute})
	close(done)
	took := time.Since(start)
	if res.ExitCode != 0 {
		return fmt.Errorf("the 1 GiB stream: exit %d: %s", res.ExitCode, res.Stderr)
	}
	if res.Usage == nil || res.Usage.InputTokens != 1 {
		return fmt.Errorf("the 1 GiB stream: usage %+v", res.Usage)
	}
	fmt.Printf("1 GiB of stream-json (a 64 MiB line, then 1 KiB records) in %v (%.0f MiB/s); peak heap in use %d MiB (target < %d MiB)\n",
		took.Round(time.Millisecond), 1024/took.Seconds(), peak.Load()>>20, heapTarget>>20)
	if peak.Load() >= heapTarget {
		return fmt.Errorf("peak heap %d MiB", peak.Load()>>20)
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	s := sorted(d)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func sorted(d []time.Duration) []time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	for i := range s {
		s[i] = s[i].Round(time.Microsecond)
	}
	return s
}
