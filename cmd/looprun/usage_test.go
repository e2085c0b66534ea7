package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent that speaks stream-json, as claude --output-format stream-json.
const streamingAgent = `#!/bin/sh
printf '%s\n' '{"type":"system","subtype":"init","model":"claude-sonnet-4-6"}'
printf '%s\n' '{"type":"assistant","message":{"content":[{"type":"text","text":"Ran the tests.\nFIXED"}]}}'
printf '%s\n' '{"type":"result","is_error":false,"total_cost_usd":0.9,"usage":{"input_tokens":1000,"output_tokens":2000,"cache_read_input_tokens":10000,"cache_creation_input_tokens":100}}'
`

const agentLoop = `name: agentic
initial: fix
states:
  fix:
    action: "/fix the tests"
    action_type: prompt
    evaluate: {type: output_contains, pattern: "^FIXED$|\\nFIXED"}
    capture: answer
    on_success: done
    on_failure: fix
  done: {terminal: true}
`

// A run of an agent loop: the agent's text is the output judged and shown,
// its tokens are in action_complete, the run's usage.jsonl and the state
// file, and looprun status says what it cost by looprun's prices (a
// $LOOPRUN_PRICES file overrides them).
func TestAgentUsageLocally(t *testing.T) {
	onPath(t, "claude", streamingAgent)
	dir := t.TempDir()
	write(t, dir, "agentic.yaml", agentLoop)
	if r := looprun(t, dir, "run", "agentic.yaml"); r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	events, err := os.ReadFile(filepath.Join(dir, ".loops/.running/agentic.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"input_tokens":1000`, `"output_tokens":2000`, `"cache_read_tokens":10000`, `"cache_creation_tokens":100`,
		`"model":"claude-sonnet-4-6"`, `"cost_usd":0.036375`, `"output_preview":"Ran the tests.\nFIXED"`} {
		if !strings.Contains(string(events), want) {
			t.Errorf("action_complete lacks %s:\n%s", want, events)
		}
	}
	rows, _ := filepath.Glob(filepath.Join(dir, ".loops/runs/*/usage.jsonl"))
	if len(rows) != 1 {
		t.Fatalf("usage.jsonl files: %v", rows)
	}
	if b, _ := os.ReadFile(rows[0]); !strings.HasPrefix(string(b), `{"iteration": 1, "state": "fix", "action_type": "prompt", "input_tokens": 1000, "output_tokens": 2000, "cache_read_tokens": 10000, "cache_creation_tokens": 100, "model": "claude-sonnet-4-6"`) {
		t.Errorf("usage.jsonl: %s", b)
	}
	st := looprun(t, dir, "status", "agentic")
	// 1000×3 + 2000×15 + 10000×0.3 + 100×3.75 micro-dollars.
	for _, want := range []string{"Usage:", "1 agent call(s), 13100 tokens", "$0.0364", "(the agent CLI said $0.9000)", "fix:"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, st.stdout)
		}
	}
	if js := looprun(t, dir, "status", "agentic", "-o", "json"); !strings.Contains(js.stdout, `"cost_micro_usd": 36375`) {
		t.Errorf("state file usage:\n%s", js.stdout)
	}

	prices := write(t, dir, "prices.yaml", "models:\n  claude-sonnet-4-6: {input: 1, output: 1, cacheRead: 0, cacheCreation: 0}\n")
	t.Setenv("LOOPRUN_PRICES", prices)
	if r := looprun(t, dir, "run", "agentic.yaml"); r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := looprun(t, dir, "status", "agentic"); !strings.Contains(st.stdout, "$0.0030") {
		t.Errorf("status with $LOOPRUN_PRICES:\n%s", st.stdout)
	}
	write(t, dir, "bad.yaml", "models: {x: {input: -1}}\n")
	t.Setenv("LOOPRUN_PRICES", filepath.Join(dir, "bad.yaml"))
	if r := looprun(t, dir, "run", "agentic.yaml"); r.code == 0 || !strings.Contains(r.stderr, "LOOPRUN_PRICES") {
		t.Errorf("a bad price table: %d %s", r.code, r.stderr)
	}
}

// onPath puts an executable script named name first on PATH for the test.
func onPath(t *testing.T, name, script string) {
	t.Helper()
	bin := t.TempDir()
	write(t, bin, name, script)
	if err := os.Chmod(filepath.Join(bin, name), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}
