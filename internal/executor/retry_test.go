package executor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

func transient(reason string) ActionResult {
	return ActionResult{ExitCode: -1, Failure: &ActionFailure{Reason: reason, Message: reason, Transient: true}}
}

func retrySpec(p *v1alpha1.RetryPolicy, onExhausted string) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "deploy", States: map[string]v1alpha1.State{
		"deploy":   {Action: "deploy.sh", RetryPolicy: p, OnRetryExhausted: onExhausted, OnSuccess: "done", OnError: "rollback"},
		"rollback": {Action: "rollback.sh", Next: "failed"},
		"page":     {Action: "page-oncall.sh", Next: "failed"},
		"done":     {Terminal: true},
		"failed":   {Terminal: true},
	}}
}

// retries lists the delays and numbers of the retries, from the events.
func retries(r *runResult) (delays []int64, tries []int32) {
	for _, e := range r.events {
		switch e.Type {
		case EventActionRetry:
			delays = append(delays, e.Data["delay_ms"].(int64))
			tries = append(tries, e.Data["retry"].(int32))
		}
	}
	return delays, tries
}

func TestRetryBacksOffThenSucceeds(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 3, Backoff: dur(10 * time.Second), Factor: i32(2), MaxDelay: dur(25 * time.Second)}
	acts := &fakeActions{results: map[string][]ActionResult{
		"deploy.sh": {transient("PodNeverStarted"), transient("ImagePullFailed"), transient("PodDeleted"), {ExitCode: 0}},
	}}
	r := runLoop(t, retrySpec(p, ""), acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" || r.run.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("ended in %s (%s): %s", r.run.CurrentState, r.run.Phase, r.run.Message)
	}
	delays, tries := retries(r)
	if want := []int64{10000, 20000, 25000}; !slices.Equal(delays, want) {
		t.Errorf("delays %v ms, want %v (backoff 10s, factor 2, max 25s)", delays, want)
	}
	if len(tries) != 3 || tries[2] != 3 {
		t.Errorf("retries numbered %v", tries)
	}
	if r.run.Iteration != 1 {
		t.Errorf("iteration %d: retries are the same iteration", r.run.Iteration)
	}
	if r.run.Retries != 0 {
		t.Errorf("retries left at %d after success", r.run.Retries)
	}
	if n := r.count(EventActionStart); n != 4 {
		t.Errorf("%d action starts, want 4", n)
	}
	if n := r.count(EventStateEnter); n != 1 { // deploy once; retries do not re-enter
		t.Errorf("%d state_enter events, want 1", n)
	}
}

// The waits are really taken: each retry's action starts after its delay.
func TestRetryWaitsTheDelay(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 2, Backoff: dur(time.Minute)}
	acts := &fakeActions{results: map[string][]ActionResult{"deploy.sh": {transient("PodDeleted"), transient("PodDeleted"), {ExitCode: 0}}}}
	r := runLoop(t, retrySpec(p, ""), acts, Options{}, time.Millisecond)
	var starts []time.Time
	for _, e := range r.events {
		if e.Type == EventActionStart {
			starts = append(starts, e.Time)
		}
	}
	if len(starts) != 3 {
		t.Fatalf("%d starts", len(starts))
	}
	if d := starts[1].Sub(starts[0]); d < time.Minute {
		t.Errorf("first retry after %s, want at least 1m", d)
	}
	if d := starts[2].Sub(starts[1]); d < 2*time.Minute {
		t.Errorf("second retry after %s, want at least 2m (factor 2 by default)", d)
	}
}

func TestRetryExhaustedEndsFailed(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 2, Backoff: dur(time.Second)}
	acts := &fakeActions{results: map[string][]ActionResult{"deploy.sh": {transient("PodNeverStarted")}}}
	r := runLoop(t, retrySpec(p, ""), acts, Options{}, time.Millisecond)
	if r.run.Phase != v1alpha1.PhaseFailed || r.run.TerminatedBy != v1alpha1.TerminatedRetryExhausted {
		t.Fatalf("phase %s terminatedBy %s", r.run.Phase, r.run.TerminatedBy)
	}
	if !strings.Contains(r.run.Message, `state "deploy" escalated`) || !strings.Contains(r.run.Message, "3 times (PodNeverStarted)") {
		t.Errorf("message %q should name the state, the tries and the reason", r.run.Message)
	}
	if n := r.count(EventRetryExhausted); n != 1 {
		t.Errorf("%d retry_exhausted events", n)
	}
	if got := strings.Join(r.ran, ","); got != "deploy.sh,deploy.sh,deploy.sh" {
		t.Errorf("ran %s; onError must not take over from an exhausted retry policy", got)
	}
}

