package localrun

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The rate-limit tries are written under little-loops' keys too, and a
// file little-loops wrote gives them back for the state the run is in.
func TestStateFileRateLimitKeys(t *testing.T) {
	first := metav1.NewTime(time.Unix(1700000000, 500e6))
	run := &v1alpha1.RunState{CurrentState: "fix", Phase: v1alpha1.PhaseRunning,
		Transient: &v1alpha1.TransientStatus{State: "fix", RateLimitShort: 3, RateLimitLong: 1, WaitedMs: 400500, FirstSeen: &first, Exhaustions: 2}}
	b, err := json.Marshal(encodeState("demo", "", nil, run))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"rate_limit_retries":{"fix":{"short_retries":3,"long_retries":1,"total_wait_seconds":400.5,"first_seen_at":1700000000.5}}`, `"consecutive_rate_limit_exhaustions":2`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("state file lacks %s:\n%s", want, b)
		}
	}
	llFile := `{"loop_name":"demo","current_state":"fix","iteration":4,"status":"running","captured":{},
		"rate_limit_retries":{"fix":{"short_retries":2,"long_retries":0,"total_wait_seconds":95.25,"first_seen_at":1700000000.0},"other":{"short_retries":1}},
		"consecutive_rate_limit_exhaustions":1}`
	var sf StateFile
	if err := json.Unmarshal([]byte(llFile), &sf); err != nil {
		t.Fatal(err)
	}
	back, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	tr := back.Transient
	if tr == nil || tr.State != "fix" || tr.RateLimitShort != 2 || tr.WaitedMs != 95250 || tr.Exhaustions != 1 || !tr.FirstSeen.Equal(&metav1.Time{Time: time.Unix(1700000000, 0)}) {
		t.Errorf("read back %+v", tr)
	}
}
