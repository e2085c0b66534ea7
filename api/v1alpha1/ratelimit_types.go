package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FailureScope says whose failed actions the machine reads for a cause it
// knows (spec.classifyFailures).
// +kubebuilder:validation:Enum=Agent;All;None
type FailureScope string

const (
	// ClassifyAgent reads the failures of agent actions only (the default).
	ClassifyAgent FailureScope = "Agent"
	// ClassifyAll reads the failures of every action, shell ones too, as
	// little-loops does (little-loops files get it).
	ClassifyAll FailureScope = "All"
	// ClassifyNone reads none: a failed action is judged as it is.
	ClassifyNone FailureScope = "None"
)

// Defaults of a state's rateLimit, little-loops' own.
const (
	DefaultRateLimitRetries = 3
	DefaultRateLimitBackoff = 30 * time.Second
	DefaultRateLimitMaxWait = 6 * time.Hour
)

// DefaultRateLimitLadder are the long waits after the short tries.
var DefaultRateLimitLadder = []time.Duration{5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour}

// RateLimit is how a state's action that failed on a rate limit or a quota
// (its output says 429, "rate limit", "quota exceeded", ...) waits and runs
// again. First come maxRetries short tries, the n-th after backoff·2^(n−1)
// plus up to backoff more; then the long waits of longWaitLadder, its last
// repeated, until the waits add up to maxWait and the state goes to
// onExhausted. These tries are not re-entries for maxRetries, and in a
// cluster a wait holds no worker. little-loops: max_rate_limit_retries,
// rate_limit_backoff_base_seconds, rate_limit_long_wait_ladder,
// rate_limit_max_wait_seconds, on_rate_limit_exhausted.
type RateLimit struct {
	// maxRetries is how many short tries come first (default 3).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxRetries *int32 `json:"maxRetries,omitempty"`

	// backoff is the base of the short tries' waits (default 30s).
	// +optional
	Backoff *metav1.Duration `json:"backoff,omitempty"`

	// maxWait is how long the action may wait in all (default 6h).
	// +optional
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`

	// longWaitLadder are the waits after the short tries, the last one
	// repeated (default 5m, 15m, 30m, 1h).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	LongWaitLadder []metav1.Duration `json:"longWaitLadder,omitempty"`

	// onExhausted is where the state goes once maxWait is spent; unset:
	// onError, else the verdict routes as it is.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnExhausted string `json:"onExhausted,omitempty"`
}

// GetMaxRetries returns the number of short tries.
func (r *RateLimit) GetMaxRetries() int32 {
	if r == nil || r.MaxRetries == nil {
		return DefaultRateLimitRetries
	}
	return *r.MaxRetries
}

// GetBackoff returns the base of the short tries' waits.
func (r *RateLimit) GetBackoff() time.Duration {
	if r == nil || r.Backoff == nil {
		return DefaultRateLimitBackoff
	}
	return r.Backoff.Duration
}

// GetMaxWait returns how long the action may wait in all.
func (r *RateLimit) GetMaxWait() time.Duration {
	if r == nil || r.MaxWait == nil {
		return DefaultRateLimitMaxWait
	}
	return r.MaxWait.Duration
}

// GetLongWaitLadder returns the long waits.
func (r *RateLimit) GetLongWaitLadder() []time.Duration {
	if r == nil || len(r.LongWaitLadder) == 0 {
		return DefaultRateLimitLadder
	}
	out := make([]time.Duration, len(r.LongWaitLadder))
	for i, d := range r.LongWaitLadder {
		out[i] = d.Duration
	}
	return out
}

// GetOnExhausted returns onExhausted.
func (r *RateLimit) GetOnExhausted() string {
	if r == nil {
		return ""
	}
	return r.OnExhausted
}

// TransientStatus counts the tries of the current state's action after
// failures of a cause the machine knows (spec.classifyFailures).
type TransientStatus struct {
	// state is the state whose action the counts are of.
	// +optional
	State string `json:"state,omitempty"`
	// rateLimitShort is how many short rate-limit tries were made.
	// +optional
	RateLimitShort int32 `json:"rateLimitShort,omitempty"`
	// rateLimitLong is how many long rate-limit waits were made.
	// +optional
	RateLimitLong int32 `json:"rateLimitLong,omitempty"`
	// waitedMs is how long the action waited on rate limits in all.
	// +optional
	WaitedMs int64 `json:"waitedMs,omitempty"`
	// firstSeen is when the first rate limit of this streak was seen.
	// +optional
	FirstSeen *metav1.Time `json:"firstSeen,omitempty"`
	// apiErrors is how many tries followed an API server error.
	// +optional
	APIErrors int32 `json:"apiErrors,omitempty"`
	// infraRetries is how many tries followed an agent killed after its
	// result.
	// +optional
	InfraRetries int32 `json:"infraRetries,omitempty"`
	// waiting says why the run waits now (rate_limit, api_error, infra);
	// empty when it does not.
	// +optional
	Waiting string `json:"waiting,omitempty"`
	// exhaustions counts rate-limit exhaustions in a row, of any state.
	// +optional
	Exhaustions int32 `json:"exhaustions,omitempty"`
}
