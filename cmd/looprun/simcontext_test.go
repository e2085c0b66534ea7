package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateHasTheRunnersContext: a simulated walk reads
// ${context.run_dir} and ${context.input_hash} as a run does, where it
// stopped at its first state before ("run_dir: not defined"); a loop's own
// run_dir wins, and a walk has no max_steps, as in little-loops.
func TestSimulateHasTheRunnersContext(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "sim.yaml", `name: sim
initial: a
context:
  input: hello
states:
  a:
    action: "ls ${context.run_dir} ${context.input_hash} ${context.max_steps:default=none}"
    on_yes: done
    on_no: done
  done:
    terminal: true
`)
	r := looprun(t, dir, "simulate", "sim.yaml")
	want := "would run: ls " + filepath.Join(dir, ".loops", "runs", "sim-simulate") + "/ 2cf24dba5fb0 none"
	if r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("simulate: exit %d, want %q in\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	write(t, dir, "own.yaml", `name: own
initial: a
context:
  input: hello
  run_dir: /work/mine/
states:
  a:
    action: "ls ${context.run_dir}"
    next: done
  done:
    terminal: true
`)
	if r := looprun(t, dir, "simulate", "own.yaml"); r.code != 0 || !strings.Contains(r.stdout, "would run: ls /work/mine/") {
		t.Errorf("simulate with the loop's own run_dir: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestSimulateWithAnEmptyRunDir: a loop whose own run_dir is "" (a
// parameter its caller sets, as in little-loops' rlhf-svg-evaluate) is
// walked, as ll-loop walks it: nothing is made there. A run still wants
// one.
func TestSimulateWithAnEmptyRunDir(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "param.yaml", `name: param
initial: a
context:
  run_dir: ""
states:
  a:
    action: "ls ${context.run_dir}."
    next: done
  done:
    terminal: true
`)
	if r := looprun(t, dir, "simulate", "param.yaml"); r.code != 0 || !strings.Contains(r.stdout, "would run: ls .") {
		t.Errorf("simulate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "run", "param.yaml"); r.code == 0 || !strings.Contains(r.stderr, "run_dir must be a directory name") {
		t.Errorf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
