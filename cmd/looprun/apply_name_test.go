package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestApplyNamesALittleLoopsLoopAsConvertDoes: a little-loops name that is
// no Kubernetes name (my_loop) is applied as the Loop convert writes
// (my-loop), not sent as it is for the API server to refuse.
func TestApplyNamesALittleLoopsLoopAsConvertDoes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "my_loop.yaml", "name: My_Loop\ninitial: done\nstates:\n  done:\n    terminal: true\n")
	r := looprun(t, dir, "--kubeconfig", filepath.Join(dir, "none"), "apply", "-f", "my_loop.yaml", "--dry-run")
	if r.code != 0 {
		t.Fatalf("apply --dry-run: exit %d\n%s", r.code, r.stderr)
	}
	if _, loop := objects(t, r.stdout); loop.Name != "my-loop" {
		t.Errorf("apply names the Loop %q, want my-loop (as convert)", loop.Name)
	}
	if r := looprun(t, dir, "convert", "my_loop.yaml"); r.code != 0 || !strings.Contains(r.stdout, "name: my-loop") {
		t.Errorf("convert: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
