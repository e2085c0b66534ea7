package loopfile

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// rateLimitOf is the state's rateLimit, made when a key of it is read.
func rateLimitOf(s *stateRead) *v1alpha1.RateLimit {
	if s.RateLimit == nil {
		s.RateLimit = &v1alpha1.RateLimit{}
	}
	return s.RateLimit
}

// rateLimitKeys are little-loops' rate-limit keys of a state, read into
// its rateLimit.
var rateLimitKeys = map[string]key[stateRead]{
	"max_rate_limit_retries": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
		if n := r.int32p(m, k, fp); n != nil {
			if *n < 1 {
				r.fail("%s: must be at least 1, not %d", fp, *n)
			}
			rateLimitOf(s).MaxRetries = n
		}
	},
	"on_rate_limit_exhausted": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
		rateLimitOf(s).OnExhausted = r.str(m, k, fp)
	},
	"rate_limit_backoff_base_seconds": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
		rateLimitOf(s).Backoff = r.positiveSeconds(m, k, fp)
	},
	"rate_limit_max_wait_seconds": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
		rateLimitOf(s).MaxWait = r.positiveSeconds(m, k, fp)
	},
	"rate_limit_long_wait_ladder": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
		list, ok := m[k].([]any)
		if !ok || len(list) == 0 {
			r.fail("%s: must be a non-empty list of waits in seconds", fp)
			return
		}
		ladder := make([]metav1.Duration, 0, len(list))
		for i := range list {
			if d := r.positiveSeconds(map[string]any{k: list[i]}, k, fmt.Sprintf("%s[%d]", fp, i)); d != nil {
				ladder = append(ladder, *d)
			}
		}
		rateLimitOf(s).LongWaitLadder = ladder
	},
}

// positiveSeconds reads a whole number of seconds, at least 1.
func (r *reader) positiveSeconds(m map[string]any, k, fp string) *metav1.Duration {
	n := r.int32p(m, k, fp)
	if n == nil {
		return nil
	}
	if *n < 1 {
		r.fail("%s: must be at least 1 second, not %d", fp, *n)
		return nil
	}
	return &metav1.Duration{Duration: time.Duration(*n) * time.Second}
}

// checkRateLimitPair fails a state that has one of max_rate_limit_retries
// and on_rate_limit_exhausted without the other, as little-loops does.
func (r *reader) checkRateLimitPair(name string, m map[string]any) {
	_, retries := m["max_rate_limit_retries"]
	_, exhausted := m["on_rate_limit_exhausted"]
	switch {
	case retries && !exhausted:
		r.fail("states.%s.max_rate_limit_retries: needs on_rate_limit_exhausted, where the state goes when the waits are spent", name)
	case exhausted && !retries:
		r.fail("states.%s.on_rate_limit_exhausted: needs max_rate_limit_retries", name)
	}
}
