package localrun

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// askSpec waits for an approval: approved goes to done, anything else
// (the timeout too) to stopped.
func askSpec(timeout time.Duration) *v1alpha1.LoopSpec {
	s := spec(map[string]v1alpha1.State{
		"check":   {Approval: &v1alpha1.Approval{Message: "ship it?", Timeout: &metav1.Duration{Duration: timeout}}, OnSuccess: "done", OnFailure: "stopped"},
		"done":    {Terminal: true},
		"stopped": {Terminal: true},
	})
	return s
}

// startAsking starts a run of askSpec and waits until it waits for its
// approval; it returns the run's end.
func startAsking(ctx context.Context, t *testing.T, d *Driver, runID string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := d.Start(ctx, runID)
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sf, err := ReadStateFile(d.Store.StatePath())
		if err == nil && sf.RunID == runID && sf.ActiveAction != nil && sf.ActiveAction.Approval != nil {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never waited for its approval")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An answer file a killed run left (its run's, same state and iteration)
// does not answer a fresh run's approval.
func TestAnswerOfAKilledRunDoesNotApproveAFreshRun(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, askSpec(time.Second))
	// A run r1 was answered, and killed before it read the answer.
	if err := d.Store.mkdir(); err != nil {
		t.Fatal(err)
	}
	writeAnswerFile(t, d.Store.AnswerPath(), `{"run":"r1","state":"check","iteration":1,"approved":true,"by":"bob"}`)
	done := startAsking(context.Background(), t, d, "r2")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sf, err := ReadStateFile(d.Store.StatePath())
	if err != nil {
		t.Fatal(err)
	}
	if sf.CurrentState != "stopped" {
		t.Fatalf("the fresh run ended in %s: the old answer approved it", sf.CurrentState)
	}
}

// An answer names the approval it answers: a stale one is refused, a second
// answer before the run read the first is refused (not put in its place),
// and the answer the run reads is the one written.
func TestWriteAnswerNamesTheApproval(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, dir, askSpec(time.Minute))
	// The run does not read answers while this test writes them; it is
	// stopped at the end.
	d.Approver = holdApprover{}
	ctx, cancel := context.WithCancel(context.Background())
	done := startAsking(ctx, t, d, "r7")
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("the run ended: %v", err)
		}
	}()
	waiting := v1alpha1.ApprovalTarget{RunID: "r7", State: "check", Iteration: 1}
	for _, stale := range []v1alpha1.ApprovalTarget{{RunID: "r6", State: "check", Iteration: 1}, {RunID: "r7", State: "check", Iteration: 2}} {
		if _, err := d.Store.WriteAnswer(true, "ana", "", &stale, time.Now()); !errors.Is(err, ErrStaleAnswer) || !strings.Contains(err.Error(), "it waits in state check at iteration 1 of run r7") {
			t.Fatalf("a stale answer: %v", err)
		}
	}
	ans, err := d.Store.WriteAnswer(false, "ana", "not yet", &waiting, time.Now())
	if err != nil || ans.Run != "r7" || ans.State != "check" || ans.Iteration != 1 {
		t.Fatalf("the answer: %+v %v", ans, err)
	}
	if _, err := d.Store.WriteAnswer(true, "bob", "", nil, time.Now()); !errors.Is(err, ErrAnswered) || !strings.Contains(err.Error(), "rejected by ana") {
		t.Fatalf("a second answer: %v", err)
	}
	got, ok := d.Store.readAnswer()
	if !ok || got.Approved || got.By != "ana" {
		t.Fatalf("the answer file: %+v", got)
	}
}

// holdApprover answers nothing: it waits until the run is stopped.
type holdApprover struct{}

func (holdApprover) Await(ctx context.Context, _ *executor.ApprovalRequest) (*executor.ApprovalAnswer, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
