package background

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestJobs(t *testing.T) {
	j := New[int]()
	owner := types.NamespacedName{Namespace: "ns", Name: "l"}
	release := make(chan struct{})
	calls := 0
	work := func(context.Context) int { calls++; <-release; return 42 }
	if !j.Start("k", owner, 0, work) || j.Start("k", owner, 0, work) {
		t.Fatal("the same key started twice, or not at all")
	}
	if _, st := j.Result("k"); st != Running || j.Running() != 1 {
		t.Fatalf("state %v", st)
	}
	close(release)
	if woken := <-j.events; woken.Object.Namespace != "ns" || woken.Object.Name != "l" {
		t.Errorf("woke %s/%s", woken.Object.Namespace, woken.Object.Name)
	}
	if res, st := j.Result("k"); st != Done || res != 42 || calls != 1 || j.EndedAt("k").IsZero() {
		t.Errorf("result %d %v after %d calls", res, st, calls)
	}
	j.Release("k")
	if _, st := j.Result("k"); st != Unknown {
		t.Errorf("after Release: %v", st)
	}

	// Forget cancels, and a forgotten job wakes nobody.
	cancelled := make(chan struct{})
	j.Start("slow", owner, 0, func(ctx context.Context) int { <-ctx.Done(); close(cancelled); return 0 })
	j.Forget(owner)
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("Forget did not cancel")
	}
	if _, st := j.Result("slow"); st != Unknown || len(j.events) != 0 {
		t.Errorf("a forgotten job: %v, %d wake-ups", st, len(j.events))
	}

	// A timeout ends the work's context.
	j.Start("capped", owner, 50*time.Millisecond, func(ctx context.Context) int { <-ctx.Done(); return -1 })
	<-j.events
	if res, st := j.Result("capped"); st != Done || res != -1 {
		t.Errorf("capped: %d %v", res, st)
	}

	j.Close()
	if j.Start("late", owner, 0, work) {
		t.Error("started after Close")
	}
}
