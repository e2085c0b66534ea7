package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A local agent loop under --max-cost pauses (exit 3, status paused)
// before the agent call that would go past it; resume --max-cost with
// more goes on from there, and resume without it keeps the ceiling. The
// cost table is printed and written as ll-loop writes it.
func TestMaxCostPausesALocalRun(t *testing.T) {
	onPath(t, "claude", streamingAgent)
	dir := t.TempDir()
	// Each call of the agent costs $0.036375; the loop never ends by itself.
	write(t, dir, "spender.yaml", strings.ReplaceAll(strings.ReplaceAll(agentLoop, "agentic", "spender"), "^FIXED$|\\\\nFIXED", "NEVER"))
	calls := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, ".loops/.running/spender.events.jsonl"))
		return strings.Count(string(b), `"event": "action_complete"`) + strings.Count(string(b), `"event":"action_complete"`)
	}
	r := looprun(t, dir, "run", "spender.yaml", "--max-cost", "0.05")
	if r.code != ExitPaused || !strings.Contains(r.stderr, "paused: the run spent $0.07275 of its $0.05 budget before state fix") ||
		!strings.Contains(r.stderr, "looprun resume spender --max-cost USD") {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if calls() != 2 {
		t.Fatalf("%d agent calls; want 2", calls())
	}
	st := looprun(t, dir, "status", "spender", "-o", "json")
	var sf struct {
		Status string `json:"status"`
		Budget struct {
			RunMax int64 `json:"run_max_cost_micro_usd"`
		} `json:"budget"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sf); err != nil || sf.Status != "paused" || sf.Budget.RunMax != 50000 {
		t.Fatalf("state file %+v (%v):\n%s", sf, err, st.stdout)
	}
	if st := looprun(t, dir, "status", "spender"); !strings.Contains(st.stdout, "Paused:") || !strings.Contains(st.stdout, "$0.05 (--max-cost)") {
		t.Errorf("status:\n%s", st.stdout)
	}
	// Resumed with the same ceiling: still paused, nothing runs.
	if r := looprun(t, dir, "resume", "spender"); r.code != ExitPaused || calls() != 2 {
		t.Fatalf("resume without --max-cost: exit %d, %d calls\n%s", r.code, calls(), r.stderr)
	}
	report := filepath.Join(dir, "out", "cost.json")
	r = looprun(t, dir, "resume", "spender", "--max-cost", "0.1", "--cost-output-json", report)
	if r.code != ExitPaused || calls() != 3 {
		t.Fatalf("resume --max-cost 0.1: exit %d, %d calls\n%s%s", r.code, calls(), r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "est_cost") || !strings.Contains(r.stdout, "fix                          3") {
		t.Errorf("no cost table on stdout:\n%s", r.stdout)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"state": "fix"`, `"iterations": 3`, `"cost_usd": 0.109125`, `"has_unknown_model": false`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("cost report lacks %s:\n%s", want, b)
		}
	}
	events, _ := os.ReadFile(filepath.Join(dir, ".loops/.running/spender.events.jsonl"))
	for _, want := range []string{"budget_exceeded", "budget_resumed"} {
		if !strings.Contains(string(events), want) {
			t.Errorf("event log lacks %s", want)
		}
	}
	if r := looprun(t, dir, "run", "spender.yaml", "--max-cost", "five"); r.code == 0 || !strings.Contains(r.stderr, "--max-cost") {
		t.Errorf("a bad --max-cost: %d %s", r.code, r.stderr)
	}
}

