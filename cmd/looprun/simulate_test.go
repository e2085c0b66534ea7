package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestSimulateJSON: simulate -o json prints only the walk's summary, as
// one JSON object: the states entered (a terminal state is reached, not
// entered, as ll-loop's "States visited" has it), the final state, the
// steps, the actions that would have run and how the walk ended.
func TestSimulateJSON(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fix.yaml", fixLoop)
	r := looprun(t, dir, "simulate", "fix.yaml", "--scenario", "first-fail", "-o", "json")
	var got simulationSummary
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	want := simulationSummary{Loop: "fixer", Scenario: "first-fail", Entered: []string{"check", "fix", "check"},
		FinalState: "done", Iterations: 3, Commands: 3, TerminatedBy: "terminal"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// A walk that ends in error says why; the exit code is a run's.
	r = looprun(t, dir, "simulate", "fix.yaml", "--scenario", "all-error", "-o", "json")
	got = simulationSummary{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 1 {
		t.Fatalf("all-error: exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if got.TerminatedBy != "error" || got.FinalState != "check" || got.Error != "No valid transition" {
		t.Errorf("all-error: %+v", got)
	}
	if r := looprun(t, dir, "simulate", "fix.yaml", "-o", "yaml"); r.code == 0 || !strings.Contains(r.stderr, "want json") {
		t.Errorf("-o yaml: exit %d\n%s", r.code, r.stderr)
	}
}

// TestSimulateReadsTheEnvironment: ${env.NAME} expands as in a run, as
// ll-loop simulate expands it, where the walk stopped before ("environment
// variable is not set").
func TestSimulateReadsTheEnvironment(t *testing.T) {
	t.Setenv("LOOPRUN_SIM_TEST", "from-env")
	dir := t.TempDir()
	write(t, dir, "env.yaml", `name: env
initial: a
states:
  a:
    action: "echo ${env.LOOPRUN_SIM_TEST}"
    next: done
  done:
    terminal: true
`)
	if r := looprun(t, dir, "simulate", "env.yaml"); r.code != 0 || !strings.Contains(r.stdout, "would run: echo from-env") {
		t.Errorf("simulate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
