package main

import (
	"os/exec"
	"strings"
	"testing"
)

// diff_stall runs git diff where the loop runs: two rounds without a
// change (max_stall 2) end the polishing.
func TestDiffStallLocally(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.email", "t@example.com"}, {"config", "user.name", "t"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	write(t, dir, "tracked.txt", "start\n")
	if out, err := exec.Command("bash", "-c", "cd "+dir+" && git add tracked.txt && git commit -qm start").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	write(t, dir, "polish.yaml", `name: polish
initial: edit
states:
  edit:
    action: n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; if [ $n -le 2 ]; then echo "line $n" >> tracked.txt; fi
    next: check
  check:
    action: echo stall check
    evaluate:
      type: diff_stall
      max_stall: 2
    on_yes: edit
    on_no: done
  done:
    terminal: true
`)
	if r := looprun(t, dir, "run", "-q", "polish.yaml"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := strings.TrimSpace(readFile(dir, "n")); n != "4" {
		t.Fatalf("%s rounds of editing, want 4 (2 with changes, then 2 without)", n)
	}
	if s := readFile(dir, ".loops/.running/polish.state.json"); !strings.Contains(s, `"stalls"`) {
		t.Fatalf("the stall counter is not in the state file:\n%s", s)
	}
}

// score_stall reads the history file the loop writes under run_dir.
func TestScoreStallLocally(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "refine.yaml", `name: refine
initial: score
context:
  scores: "5 6 6.2 6.3 9"
states:
  score:
    action: set -- ${context.scores}; i=$(wc -l < ${context.run_dir}/.score_history 2>/dev/null || echo 0); shift $i; echo $1 >> ${context.run_dir}/.score_history
    next: check
  check:
    action: "true"
    evaluate:
      type: score_stall
      max_stall: 2
    on_yes: score
    on_no: done
  done:
    terminal: true
`)
	r := looprun(t, dir, "run", "-q", "refine.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// 5, 6 (progress), 6.2 and 6.3 (under epsilon 0.5): stalled after four scores.
	out, err := exec.Command("bash", "-c", "cat "+dir+"/.loops/runs/*/.score_history").CombinedOutput()
	if err != nil || strings.Fields(string(out))[3] != "6.3" || len(strings.Fields(string(out))) != 4 {
		t.Fatalf("history %q %v", out, err)
	}
}
