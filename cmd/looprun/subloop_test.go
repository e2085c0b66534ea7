package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/test/proc"
)

// Three levels: top runs middle (with), middle runs leaf (passthrough).
// Each action appends its name to a trace file; leaf's second action
// waits for a file, so the test can kill the run inside the grandchild.
const (
	topLoop = `name: top
initial: start
context:
  goal: green
states:
  start:
    action: echo top-start >> trace
    next: mid
  mid:
    loop: middle
    with:
      target: "${context.goal}"
    on_yes: report
    on_no: failed
  report:
    action: echo "top-report ${captured.mid.found.output} ${captured.mid.terminated_by}" >> trace
    next: done
  done:
    terminal: true
  failed:
    terminal: true
`
	middleLoop = `name: middle
initial: find
parameters:
  target: {type: string, required: true}
states:
  find:
    action: echo "middle-find ${context.target}" >> trace; echo found-${context.target}
    capture: found
    next: deeper
  deeper:
    loop: leaf
    context_passthrough: true
    on_yes: done
    on_no: failed
  done:
    terminal: true
  failed:
    terminal: true
`
	leafLoop = `name: leaf
initial: one
states:
  one:
    action: echo "leaf-one ${context.found}" >> trace
    next: two
  two:
    action: echo leaf-two-start >> trace; echo $$ > leaf.pid; while [ ! -f go ]; do sleep 0.05; done; echo leaf-two-end >> trace
    next: done
  done:
    terminal: true
`
)

func subLoopDir(t *testing.T) string {
	dir := t.TempDir()
	write(t, dir, "top.yaml", topLoop)
	write(t, dir, ".loops/middle.yaml", middleLoop)
	write(t, dir, ".loops/leaf.yaml", leafLoop)
	return dir
}

func TestSubLoopsRunInProcess(t *testing.T) {
	dir := subLoopDir(t)
	write(t, dir, "go", "")
	if r := looprun(t, dir, "run", "-q", "top.yaml"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "top-start\nmiddle-find green\nleaf-one found-green\nleaf-two-start\nleaf-two-end\ntop-report found-green terminal\n"
	if got := readFile(dir, "trace"); got != want {
		t.Fatalf("trace:\n%s\nwant:\n%s", got, want)
	}
	evs, err := eventlog.Read(filepath.Join(dir, ".loops/.running/top.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	depths := map[int]int{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Type == executor.EventLoopStart {
			depths[executor.DepthOf(e)]++
		}
	}
	if len(depths) != 3 {
		t.Fatalf("loop_start events by depth: %v (want the top, depth 1 and depth 2)", depths)
	}
}

// Killed while the grandchild's action runs, the run resumes the
// grandchild where it was: no action of any level runs twice except the
// one the kill cut off.
func TestKilledSubLoopResumesAtItsDepth(t *testing.T) {
	dir := subLoopDir(t)
	cmd := exec.Command(binary, "run", "-q", "top.yaml")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := proc.WaitPid(t, filepath.Join(dir, "leaf.pid"))
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	proc.WaitGone(t, pid)
	write(t, dir, "go", "")
	if r := looprun(t, dir, "resume", "-q", "top"); r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	want := "top-start\nmiddle-find green\nleaf-one found-green\nleaf-two-start\nleaf-two-start\nleaf-two-end\ntop-report found-green terminal\n"
	if got := readFile(dir, "trace"); got != want {
		t.Fatalf("trace:\n%s\nwant:\n%s", got, want)
	}
	st, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/top.state.json"))
	if err != nil || st.Status != localrun.StatusCompleted {
		t.Fatalf("top: %+v %v", st, err)
	}
}

func TestSubLoopErrors(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ".loops/a.yaml", "name: a\ninitial: s\nstates:\n  s:\n    loop: b\n    on_yes: done\n    on_error: broken\n  done: {terminal: true}\n  broken: {terminal: true, failure: true}\n")
	write(t, dir, ".loops/b.yaml", "name: b\ninitial: s\nstates:\n  s:\n    loop: a\n    on_yes: done\n  done: {terminal: true}\n")
	write(t, dir, ".loops/lost.yaml", "name: lost\ninitial: s\nstates:\n  s:\n    loop: nowhere\n    on_yes: done\n  done: {terminal: true}\n")
	write(t, dir, ".loops/needs.yaml", "name: needs\ninitial: s\nstates:\n  s:\n    loop: param\n    on_yes: done\n    with: {other: 1}\n  done: {terminal: true}\n")
	write(t, dir, ".loops/param.yaml", "name: param\ninitial: s\nparameters:\n  x: {required: true}\nstates:\n  s: {terminal: true}\n")

	// a -> b -> a: the cycle ends b's state in error; b has no on_error,
	// so b fails, and a routes its failure ... a has no on_no: a fails.
	r := looprun(t, dir, "run", "a")
	if r.code == 0 || !strings.Contains(readFile(dir, ".loops/.running/a.events.jsonl"), "already running above it") {
		t.Fatalf("cycle: exit %d, stderr %s", r.code, r.stderr)
	}
	r = looprun(t, dir, "run", "lost")
	if r.code != 1 || !strings.Contains(r.stderr, `no loop file "nowhere"`) {
		t.Fatalf("missing loop: exit %d, stderr %s", r.code, r.stderr)
	}
	r = looprun(t, dir, "run", "needs")
	if r.code != 1 || !strings.Contains(r.stderr, `requires parameter "x"`) {
		t.Fatalf("unbound parameter: exit %d, stderr %s", r.code, r.stderr)
	}
}

func TestSubLoopsNestAtMostMaxDepth(t *testing.T) {
	dir := t.TempDir()
	// deep runs itself through a chain of distinct files, one per level.
	for i := 0; i <= executor.MaxSubLoopDepth+1; i++ {
		next := "lvl" + string(rune('a'+i+1))
		write(t, dir, ".loops/lvl"+string(rune('a'+i))+".yaml",
			"name: lvl"+string(rune('a'+i))+"\ninitial: s\nstates:\n  s:\n    loop: "+next+"\n    on_yes: done\n  done: {terminal: true}\n")
	}
	last := "lvl" + string(rune('a'+executor.MaxSubLoopDepth+2))
	write(t, dir, ".loops/"+last+".yaml", "name: "+last+"\ninitial: done\nstates:\n  done: {terminal: true}\n")
	r := looprun(t, dir, "run", "-q", "lvla")
	if r.code != 1 || !strings.Contains(readFile(dir, ".loops/.running/lvla.events.jsonl"), "nest deeper than 8") {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
}