func TestRetryExhaustedRoutesToOnRetryExhausted(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 1, Backoff: dur(time.Second)}
	acts := &fakeActions{results: map[string][]ActionResult{"deploy.sh": {transient("PodDeleted")}}}
	r := runLoop(t, retrySpec(p, "page"), acts, Options{}, time.Millisecond)
	if got := strings.Join(r.ran, ","); got != "deploy.sh,deploy.sh,page-oncall.sh" {
		t.Errorf("ran %s", got)
	}
	if r.run.CurrentState != "failed" {
		t.Errorf("ended in %s", r.run.CurrentState)
	}
}

func TestRetryableExitCodes(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 3, Backoff: dur(time.Second), ExitCodes: []int32{75}}
	acts := &fakeActions{results: map[string][]ActionResult{"deploy.sh": {{ExitCode: 75}, {ExitCode: 0}}}}
	r := runLoop(t, retrySpec(p, ""), acts, Options{}, time.Millisecond)
	if got := strings.Join(r.ran, ","); got != "deploy.sh,deploy.sh" || r.run.CurrentState != "done" {
		t.Errorf("ran %s, ended in %s", got, r.run.CurrentState)
	}
	// Other exit codes and permanent failures are judged as usual.
	for _, res := range []ActionResult{{ExitCode: 3}, {ExitCode: -1, Failure: &ActionFailure{Reason: "PodNameTaken", Message: "x"}}} {
		acts := &fakeActions{results: map[string][]ActionResult{"deploy.sh": {res}}}
		r := runLoop(t, retrySpec(p, ""), acts, Options{}, time.Millisecond)
		if got := strings.Join(r.ran, ","); got != "deploy.sh,rollback.sh" {
			t.Errorf("%+v: ran %s, want no retry and onError", res, got)
		}
	}
}

// A retry pending when the driver stops resumes as a retry: same iteration.
func TestRetryPendingSurvivesReload(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 2, Backoff: dur(time.Minute)}
	m, run := startRun(t, "test", retrySpec(p, ""), Options{})
	s, _ := m.Plan(run, t0)
	res := transient("PodDeleted")
	m.Complete(run, &res, t0.Add(time.Second))
	if run.Retries != 1 || run.NextStepAt == nil {
		t.Fatalf("retries %d next %v", run.Retries, run.NextStepAt)
	}
	saved := run.DeepCopy()
	m2, _ := New("test", retrySpec(p, ""), Options{})
	if s2, _ := m2.Plan(saved, t0.Add(30*time.Second)); s2.Kind != StepWait {
		t.Fatalf("step %v before the delay", s2.Kind)
	}
	s2, _ := m2.Plan(saved, t0.Add(2*time.Minute))
	if s2.Kind != StepAction || s2.Action.Retry != 1 || s2.Action.Iteration != s.Action.Iteration {
		t.Fatalf("after reload: %+v", s2.Action)
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := &v1alpha1.RetryPolicy{Limit: 10}
	var got []time.Duration
	for n := int32(1); n <= 7; n++ {
		got = append(got, p.Delay(n))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("delay %d = %s, want %s", i+1, got[i], want[i])
		}
	}
}

func TestValidateRetryPolicy(t *testing.T) {
	spec := retrySpec(&v1alpha1.RetryPolicy{Limit: 0, Factor: i32(11)}, "")
	spec.States["done"] = v1alpha1.State{Terminal: true, OnRetryExhausted: "failed"}
	_, err := New("test", spec, Options{})
	if err == nil {
		t.Fatal("invalid retry policy accepted")
	}
	for _, want := range []string{"states[deploy].retryPolicy.limit", "states[deploy].retryPolicy.factor", "states[done].maxRetries"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
