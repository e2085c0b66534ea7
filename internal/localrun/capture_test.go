package localrun

import (
	"fmt"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// chain is n states s000.. each printing size bytes into capture c000..,
// then, when again is set, a state that writes c000 anew, then done.
func chain(n, size int, again bool) *v1alpha1.LoopSpec {
	states := map[string]v1alpha1.State{"done": {Terminal: true}}
	last := "done"
	if again {
		states["again"] = v1alpha1.State{Action: fmt.Sprintf("head -c %d /dev/zero | tr '\\0' y", size), Capture: "c000", Next: "done"}
		last = "again"
	}
	for i := range n {
		next := last
		if i < n-1 {
			next = fmt.Sprintf("s%03d", i+1)
		}
		states[fmt.Sprintf("s%03d", i)] = v1alpha1.State{
			Action: fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", size), Capture: fmt.Sprintf("c%03d", i), Next: next,
		}
	}
	return &v1alpha1.LoopSpec{Initial: "s000", States: states, MaxIterations: ptr.To(int32(n + 2))}
}

// Past the captures' budget every step shrinks every capture; each is
// reported cut (capture_truncated) once per truncation, not once per step
// (100 steps once logged 5,114 of them). A capture written anew and cut
// again is reported again.
func TestCaptureCutReportedOncePerTruncation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, size   int
		again     bool
		wantTimes map[string]int // how many reports per capture; others once
	}{
		// Each output is cut when captured (past 4 KiB), then by the budget.
		{name: "cut when captured", n: 100, size: 5000},
		// Each is whole when captured and cut by the budget only; c000 is
		// written anew at the end.
		{name: "cut by the budget", n: 40, size: 2000, again: true, wantTimes: map[string]int{"c000": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := newDriver(t, dir, chain(tc.n, tc.size, tc.again))
			run, err := d.Start(t.Context(), "r1")
			if err != nil || run.Phase != v1alpha1.PhaseCompleted {
				t.Fatalf("phase %s: %v", run.Phase, err)
			}
			times := map[string]int{}
			for _, e := range readEvents(t, d) {
				if e.Type == executor.EventCaptureTruncated {
					times[executor.CaptureTruncatedOf(e).Capture]++
				}
			}
			if len(times) != tc.n {
				t.Errorf("%d captures reported cut, want all %d", len(times), tc.n)
			}
			for i := range tc.n {
				name := fmt.Sprintf("c%03d", i)
				want := 1
				if w, ok := tc.wantTimes[name]; ok {
					want = w
				}
				if times[name] != want {
					t.Errorf("%s reported cut %d times, want %d", name, times[name], want)
				}
			}
		})
	}
}
