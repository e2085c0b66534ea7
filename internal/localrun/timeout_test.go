package localrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A state file whose accumulated_ms is near the int64 bound still times
// out: the time spent saturates, it does not wrap round to a negative
// time that would disable the loop's timeout.
func TestHugeAccumulatedTimeStillTimesOut(t *testing.T) {
	for _, ms := range []int64{9223372036854775000, 9223372036854775807, 1 << 62, 9300000000000} {
		t.Run(fmt.Sprint(ms), func(t *testing.T) {
			dir := t.TempDir()
			s := spec(map[string]v1alpha1.State{
				"check": {Action: "echo $LOOPRUN_ITERATION >> trace", Next: "check"},
				"done":  {Terminal: true},
			})
			s.Timeout = &metav1.Duration{Duration: time.Hour}
			s.MaxIterations = ptr.To(int32(20))
			s.MaxEdgeRevisits = ptr.To(int32(100))
			d := newDriver(t, dir, s)
			started := time.Now().Add(-time.Minute)
			run := &v1alpha1.RunState{}
			d.Machine.Start(run, "r1", started)
			run.Phase = v1alpha1.PhaseInterrupted
			run.UpdatedAt = &metav1.Time{Time: started.Add(time.Second)}
			run.AccumulatedMs = ms
			if err := d.Resume(t.Context(), run); err != nil {
				t.Fatal(err)
			}
			if run.TerminatedBy != v1alpha1.TerminatedTimeout {
				trace, _ := os.ReadFile(filepath.Join(dir, "trace"))
				t.Errorf("ended by %q after %d actions, want timeout at once", run.TerminatedBy, strings.Count(string(trace), "\n"))
			}
			sf, err := d.Store.Load()
			if err != nil || sf.Status != StatusTimedOut || sf.AccumulatedMs < ms {
				t.Errorf("state file: status %q, accumulated_ms %d (%v)", sf.Status, sf.AccumulatedMs, err)
			}
		})
	}
}
