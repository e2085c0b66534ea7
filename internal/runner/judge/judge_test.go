package judge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/test/proc"
)

// judgeFunc is a judge made of a function.
type judgeFunc func(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result

func (f judgeFunc) Judge(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result {
	return f(ctx, req)
}

func TestAskOnceAndWake(t *testing.T) {
	r := NewRunner(time.Minute)
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"}}
	var calls atomic.Int32
	release := make(chan struct{})
	j := judgeFunc(func(context.Context, evaluate.JudgeRequest) evaluate.Result {
		calls.Add(1)
		<-release
		return evaluate.Result{Verdict: "success"}
	})
	if _, ok := r.Ask(loop, "k", j, evaluate.JudgeRequest{}); ok {
		t.Fatal("an answer before the call ended")
	}
	if _, ok := r.Ask(loop, "k", j, evaluate.JudgeRequest{}); ok || r.Running() != 1 {
		t.Fatalf("asked twice: running %d", r.Running())
	}
	close(release)
	res, ok := waitAnswer(t, r, loop, "k", j)
	if !ok || res.Verdict != "success" || calls.Load() != 1 {
		t.Errorf("answer %+v %v after %d calls", res, ok, calls.Load())
	}
	r.Release("k")
	if r.Running() != 0 {
		t.Error("a released call still counts")
	}
	r.Close()
}

func TestCapAndForget(t *testing.T) {
	r := NewRunner(100 * time.Millisecond)
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"}}
	hang := judgeFunc(func(ctx context.Context, _ evaluate.JudgeRequest) evaluate.Result {
		<-ctx.Done()
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "the endpoint said: secret body"}}
	})
	r.Ask(loop, "capped", hang, evaluate.JudgeRequest{})
	res, ok := waitAnswer(t, r, loop, "capped", hang)
	if !ok || res.Verdict != v1alpha1.VerdictError || res.Details["timeout"] != true {
		t.Errorf("capped call: %+v", res)
	}
	long := NewRunner(time.Hour)
	ended := make(chan struct{})
	long.Ask(loop, "k", judgeFunc(func(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result {
		defer close(ended)
		return hang(ctx, req)
	}), evaluate.JudgeRequest{})
	long.Forget(types.NamespacedName{Namespace: "ns", Name: "l"})
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("Forget left the call running")
	}
	long.Close()
	if _, ok := long.Ask(loop, "after", hang, evaluate.JudgeRequest{}); ok || long.Running() != 0 {
		t.Error("a closed runner asked")
	}
}

// waitAnswer asks until the call under key answered.
func waitAnswer(t *testing.T, r *Runner, loop *v1alpha1.Loop, key string, j evaluate.Judge) (evaluate.Result, bool) {
	t.Helper()
	var res evaluate.Result
	var ok bool
	proc.Until(t, 10*time.Second, "the judge's answer", func() bool {
		res, ok = r.Ask(loop, key, j, evaluate.JudgeRequest{})
		return ok
	})
	return res, ok
}
