package executor

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
)

func TestClassifyFailure(t *testing.T) {
	for _, tc := range []struct {
		text       string
		code       int
		resultSeen bool
		want       failureCause
	}{
		{"API Error: 429 {\"type\":\"rate_limit_error\"}", 1, false, causeRateLimit},
		{"Claude AI usage limit reached", 1, false, causeRateLimit},
		{"You're out of extra usage", 1, false, causeRateLimit},
		{"Too Many Requests", 1, false, causeRateLimit},
		{"ran 1429 tests", 1, false, causeRateLimit}, // as little-loops reads it
		{"API Error: 500 Internal server error", 1, false, causeAPIError},
		{"overloaded_error", 1, false, causeAPIError},
		{"HTTP 529", 1, false, causeAPIError},
		{"Invalid API key · Please run /login", 1, false, causeAuth},
		{"403 Forbidden", 1, false, causeAuth},
		// A network error or a timeout is read before a credential.
		{"connection refused while checking 401", 1, false, causeOther},
		{"Error: ECONNREFUSED 401", 1, false, causeOther},
		{"request timed out: 403", 1, false, causeOther},
		// A rate limit is read before anything else.
		{"timeout after 429", 1, false, causeRateLimit},
		// Killed after its result: the agent's teardown, not its failure.
		{"", 143, true, causeInfra},
		{"", 143, false, causeOther},
		{"assertion failed: 2 != 3", 1, false, causeOther},
		{"ModuleNotFoundError: no module named x", 1, false, causeOther},
	} {
		if got := classifyFailure(tc.text, tc.code, tc.resultSeen); got != tc.want {
			t.Errorf("classifyFailure(%q, %d, %v) = %d, want %d", tc.text, tc.code, tc.resultSeen, got, tc.want)
		}
	}
}

func rateLimited() ActionResult {
	return ActionResult{ExitCode: 1, Stderr: "[result] API Error: 429 rate_limit_error"}
}

func agentSpec(st v1alpha1.State) *v1alpha1.LoopSpec {
	st.ActionType = v1alpha1.ActionAgent
	st.Evaluate = &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}
	if st.Action == "" {
		st.Action = "fix it"
	}
	return &v1alpha1.LoopSpec{Initial: "fix", States: map[string]v1alpha1.State{
		"fix":     st,
		"done":    {Terminal: true},
		"waited":  {Terminal: true},
		"broken":  {Terminal: true},
		"judged":  {Terminal: true},
		"another": {Terminal: true},
	}}
}

// waits lists the rate_limit_waiting events' tiers and waits.
func waits(r *runResult) (tiers []string, seconds []float64) {
	for _, e := range r.events {
		if e.Type == EventRateLimitWaiting {
			tiers = append(tiers, e.Data["tier"].(string))
			seconds = append(seconds, e.Data["wait_seconds"].(float64))
		}
	}
	return tiers, seconds
}

// A rate-limited agent waits out the short tries, then succeeds: the tries
// are not re-entries maxRetries counts, the waits double with jitter.
func TestRateLimitShortTriesThenSuccess(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", OnFailure: "judged", OnError: "broken",
		MaxRetries: i32(1), OnRetryExhausted: "another",
		RateLimit: &v1alpha1.RateLimit{Backoff: dur(10 * time.Second)}})
	acts := &fakeActions{results: map[string][]ActionResult{"fix it": {rateLimited(), rateLimited(), rateLimited(), {ExitCode: 0}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" {
		t.Fatalf("ended in %s: %s", r.run.CurrentState, r.run.Message)
	}
	tiers, secs := waits(r)
	if !slices.Equal(tiers, []string{"short", "short", "short"}) {
		t.Fatalf("tiers %v", tiers)
	}
	for i, s := range secs {
		lo := 10 * float64(int(1)<<i)
		if s < lo || s >= lo+10 {
			t.Errorf("wait %d: %.3fs, want [%v, %v)", i+1, s, lo, lo+10)
		}
	}
	var starts []time.Time
	for _, e := range r.events {
		if e.Type == EventActionStart {
			starts = append(starts, e.Time)
		}
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]).Seconds(); gap < secs[i-1] {
			t.Errorf("try %d started %.3fs after the one before, less than its wait %.3fs", i+1, gap, secs[i-1])
		}
	}
	if r.run.Transient != nil {
		t.Errorf("transient counts left after success: %+v", r.run.Transient)
	}
	if n := r.count(EventRetryExhausted); n != 0 {
		t.Errorf("%d retry_exhausted: rate-limit tries counted as re-entries", n)
	}
	if r.run.Iteration != 4 {
		t.Errorf("iteration %d, want 4 (each try is one, as in little-loops)", r.run.Iteration)
	}
}

