package local

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/test/proc"
)

func TestActions(t *testing.T) {
	a := NewActions(t.TempDir())
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loop", UID: "u1"}}
	loop.Status.RunID = "r"
	loop.Status.Action = &v1alpha1.ActionStatus{Iteration: 1}
	check := func() runner.Outcome {
		t.Helper()
		out, err := a.Check(t.Context(), loop)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := check(); out.State != runner.Lost {
		t.Fatalf("an unknown action: %v", out.State)
	}
	act := executor.Action{Iteration: 1, Command: "echo $PWD; sleep 0.2", Timeout: 10 * time.Second}
	_, _ = a.Start(t.Context(), loop, act)
	_, _ = a.Start(t.Context(), loop, act) // the same key does not start twice
	if out := check(); out.State != runner.Running || a.Running() != 1 {
		t.Fatalf("state %v, running %d", out.State, a.Running())
	}
	proc.Until(t, 10*time.Second, "the action to end", func() bool { return check().State != runner.Running })
	out := check()
	if out.State != runner.Done || out.Result.ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(out.Result.Output), filepath.Join("ns", "loop")) {
		t.Errorf("outcome %+v", out)
	}
	if a.EndedAt(loop, 1).IsZero() {
		t.Error("the action's end was not noted")
	}
	if _, err := a.Start(t.Context(), loop, act); !errors.As(err, new(*runner.AlreadyEnded)) {
		t.Errorf("starting an ended action again: %v", err)
	}
	a.Release(loop, 1)
	if out := check(); out.State != runner.Lost {
		t.Errorf("after Release: %v", out.State)
	}
	loop.Status.Action.Iteration = 2
	_, _ = a.Start(t.Context(), loop, executor.Action{Iteration: 2, Command: "sleep 30", Timeout: time.Minute})
	_ = a.Cancel(t.Context(), loop)
	if out := check(); out.State != runner.Lost || a.Running() != 0 {
		t.Errorf("after Cancel: %v", out.State)
	}
	loop.Status.Action.Iteration = 3
	_, _ = a.Start(t.Context(), loop, executor.Action{Iteration: 3, Command: "sleep 30", Timeout: time.Minute})
	a.Forget(types.NamespacedName{Namespace: "ns", Name: "loop"})
	if out := check(); out.State != runner.Lost || a.Running() != 0 {
		t.Errorf("after Forget: %v", out.State)
	}
	a.Close()
	loop.Status.Action.Iteration = 4
	_, _ = a.Start(t.Context(), loop, executor.Action{Iteration: 4, Command: "true"})
	if a.Running() != 0 {
		t.Error("a closed runner started an action")
	}
}

// An operator restarted with --allow-local-actions kills the action an
// earlier operator process left running before it starts the Loop's next.
func TestActionsKillWhatAnEarlierOperatorLeft(t *testing.T) {
	base := t.TempDir()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loop", UID: "u1"}}
	loop.Status.RunID = "r"
	loop.Status.Action = &v1alpha1.ActionStatus{Iteration: 1}
	first := NewActions(base)
	_, _ = first.Start(t.Context(), loop, executor.Action{Iteration: 1, Command: "echo $$ > pid; exec sleep 60", Timeout: time.Minute})
	pid := proc.WaitPid(t, filepath.Join(base, "ns", "loop", "pid"))
	// The first operator dies without a word: its goroutines are gone,
	// its action is not (in a real crash the parent-death signal would
	// also fire; here the test process lives on).
	second := NewActions(base)
	defer second.Close()
	defer first.Close()
	_, _ = second.Start(t.Context(), loop, executor.Action{Iteration: 1, Command: "true", Timeout: time.Minute})
	proc.WaitGone(t, pid) // the action an earlier operator left was killed
}

// An exit hook an earlier operator process started, lost with it, runs
// again in the new one (as a lost action does), instead of being recorded
// as failed and never run.
func TestLostHookRunsAgain(t *testing.T) {
	base := t.TempDir()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loop", UID: "u1"}}
	loop.Status.RunID = "r"
	hook := executor.Action{Iteration: 3, State: executor.ExitState, Command: "echo hooked", Timeout: 10 * time.Second}
	// A new operator process: it knows no job; the status says the hook
	// had started.
	a := NewActions(base)
	defer a.Close()
	out, _, err := a.Hook(t.Context(), loop, hook, true)
	if err != nil || out.State != runner.Running {
		t.Fatalf("a lost hook: %+v %v", out, err)
	}
	proc.Until(t, 10*time.Second, "the hook to end", func() bool {
		out, _, _ = a.Hook(t.Context(), loop, hook, true)
		return out.State != runner.Running
	})
	if out.State != runner.Done || out.Result.ExitCode != 0 || strings.TrimSpace(out.Result.Output) != "hooked" {
		t.Fatalf("the hook run again: %+v", out)
	}
}
