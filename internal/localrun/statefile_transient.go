package localrun

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// RateLimitFile is a state's rate-limit tries as little-loops keeps them
// (rate_limit_retries[STATE]).
type RateLimitFile struct {
	ShortRetries     int32   `json:"short_retries"`
	LongRetries      int32   `json:"long_retries"`
	TotalWaitSeconds float64 `json:"total_wait_seconds"`
	FirstSeenAt      float64 `json:"first_seen_at,omitempty"`
}

// TransientFile is the run's tries after failures of a known cause, whole
// (looprun's own key; little-loops' keys beside it are derived).
type TransientFile struct {
	State          string `json:"state,omitempty"`
	RateLimitShort int32  `json:"rate_limit_short,omitempty"`
	RateLimitLong  int32  `json:"rate_limit_long,omitempty"`
	WaitedMs       int64  `json:"waited_ms,omitempty"`
	FirstSeen      string `json:"first_seen,omitempty"`
	APIErrors      int32  `json:"api_errors,omitempty"`
	InfraRetries   int32  `json:"infra_retries,omitempty"`
	Waiting        string `json:"waiting,omitempty"`
	Exhaustions    int32  `json:"exhaustions,omitempty"`
}

// encodeTransient writes the run's tries into f: whole under looprun's
// key, and as little-loops keeps them.
func encodeTransient(f *StateFile, tr *v1alpha1.TransientStatus) {
	if tr == nil {
		return
	}
	f.TransientRetries = &TransientFile{State: tr.State, RateLimitShort: tr.RateLimitShort, RateLimitLong: tr.RateLimitLong,
		WaitedMs: tr.WaitedMs, FirstSeen: fmtTime(tr.FirstSeen), APIErrors: tr.APIErrors, InfraRetries: tr.InfraRetries,
		Waiting: tr.Waiting, Exhaustions: tr.Exhaustions}
	f.ConsecutiveRateLimitExhaustions = tr.Exhaustions
	if tr.RateLimitShort+tr.RateLimitLong > 0 {
		rl := RateLimitFile{ShortRetries: tr.RateLimitShort, LongRetries: tr.RateLimitLong, TotalWaitSeconds: float64(tr.WaitedMs) / 1000}
		if tr.FirstSeen != nil {
			rl.FirstSeenAt = float64(tr.FirstSeen.UnixMilli()) / 1000
		}
		f.RateLimitRetries = map[string]RateLimitFile{tr.State: rl}
	}
}

// transientStatus reads the tries back: looprun's key, else little-loops'
// keys for the current state (a file little-loops wrote may hold other
// states' too; looprun counts the state it is in).
func (f *StateFile) transientStatus() (*v1alpha1.TransientStatus, error) {
	if t := f.TransientRetries; t != nil {
		first, err := parseTime(t.FirstSeen)
		return &v1alpha1.TransientStatus{State: t.State, RateLimitShort: t.RateLimitShort, RateLimitLong: t.RateLimitLong,
			WaitedMs: t.WaitedMs, FirstSeen: first, APIErrors: t.APIErrors, InfraRetries: t.InfraRetries,
			Waiting: t.Waiting, Exhaustions: t.Exhaustions}, err
	}
	rl, ok := f.RateLimitRetries[f.CurrentState]
	if !ok && f.ConsecutiveRateLimitExhaustions == 0 {
		return nil, nil
	}
	tr := &v1alpha1.TransientStatus{State: f.CurrentState, Exhaustions: f.ConsecutiveRateLimitExhaustions,
		RateLimitShort: rl.ShortRetries, RateLimitLong: rl.LongRetries, WaitedMs: int64(rl.TotalWaitSeconds * 1000)}
	if rl.FirstSeenAt > 0 {
		tr.FirstSeen = &metav1.Time{Time: time.UnixMilli(int64(rl.FirstSeenAt * 1000))}
	}
	return tr, nil
}