// After the short tries come the ladder's waits, its last repeated, until
// they add up to maxWait; then the state goes to onExhausted after the
// last wait.
func TestRateLimitLadderThenExhausted(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", OnError: "broken", RateLimit: &v1alpha1.RateLimit{
		MaxRetries: i32(1), Backoff: dur(time.Second), MaxWait: dur(20 * time.Minute),
		LongWaitLadder: []metav1.Duration{{Duration: 5 * time.Minute}, {Duration: 10 * time.Minute}}, OnExhausted: "waited"}})
	many := slices.Repeat([]ActionResult{rateLimited()}, 20)
	r := runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"fix it": many}}, Options{}, time.Millisecond)
	if r.run.CurrentState != "waited" {
		t.Fatalf("ended in %s: %s", r.run.CurrentState, r.run.Message)
	}
	tiers, secs := waits(r)
	if !slices.Equal(tiers, []string{"short", "long_wait", "long_wait", "long_wait"}) || !slices.Equal(secs[1:], []float64{300, 600, 600}) {
		t.Fatalf("tiers %v, waits %v", tiers, secs)
	}
	if n := r.count(EventActionStart); n != 4 {
		t.Errorf("%d action starts, want 4 (the last wait leads to onExhausted)", n)
	}
	var ex Event
	for _, e := range r.events {
		if e.Type == EventRateLimitExhausted {
			ex = e
		}
	}
	if ex.Data["next"] != "waited" || ex.Data["short_retries"] != int32(1) || ex.Data["long_retries"] != int32(3) {
		t.Errorf("rate_limit_exhausted %v", ex.Data)
	}
	if w := ex.Data["total_wait_seconds"].(float64); w < 1500 || w > 1502 {
		t.Errorf("total_wait_seconds %v", w)
	}
	// The route to onExhausted waits the last wait too, as little-loops
	// sleeps it first.
	var exhaustedAt, endAt time.Time
	for _, e := range r.events {
		switch e.Type {
		case EventRateLimitExhausted:
			exhaustedAt = e.Time
		case EventLoopComplete:
			endAt = e.Time
		}
	}
	if endAt.Sub(exhaustedAt) < 10*time.Minute {
		t.Errorf("the run went on %v after the exhaustion, before the last wait of 10m", endAt.Sub(exhaustedAt))
	}
}

// No onExhausted: onError; neither: the verdict routes as it is (in a
// little-loops file the run ends).
func TestRateLimitExhaustedFallsBack(t *testing.T) {
	short := &v1alpha1.RateLimit{MaxRetries: i32(1), Backoff: dur(time.Second), MaxWait: dur(time.Second), LongWaitLadder: []metav1.Duration{{Duration: time.Second}}}
	for _, tc := range []struct {
		st   v1alpha1.State
		want string
	}{
		{v1alpha1.State{OnSuccess: "done", OnFailure: "judged", OnError: "broken", RateLimit: short}, "broken"},
		{v1alpha1.State{OnSuccess: "done", OnFailure: "judged", RateLimit: short}, "judged"},
	} {
		r := runLoop(t, agentSpec(tc.st), &fakeActions{results: map[string][]ActionResult{"fix it": slices.Repeat([]ActionResult{rateLimited()}, 5)}}, Options{}, time.Millisecond)
		if r.run.CurrentState != tc.want {
			t.Errorf("ended in %s, want %s", r.run.CurrentState, tc.want)
		}
	}
	// In a little-loops file, neither ends the run as ll-loop's does.
	st := v1alpha1.State{OnSuccess: "done", OnFailure: "judged", RateLimit: short}
	r := runLoop(t, agentSpec(st), &fakeActions{results: map[string][]ActionResult{"fix it": slices.Repeat([]ActionResult{rateLimited()}, 5)}}, Options{LittleLoops: true}, time.Millisecond)
	if r.run.CurrentState != "fix" || r.run.TerminatedBy != v1alpha1.TerminatedError || r.run.Message != noRoute {
		t.Errorf("little-loops file: ended in %s, %s: %q", r.run.CurrentState, r.run.TerminatedBy, r.run.Message)
	}
}

// Three exhaustions in a row are a storm.
func TestRateLimitStorm(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", RateLimit: &v1alpha1.RateLimit{
		MaxRetries: i32(1), Backoff: dur(time.Second), MaxWait: dur(time.Second), OnExhausted: "fix"}})
	spec.MaxIterations = i32(6)
	r := runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"fix it": slices.Repeat([]ActionResult{rateLimited()}, 10)}}, Options{}, time.Millisecond)
	if n := r.count(EventRateLimitExhausted); n != 3 {
		t.Fatalf("%d exhaustions", n)
	}
	if n := r.count(EventRateLimitStorm); n != 1 {
		t.Errorf("%d rate_limit_storm events, want 1", n)
	}
}

// An API server error runs the action twice more, 30s apart, then routes
// its verdict; those tries are re-entries.
func TestAPIErrorRetries(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", OnFailure: "judged", OnError: "broken"})
	overloaded := ActionResult{ExitCode: 1, Output: "API Error: 529 overloaded_error"}
	r := runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"fix it": {overloaded, overloaded, overloaded}}}, Options{}, time.Millisecond)
	if r.run.CurrentState != "judged" {
		t.Fatalf("ended in %s, want judged (the failure's route)", r.run.CurrentState)
	}
	if a, b := r.count(EventAPIErrorRetry), r.count(EventAPIErrorExhausted); a != 2 || b != 1 {
		t.Errorf("%d api_error_retry, %d api_error_exhausted", a, b)
	}
	// These tries are re-entries: maxRetries 1 escalates at the second.
	spec = agentSpec(v1alpha1.State{OnSuccess: "done", OnFailure: "judged", MaxRetries: i32(1), OnRetryExhausted: "another"})
	r = runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"fix it": {overloaded, overloaded, overloaded}}}, Options{}, time.Millisecond)
	if r.run.CurrentState != "another" {
		t.Errorf("with maxRetries 1 ended in %s, want another", r.run.CurrentState)
	}
}

