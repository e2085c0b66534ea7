package executor

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Events of failures of a known cause, as little-loops names them.
const (
	// EventRateLimitWaiting: a rate-limited action waits to run again
	// (little-loops writes it as a heartbeat of long waits; looprun once
	// at the start of every wait, short ones too).
	EventRateLimitWaiting = "rate_limit_waiting"
	// EventRateLimitExhausted: the waits added up to the state's maxWait.
	EventRateLimitExhausted = "rate_limit_exhausted"
	// EventRateLimitStorm: rate limits were exhausted three times in a row.
	EventRateLimitStorm = "rate_limit_storm"
	// EventAPIErrorRetry / EventAPIErrorExhausted: an API server error,
	// tried again in place; the tries used up.
	EventAPIErrorRetry     = "api_error_retry"
	EventAPIErrorExhausted = "api_error_exhausted"
	// EventInfraRetry / EventInfraRetryExhausted: an agent killed after its
	// result (exit 143), tried again in place; the tries used up.
	EventInfraRetry          = "infra_retry"
	EventInfraRetryExhausted = "infra_retry_exhausted"
)

// Tries after failures other than rate limits, and the storm threshold, as
// little-loops has them (they are not configurable there either).
const (
	apiErrorRetries  = 2
	apiErrorBackoff  = 30 * time.Second
	infraRetries     = 2
	infraBackoff     = 5 * time.Second
	stormExhaustions = 3
)

// Why a run waits (TransientStatus.Waiting).
const (
	WaitingRateLimit = "rate_limit"
	WaitingAPIError  = "api_error"
	WaitingInfra     = "infra"
)

// failureCause is what a failed action's output says went wrong.
type failureCause int

const (
	causeOther     failureCause = iota // a real failure, or a transient one nothing is done about
	causeRateLimit                     // a rate limit or quota
	causeAPIError                      // the API server erred or is overloaded
	causeInfra                         // the agent was killed (143) after its result
	causeAuth                          // a credential was refused
)

// The patterns little-loops reads a failed action's stdout and stderr for,
// lower-cased, in the order it tries them: the first class that matches
// decides.
var (
	quotaPatterns = []string{"out of extra usage", "rate limit", "quota exceeded", "too many requests",
		"api limit", "usage limit", "429", "resource exhausted", "resourceexhausted"}
	// Causes tried before credentials that lead nowhere: a network
	// error, a timeout, a resource of the machine.
	otherTransientPatterns = []string{"connection refused", "connection timeout", "network error", "dns resolution",
		"connection reset", "service unavailable", "502 bad gateway", "503 service unavailable", "504 gateway timeout",
		"timeout", "timed out", "deadline exceeded", "disk full", "no space left", "resource temporarily unavailable",
		"too many open files", "memory allocation failed", "out of memory"}
	nodeErrorCodes   = regexp.MustCompile(`\b(econnrefused|enotfound|etimedout)\b`)
	authPatterns     = []string{"401", "403", "unauthorized", "forbidden", "authentication", "invalid api key", "invalid_api_key", "expired token"}
	apiErrorPatterns = []string{"the server had an error", "internal server error", "overloaded_error", "overloaded", "529", "api error"}
)

// classifyFailure reads why an action that exited with code failed from
// what it printed; resultSeen says an agent's stream had reached its
// result record.
func classifyFailure(text string, code int, resultSeen bool) failureCause {
	if code == 143 && resultSeen {
		return causeInfra
	}
	lower := strings.ToLower(text)
	has := func(patterns []string) bool {
		for _, p := range patterns {
			if strings.Contains(lower, p) {
				return true
			}
		}
		return false
	}
	switch {
	case has(quotaPatterns):
		return causeRateLimit
	case has(otherTransientPatterns) || nodeErrorCodes.MatchString(lower):
		return causeOther
	case has(authPatterns):
		return causeAuth
	case has(apiErrorPatterns):
		return causeAPIError
	}
	return causeOther
}

// resultSeen reports whether an agent's stream came to its result record:
// as its runner saw it, or as its usage shows (only a result record
// reports usage; a cluster's step tells the usage alone).
func resultSeen(res *ActionResult) bool {
	return res.ResultSeen || res.Usage != nil
}

