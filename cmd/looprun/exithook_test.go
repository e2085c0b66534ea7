package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run's exit hook runs after its closing line, says how it ended, and
// looprun status shows it.
func TestExitHookLocally(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "hooked.yaml", `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: hooked}
spec:
  initial: work
  onExit: {action: 'echo "${loop.phase} in ${loop.final_state}" > hook.out; echo told >&2; exit 7'}
  states:
    work: {action: "true", next: done}
    done: {terminal: true}
`)
	r := looprun(t, dir, "run", "hooked.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d: a failing hook does not change how the run ended\n%s%s", r.code, r.stdout, r.stderr)
	}
	closing, hook := strings.Index(r.stdout, "Loop completed: done"), strings.Index(r.stdout, "exit hook failed (exit 7): told")
	if closing < 0 || hook < closing || !strings.Contains(r.stdout, "on exit -> echo") {
		t.Errorf("progress:\n%s", r.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hook.out")); err != nil || string(b) != "Completed in done\n" {
		t.Errorf("hook.out %q %v", b, err)
	}
	if st := looprun(t, dir, "status", "hooked"); !strings.Contains(st.stdout, "Exit hook:") || !strings.Contains(st.stdout, "Failed (exit 7): told") {
		t.Errorf("status:\n%s", st.stdout)
	}
}