// ll-loop's per-state model, tools and agent, and the run's --model,
// reach the claude command line.
func TestAgentOptionsLocally(t *testing.T) {
	onPath(t, "claude", `#!/bin/sh
printf '{"type":"assistant","message":{"content":[{"type":"text","text":"args: %s"}]}}\n' "$*"
`)
	dir := t.TempDir()
	write(t, dir, "opts.yaml", `name: opts
initial: plan
states:
  plan:
    action: "/plan"
    action_type: prompt
    evaluate: {type: exit_code}
    capture: plan
    next: fix
  fix:
    action: "/fix"
    action_type: prompt
    model: claude-opus-4-8
    tools: [Read, Edit]
    agent: fixer
    effort: high
    evaluate: {type: exit_code}
    capture: fix
    next: done
  done: {terminal: true}
`)
	r := looprun(t, dir, "run", "opts.yaml", "--model", "claude-haiku-4-5", "--effort", "low")
	if r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "not supported") {
		t.Errorf("warned: %s", r.stderr)
	}
	st := looprun(t, dir, "status", "opts", "-o", "json")
	for _, want := range []string{
		"-p --model claude-haiku-4-5 /plan",
		"-p --agent fixer --tools Read,Edit --model claude-opus-4-8 /fix",
	} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("no agent ran with %q:\n%s", want, st.stdout)
		}
	}
	events, _ := os.ReadFile(filepath.Join(dir, ".loops/.running/opts.events.jsonl"))
	if !strings.Contains(string(events), `"effort": "high"`) && !strings.Contains(string(events), `"effort":"high"`) {
		t.Errorf("no effort in action_complete:\n%s", events)
	}
}

// A sub-loop spends from its parent's --max-cost: its child is given what
// is left and pauses there, the parent with it (exit 3); resume with more
// goes on with the child, every agent call once, and the parent's usage
// holds the child's.
func TestSubLoopSpendsFromTheParentsMaxCost(t *testing.T) {
	onPath(t, "claude", streamingAgent) // $0.036375 a call
	dir := t.TempDir()
	write(t, dir, ".loops/worker.yaml", `name: worker
initial: a
states:
  a: {action: "first", action_type: prompt, evaluate: {type: exit_code}, next: b}
  b: {action: "second", action_type: prompt, evaluate: {type: exit_code}, next: done}
  done: {terminal: true}
`)
	write(t, dir, "boss.yaml", `name: boss
initial: delegate
states:
  delegate: {loop: worker, on_success: done, on_failure: failed}
  done: {terminal: true}
  failed: {terminal: true}
`)
	r := looprun(t, dir, "run", "boss.yaml", "--max-cost", "0.03")
	if r.code != ExitPaused || !strings.Contains(r.stderr, "of state delegate paused: the run spent $0.036375 of its $0.03 budget before state b") {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = looprun(t, dir, "resume", "boss", "--max-cost", "1")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st := looprun(t, dir, "status", "boss", "-o", "json")
	var sf struct {
		Status string `json:"status"`
		State  string `json:"current_state"`
		Usage  struct {
			Calls int64 `json:"calls"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sf); err != nil || sf.Status != "completed" || sf.State != "done" || sf.Usage.Calls != 2 {
		t.Fatalf("state file %+v (%v):\n%s", sf, err, st.stdout)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, ".loops/.running/boss-delegate-*.events.jsonl"))
	if len(logs) != 1 {
		t.Fatalf("child event logs %v", logs)
	}
	b, _ := os.ReadFile(logs[0])
	if n := strings.Count(string(b), `"action_start"`); n != 2 {
		t.Errorf("the child started %d actions, want 2 (each once)", n)
	}
}

// A run paused by its loop's own spec.budget says to raise it there:
// --max-cost cannot (the lower limit wins).
func TestPausedBySpecBudgetSaysWhereToRaiseIt(t *testing.T) {
	onPath(t, "claude", streamingAgent) // $0.036375 a call
	dir := t.TempDir()
	write(t, dir, "capped.yaml", `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: capped}
spec:
  initial: work
  budget: {maxCostUSD: "0.01"}
  states:
    work: {action: "work", actionType: agent, evaluate: {type: exit_code}, onSuccess: work, onFailure: done}
    done: {terminal: true}
`)
	r := looprun(t, dir, "run", "capped.yaml")
	if r.code != ExitPaused || !strings.Contains(r.stderr, "its loop's spec.budget is the limit: raise it in the loop's file, then looprun resume capped") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	// looprun status says the same.
	if st := looprun(t, dir, "status", "capped"); !strings.Contains(st.stdout, "raise it in the loop's file") {
		t.Errorf("status of a run paused by spec.budget:\n%s", st.stdout)
	}
	// With a lower --max-cost, that is the limit to raise.
	r = looprun(t, t.TempDir(), "run", filepath.Join(dir, "capped.yaml"), "--max-cost", "0.001")
	if r.code != ExitPaused || !strings.Contains(r.stderr, "go on with: looprun resume capped --max-cost USD") {
		t.Fatalf("with --max-cost: exit %d\n%s", r.code, r.stderr)
	}
}
