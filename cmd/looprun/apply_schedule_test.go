package main

import (
	"os"
	"strings"
	"testing"
)

// looprun apply -f takes a LoopSchedule as kubectl apply does: the
// client dry run prints it as it would be sent.
func TestApplyLoopSchedule(t *testing.T) {
	sample, err := os.ReadFile("../../config/samples/looprun_v1alpha1_loopschedule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, dir, "nightly.yaml", string(sample))
	r := looprun(t, dir, "apply", "-f", "nightly.yaml", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "kind: LoopSchedule\n") || !strings.Contains(r.stdout, "name: nightly-check\n") ||
		!strings.Contains(r.stdout, "schedule: 30 2 * * *\n") {
		t.Errorf("apply --dry-run of a LoopSchedule: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "apply", "-f", "nightly.yaml", "--dry-run", "--set", "a=b"); r.code == 0 || !strings.Contains(r.stderr, "loop.spec.context") {
		t.Errorf("--set on a LoopSchedule: exit %d %s", r.code, r.stderr)
	}
}