// transient handles a failed action whose output names a cause the machine
// knows (spec.classifyFailures): it runs the action again in place after a
// wait, or routes where the cause says. It reports whether it routed; when
// not, the verdict routes as usual.
func (t *turn) transient(st *v1alpha1.State, res *ActionResult, verdict string) bool {
	run, spec := t.run, t.m.spec
	if res == nil || st.Action == "" {
		return false
	}
	if res.Failure != nil || res.ExitCode == 0 || !spec.Classifies(st) {
		run.Transient = nil
		return false
	}
	tr := run.Transient
	if tr == nil || tr.State != run.CurrentState {
		tr = &v1alpha1.TransientStatus{State: run.CurrentState}
		if run.Transient != nil {
			tr.Exhaustions = run.Transient.Exhaustions
		}
		run.Transient = tr
	}
	tr.Waiting = ""
	switch classifyFailure(res.Output+"\n"+res.Stderr, res.ExitCode, resultSeen(res)) {
	case causeRateLimit:
		return t.rateLimited(st, tr)
	case causeAPIError:
		return t.retryFixed(tr, &tr.APIErrors, apiErrorRetries, apiErrorBackoff, WaitingAPIError, EventAPIErrorRetry, EventAPIErrorExhausted)
	case causeInfra:
		return t.retryFixed(tr, &tr.InfraRetries, infraRetries, infraBackoff, WaitingInfra, EventInfraRetry, EventInfraRetryExhausted)
	case causeAuth:
		// Trying again cannot mend a refused credential.
		if st.OnError == "" {
			return false
		}
		t.transition(st.OnError, verdict)
		return true
	}
	run.Transient = nil
	return false
}

// rateLimited waits a short try's backoff, then the long waits, and once
// they add up to maxWait routes to onExhausted (else onError; with
// neither, the verdict routes, but a little-loops file's run ends as
// ll-loop's does, "No valid transition").
func (t *turn) rateLimited(st *v1alpha1.State, tr *v1alpha1.TransientStatus) bool {
	run, rl := t.run, st.RateLimit
	if tr.FirstSeen == nil {
		tr.FirstSeen = &metav1.Time{Time: t.now}
	}
	var wait time.Duration
	tier := "short"
	attempt := tr.RateLimitShort + 1
	if tr.RateLimitShort < rl.GetMaxRetries() {
		tr.RateLimitShort++
		base := rl.GetBackoff()
		wait = doubled(base, tr.RateLimitShort-1) + jitter(base, run.RunID, run.CurrentState, tr.RateLimitShort)
	} else {
		tr.RateLimitLong++
		ladder := rl.GetLongWaitLadder()
		wait = ladder[min(int(tr.RateLimitLong)-1, len(ladder)-1)]
		tier, attempt = "long_wait", tr.RateLimitLong
	}
	tr.WaitedMs += wait.Milliseconds()
	at := t.now.Add(wait)
	maxWait := rl.GetMaxWait()
	t.emit(EventRateLimitWaiting, RateLimitWaitingEvent{
		State: run.CurrentState, Tier: tier, Attempt: attempt,
		WaitSeconds: float64(wait.Milliseconds()) / 1000, NextAttemptAt: float64(at.UnixMilli()) / 1000,
		TotalWaitedSeconds: float64(tr.WaitedMs) / 1000, BudgetSeconds: maxWait.Seconds(),
	}.Data())
	if tier == "short" || time.Duration(tr.WaitedMs)*time.Millisecond < maxWait {
		return t.again(tr, wait, WaitingRateLimit, true)
	}
	// The waits are spent: after this last one the state goes on.
	target := rl.GetOnExhausted()
	if target == "" {
		target = st.OnError
	}
	t.emit(EventRateLimitExhausted, RateLimitExhaustedEvent{
		State: run.CurrentState, Retries: tr.RateLimitShort + tr.RateLimitLong,
		ShortRetries: tr.RateLimitShort, LongRetries: tr.RateLimitLong,
		TotalWaitSeconds: float64(tr.WaitedMs) / 1000, Next: target,
	}.Data())
	tr.RateLimitShort, tr.RateLimitLong, tr.WaitedMs, tr.FirstSeen = 0, 0, 0, nil
	tr.Exhaustions++
	if tr.Exhaustions >= stormExhaustions {
		t.emit(EventRateLimitStorm, RateLimitStormEvent{State: run.CurrentState, Count: tr.Exhaustions}.Data())
	}
	if target == "" {
		if t.m.opts.LittleLoops {
			// ll-loop has nowhere to go: its run ends, the verdict unrouted.
			t.routeTo(st, "", "", noRoute)
			return true
		}
		return false
	}
	if t.transition(target, "") {
		t.waitAtLeast(wait)
	}
	return true
}

