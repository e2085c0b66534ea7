package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// import --local of a run that has ended says there is nothing to resume,
// and what can be done with it, rather than sending the user to resume.
func TestImportLocalOfAnEndedRun(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "one.yaml", "name: one\ninitial: a\nstates:\n  a:\n    action: \"true\"\n    next: done\n  done:\n    terminal: true\n")
	if r := looprun(t, dir, "run", "one.yaml", "-q"); r.code != 0 {
		t.Fatalf("run: exit %d %s", r.code, r.stderr)
	}
	doc := filepath.Join(dir, "one.json")
	if r := looprun(t, dir, "export", "--local", "one", "-o", doc); r.code != 0 {
		t.Fatalf("export: %s", r.stderr)
	}
	r := looprun(t, dir, "import", "--local", doc, "--name", "back")
	if r.code != 0 || strings.Contains(r.stdout, "continue with") ||
		!strings.Contains(r.stdout, "the run has ended (completed), so there is nothing to resume: looprun status back shows it, looprun rewind back --iteration N") {
		t.Errorf("import --local of a completed run: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
}
