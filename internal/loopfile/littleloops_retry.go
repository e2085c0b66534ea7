package loopfile

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// exitCodes reads a list of exit codes.
func (r *reader) exitCodes(m map[string]any, k, fp string) []int32 {
	list, ok := m[k].([]any)
	if !ok {
		r.fail("%s: must be a list of exit codes", fp)
		return nil
	}
	codes := []int32{}
	for i := range list {
		if c := r.int32p(map[string]any{k: list[i]}, k, fmt.Sprintf("%s[%d]", fp, i)); c != nil {
			codes = append(codes, *c)
		}
	}
	return codes
}

// retryPolicyKeys are the keys of a state's retry_policy, the twin of
// looprun's retryPolicy (little-loops has none: it ignores the key).
var retryPolicyKeys = table[v1alpha1.RetryPolicy]{keys: map[string]key[v1alpha1.RetryPolicy]{
	"limit": func(r *reader, m map[string]any, k, fp string, p *v1alpha1.RetryPolicy) {
		if n := r.int32p(m, k, fp); n != nil {
			p.Limit = *n
			if p.Limit < 1 || p.Limit > 100 {
				r.fail("%s: must be between 1 and 100 (how many times the action is run again), not %d", fp, p.Limit)
			}
		}
	},
	"backoff": durationKey(func(p *v1alpha1.RetryPolicy) **metav1.Duration { return &p.Backoff }),
	"factor": func(r *reader, m map[string]any, k, fp string, p *v1alpha1.RetryPolicy) {
		if p.Factor = r.int32p(m, k, fp); p.Factor != nil && (*p.Factor < 1 || *p.Factor > 10) {
			r.fail("%s: must be between 1 and 10, not %d", fp, *p.Factor)
		}
	},
	"max_delay": durationKey(func(p *v1alpha1.RetryPolicy) **metav1.Duration { return &p.MaxDelay }),
	"exit_codes": func(r *reader, m map[string]any, k, fp string, p *v1alpha1.RetryPolicy) {
		if p.ExitCodes = r.exitCodes(m, k, fp); len(p.ExitCodes) > 32 {
			r.fail("%s: at most 32 exit codes, not %d", fp, len(p.ExitCodes))
		}
	},
}}

// retryPolicyKey reads a state's retry_policy: {limit, backoff, factor,
// max_delay, exit_codes}, durations in seconds or as text (90s).
func retryPolicyKey(r *reader, m map[string]any, k, fp string, st *stateRead) {
	pm, ok := m[k].(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping {limit, backoff, factor, max_delay, exit_codes}", fp)
		return
	}
	p := &v1alpha1.RetryPolicy{}
	retryPolicyKeys.read(r, pm, fp, p)
	if _, ok := pm["limit"]; !ok {
		r.fail("%s: needs limit, how many times the action is run again (1 to 100)", fp)
	}
	for _, d := range []struct {
		key string
		v   *metav1.Duration
	}{{"backoff", p.Backoff}, {"max_delay", p.MaxDelay}} {
		if d.v != nil && d.v.Duration < 0 {
			r.fail("%s.%s: must not be negative", fp, d.key)
		}
	}
	st.RetryPolicy = p
}