// retryFixed runs the action again after a fixed backoff, up to limit
// times (counted in *count); then the verdict routes as usual.
func (t *turn) retryFixed(tr *v1alpha1.TransientStatus, count *int32, limit int32, backoff time.Duration, why, retryEvent, exhaustedEvent string) bool {
	state := t.run.CurrentState
	if *count >= limit {
		t.emit(exhaustedEvent, TransientExhaustedEvent{State: state, Retries: *count}.Data())
		*count = 0
		return false
	}
	*count++
	t.emit(retryEvent, TransientRetryEvent{State: state, Attempt: *count, Backoff: backoff.Seconds()}.Data())
	return t.again(tr, backoff, why, false)
}

// again routes the state to itself, to run its action after wait. A
// rate-limit try is not a re-entry that maxRetries counts.
func (t *turn) again(tr *v1alpha1.TransientStatus, wait time.Duration, why string, exempt bool) bool {
	run := t.run
	state := run.CurrentState
	if !t.transition(state, "") {
		return true
	}
	if exempt {
		if run.RetryCounts[state]--; run.RetryCounts[state] <= 0 {
			delete(run.RetryCounts, state)
		}
	}
	tr.Waiting = why
	t.waitAtLeast(wait)
	return true
}

// waitAtLeast holds the next step back by wait (or by the loop's backoff,
// when that is longer).
func (t *turn) waitAtLeast(wait time.Duration) {
	at := metav1.NewTime(t.now.Add(wait))
	if next := t.run.NextStepAt; next == nil || next.Before(&at) {
		t.run.NextStepAt = &at
	}
}

// doubled is base·2^n, at most a year.
func doubled(base time.Duration, n int32) time.Duration {
	const most = 365 * 24 * time.Hour
	for ; n > 0 && base < most; n-- {
		base *= 2
	}
	return min(base, most)
}

// jitter is a share of base in [0, base), the same for the same run,
// state and try: a machine that computes the step again after a restart
// waits as long.
func jitter(base time.Duration, runID, state string, try int32) time.Duration {
	if base <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%s/%d", runID, state, try)
	return time.Duration(h.Sum64() % uint64(base)) //nolint:gosec // base is positive, the share below it
}

// timeoutKind is how the action timed out: wall (its timeout), idle (its
// idle timeout), or "" when it did not.
func timeoutKind(res *ActionResult) string {
	switch {
	case res.IdledOut:
		return "idle"
	case res.TimedOut:
		return "wall"
	}
	return ""
}

// More of what little-loops reads a failed action's output for, after the
// causes classifyFailure knows: all of them transient to it.
var (
	lateTransientPatterns = []string{"prompt is too long", "context length exceeded", "context window", "maximum context",
		"requires a valid session id", "requires a valid session title", "command not found", "read-only variable",
		`file "<string>"`, `file "<stdin>"`}
	killedWord = regexp.MustCompile(`\bkilled\b`)
)

// failureType names why an action that exited with code failed, as
// little-loops names it for ${captured.X.failure_type}: infra_retry,
// transient, non_recoverable (a credential refused) or real.
func failureType(text string, code int, resultSeen bool) string {
	switch classifyFailure(text, code, resultSeen) {
	case causeInfra:
		return "infra_retry"
	case causeRateLimit, causeAPIError:
		return "transient"
	case causeAuth:
		return "non_recoverable"
	}
	lower := strings.ToLower(text)
	for _, p := range otherTransientPatterns {
		if strings.Contains(lower, p) {
			return "transient"
		}
	}
	if nodeErrorCodes.MatchString(lower) || killedWord.MatchString(lower) || strings.Contains(text, "<tool_use_error>") {
		return "transient"
	}
	for _, p := range lateTransientPatterns {
		if strings.Contains(lower, p) {
			return "transient"
		}
	}
	return "real"
}
