package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func recorded(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseLLLoop reads outputs of ll-loop simulate (a12b9397d) as the
// harness recorded them.
func TestParseLLLoop(t *testing.T) {
	for _, c := range []struct {
		file string
		want Walk
	}{
		// Sub-loop states (gate_direct, run_impl) are entered and count
		// as commands; the terminal state is reached, not entered.
		{"proof-first-task.all-pass.out", Walk{Walked: true,
			Entered:    []string{"check_issue_file", "check_targets_csv", "gate_direct", "resolve_task", "run_impl"},
			FinalState: "done", Iterations: 5, Commands: 5, TerminatedBy: "terminal"}},
		// max_retries sends the walk to its on_retry_exhausted state with
		// no route line: only the harness's line names the final state.
		{"rlhf-svg-refine.all-pass.out", Walk{Walked: true,
			Entered:    []string{"rank_components", "review_critique", "review_critique", "review_critique", "review_critique"},
			FinalState: "failed", Iterations: 5, Commands: 0, TerminatedBy: "terminal"}},
		// The judge's host CLI is missing: the walk ends in error where
		// it asked.
		{"fix-quality-and-tests.all-pass.host.out", Walk{Walked: true,
			Entered: []string{"check-quality"}, FinalState: "check-quality", Iterations: 1, Commands: 1, TerminatedBy: "error"}},
	} {
		got, err := ParseLLLoop(recorded(t, c.file))
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", c.file, got, c.want)
		}
	}
}

// TestParseLLLoopWithoutFinalLine: ll-loop's own output, without the
// harness's line, gives the target of the last route as the final state
// when no state was entered after it.
func TestParseLLLoopWithoutFinalLine(t *testing.T) {
	var kept []string
	for _, l := range strings.Split(recorded(t, "proof-first-task.all-pass.out"), "\n") {
		if !strings.HasPrefix(l, finalLine) {
			kept = append(kept, l)
		}
	}
	got, err := ParseLLLoop(strings.Join(kept, "\n"))
	if err != nil || got.FinalState != "done" {
		t.Errorf("final state %q, %v", got.FinalState, err)
	}
	if _, err := ParseLLLoop("Traceback (most recent call last):\n"); err == nil {
		t.Error("an output without a summary parsed")
	}
}

func TestParseLooprunAndDiff(t *testing.T) {
	ours, err := ParseLooprun(`{"loop": "proof-first-task", "scenario": "all-pass",
  "states_visited": ["check_issue_file", "check_targets_csv", "gate_direct", "resolve_task", "run_impl"],
  "final_state": "done", "iterations": 5, "commands": 5, "terminated_by": "terminal"}`)
	if err != nil {
		t.Fatal(err)
	}
	ll, err := ParseLLLoop(recorded(t, "proof-first-task.all-pass.out"))
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(ll, ours); d != nil {
		t.Errorf("the same walk differs: %v", d)
	}
	ours.Entered[4], ours.FinalState, ours.TerminatedBy = "other", "other", "error"
	want := []string{"terminated_by error, not terminal", "final state other, not done", "path parts at step 5: other, not run_impl"}
	if d := Diff(ll, ours); !reflect.DeepEqual(d, want) {
		t.Errorf("got %q\nwant %q", d, want)
	}
	if d := Diff(ll, Walk{Note: "invalid loop"}); len(d) != 1 {
		t.Errorf("a walk and none: %v", d)
	}
}
