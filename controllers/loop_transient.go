package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/internal/executor"
)

// announceTransient turns the events of failures of a known cause (rate
// limits, API server errors, an agent killed after its result) into
// Kubernetes Events: a wait is a requeue, and the Event says until when.
func (s *step) announceTransient(ctx context.Context, e executor.Event) {
	state, _ := e.Data["state"].(string)
	switch e.Type {
	case executor.EventRateLimitWaiting:
		wait, _ := e.Data["wait_seconds"].(float64)
		d := time.Duration(wait * float64(time.Second)).Round(time.Second)
		log.FromContext(ctx).Info("Action rate-limited; waiting", "state", state, "tier", e.Data["tier"], "wait", d)
		s.r.event(s.loop, corev1.EventTypeWarning, "RateLimited", "Wait", "the action of state %s hit a rate limit: %s try %v in %s",
			state, e.Data["tier"], e.Data["attempt"], d)
	case executor.EventRateLimitExhausted:
		s.r.event(s.loop, corev1.EventTypeWarning, "RateLimitExhausted", "Escalate", "the action of state %s waited %vs on rate limits in all; next: %s",
			state, e.Data["total_wait_seconds"], orEnd(str(e.Data["next"])))
	case executor.EventRateLimitStorm:
		s.r.event(s.loop, corev1.EventTypeWarning, "RateLimitStorm", "Escalate", "rate limits were exhausted %v times in a row (last in state %s)", e.Data["count"], state)
	case executor.EventAPIErrorRetry, executor.EventInfraRetry:
		why := "met an API server error"
		if e.Type == executor.EventInfraRetry {
			why = "was killed after its result"
		}
		s.r.event(s.loop, corev1.EventTypeWarning, "ActionRetry", "Retry", "the action of state %s %s: try %v in %vs", state, why, e.Data["attempt"], e.Data["backoff"])
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