// An agent killed after its result runs again after 5s, whether its
// result reported usage or not.
func TestInfraRetry(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", OnError: "broken"})
	for _, killed := range []ActionResult{
		{ExitCode: 143, Usage: &agentstream.Usage{InputTokens: 1}},
		{ExitCode: 143, ResultSeen: true},
	} {
		r := runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"fix it": {killed, {ExitCode: 0}}}}, Options{}, time.Millisecond)
		if r.run.CurrentState != "done" || r.count(EventInfraRetry) != 1 {
			t.Fatalf("%+v: ended in %s with %d infra_retry", killed, r.run.CurrentState, r.count(EventInfraRetry))
		}
	}
}

// A refused credential goes straight to onError, whatever the verdict.
func TestAuthFailureGoesToOnError(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", OnFailure: "judged", OnError: "broken"})
	r := runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"fix it": {{ExitCode: 1, Output: "Invalid API key · Please run /login"}}}}, Options{}, time.Millisecond)
	if r.run.CurrentState != "broken" {
		t.Fatalf("ended in %s", r.run.CurrentState)
	}
}

// By default only agent actions are read; All reads shell ones too, None
// none.
func TestClassifyFailuresScope(t *testing.T) {
	for _, tc := range []struct {
		scope v1alpha1.FailureScope
		agent bool
		waits bool
	}{
		{"", true, true}, {"", false, false}, {v1alpha1.ClassifyAll, false, true}, {v1alpha1.ClassifyNone, true, false},
	} {
		st := v1alpha1.State{Action: "curl api", OnSuccess: "done", OnFailure: "judged",
			RateLimit: &v1alpha1.RateLimit{MaxRetries: i32(1), Backoff: dur(time.Second)}}
		if tc.agent {
			st.ActionType = v1alpha1.ActionAgent
		}
		spec := &v1alpha1.LoopSpec{Initial: "fix", ClassifyFailures: tc.scope, States: map[string]v1alpha1.State{
			"fix": st, "done": {Terminal: true}, "judged": {Terminal: true}}}
		r := runLoop(t, spec, &fakeActions{results: map[string][]ActionResult{"curl api": {{ExitCode: 22, Output: "HTTP 429 Too Many Requests"}, {ExitCode: 0}}}}, Options{}, time.Millisecond)
		if got := r.count(EventRateLimitWaiting) > 0; got != tc.waits {
			t.Errorf("scope %q, agent %v: waited %v, want %v (ended in %s)", tc.scope, tc.agent, got, tc.waits, r.run.CurrentState)
		}
	}
}

// The same run, state and try wait as long (a step computed again after a
// restart); another try waits otherwise.
func TestJitterIsStable(t *testing.T) {
	a := jitter(30*time.Second, "run-1", "fix", 1)
	if b := jitter(30*time.Second, "run-1", "fix", 1); a != b {
		t.Errorf("jitter %v then %v", a, b)
	}
	if a < 0 || a >= 30*time.Second {
		t.Errorf("jitter %v outside [0, 30s)", a)
	}
	if doubled(time.Hour, 100) != 365*24*time.Hour {
		t.Errorf("doubled does not stop at a year: %v", doubled(time.Hour, 100))
	}
}

func TestValidateRateLimit(t *testing.T) {
	spec := agentSpec(v1alpha1.State{OnSuccess: "done", RateLimit: &v1alpha1.RateLimit{
		MaxRetries: i32(0), Backoff: dur(0), LongWaitLadder: []metav1.Duration{{Duration: -time.Second}}, OnExhausted: "nowhere"}})
	errs := Validate(spec).ToAggregate().Error()
	for _, want := range []string{"spec.states[fix].rateLimit.maxRetries", "spec.states[fix].rateLimit.backoff", "spec.states[fix].rateLimit.longWaitLadder[0]", "spec.states[fix].rateLimit.onExhausted"} {
		if !strings.Contains(errs, want) {
			t.Errorf("no error names %s: %s", want, errs)
		}
	}
}

// little-loops' fragments put rate-limit keys on sub-loop states too: the
// loop is valid, the keys unused.
func TestRateLimitOnASubLoopStateIsValid(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "child", States: map[string]v1alpha1.State{
		"child": {Loop: "refine", OnSuccess: "done", OnError: "done", RateLimit: &v1alpha1.RateLimit{MaxRetries: i32(2), OnExhausted: "done"}},
		"done":  {Terminal: true},
	}}
	if errs := Validate(spec); len(errs) > 0 {
		t.Errorf("invalid: %v", errs.ToAggregate())
	}
}
