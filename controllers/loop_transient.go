package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// announceTransient turns the events of failures of a known cause (rate
// limits, API server errors, an agent killed after its result) into
// Kubernetes Events: a wait is a requeue, and the Event says until when.
func (s *step) announceTransient(ctx context.Context, e executor.Event) {
	switch e.Type {
	case executor.EventRateLimitWaiting:
		w := executor.RateLimitWaitingOf(e)
		d := time.Duration(w.WaitSeconds * float64(time.Second)).Round(time.Second)
		log.FromContext(ctx).Info("Action rate-limited; waiting", "state", w.State, "tier", w.Tier, "wait", d)
		s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonRateLimited, "Wait", "the action of state %s hit a rate limit: %s try %d in %s",
			w.State, w.Tier, w.Attempt, d)
	case executor.EventRateLimitExhausted:
		x := executor.RateLimitExhaustedOf(e)
		s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonRateLimitExhausted, "Escalate", "the action of state %s waited %vs on rate limits in all; next: %s",
			x.State, x.TotalWaitSeconds, orEnd(x.Next))
	case executor.EventRateLimitStorm:
		x := executor.RateLimitStormOf(e)
		s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonRateLimitStorm, "Escalate", "rate limits were exhausted %d times in a row (last in state %s)", x.Count, x.State)
	case executor.EventAPIErrorRetry, executor.EventInfraRetry:
		r := executor.TransientRetryOf(e)
		why := "met an API server error"
		if e.Type == executor.EventInfraRetry {
			why = "was killed after its result"
		}
		s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonActionRetry, "Retry", "the action of state %s %s: try %d in %vs", r.State, why, r.Attempt, r.Backoff)
	}
}
