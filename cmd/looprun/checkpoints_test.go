package main

import (
	"strings"
	"testing"
)

// TestLocalCheckpoints: checkpoints --local lists a local run's
// checkpoints, each checked, as the cluster's are listed.
func TestLocalCheckpoints(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fix.yaml", fixLoop)
	if r := looprun(t, dir, "run", "fix.yaml"); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	r := looprun(t, dir, "checkpoints", "fixer", "--local")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "ITERATION NEXT STATE TAKEN SEQ CHECK" {
		t.Fatalf("checkpoints --local: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) != 5 || f[4] != "ok" {
			t.Errorf("checkpoints --local row %q", l)
		}
	}
}
