package main

import (
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

const gateLoop = `name: gate
initial: ask
states:
  ask:
    approval: {message: "ship it?"}
    route: {approved: done, rejected: stopped}
  done: {terminal: true}
  stopped: {terminal: true}
`

// looprun approve loop/NAME names its author as the API server knows them
// (a SelfSubjectReview), and the answer records it.
func TestClusterApproveNamesItsAuthor(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "gate.yaml", gateLoop)
	f.ok(t, dir, ns, "apply", "-f", "gate.yaml")
	f.waitFor(t, ns, "gate", "it waits for approval", func(l *v1alpha1.Loop) bool {
		return l.Status.Action != nil && l.Status.Action.Approval != nil
	})
	if out := f.ok(t, dir, ns, "get", "loop/gate"); !strings.Contains(out, "AwaitingApproval") {
		t.Errorf("get does not say it waits:\n%s", out)
	}
	f.ok(t, dir, ns, "approve", "loop/gate", "-m", "looks good")
	loop := f.waitFor(t, ns, "gate", "it finished", finished)
	if loop.Status.CurrentState != "done" {
		t.Fatalf("ended in %s", loop.Status.CurrentState)
	}
	by := loop.Annotations[v1alpha1.ApprovedByAnnotation]
	if by == "" {
		t.Fatal("the approval names no one")
	}
	out := f.ok(t, dir, ns, "history", "loop/gate", "--type", "approval_answered", "-o", "json")
	for _, want := range []string{`"by": "` + by + `"`, `"message": "looks good"`, `"verdict": "approved"`} {
		if !strings.Contains(out, want) && !strings.Contains(out, strings.ReplaceAll(want, ": ", ":")) {
			t.Errorf("approval_answered lacks %s:\n%s", want, out)
		}
	}
}
