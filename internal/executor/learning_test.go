package executor

import (
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A learning state runs its gate as a shell action; the gate's mark lines
// become little-loops' learning events, and its end the verdict: blocked
// when the state routes it, else failure.
func TestLearningState(t *testing.T) {
	cases := []struct {
		name, output string
		route        map[string]v1alpha1.StateName
		want         string
		events       []string
	}{
		{"all proven", "looprun-learning: stale missing A b\nlooprun-learning: explore 1 A b\nexplored\nlooprun-learning: proven A b\nlooprun-learning: complete\n", nil, "done",
			[]string{EventLearningTargetStale, EventLearningExploreInvoked, EventLearningTargetProven, EventLearningComplete}},
		{"refuted, routed", "looprun-learning: refuted X\nlooprun-learning: blocked refuted X\n", map[string]v1alpha1.StateName{"blocked": "held"}, "held",
			[]string{EventLearningTargetRefuted, EventLearningBlocked}},
		{"exhausted, not routed", "looprun-learning: blocked retries_exhausted X\n", nil, "no",
			[]string{EventLearningBlocked}},
		{"died", "", nil, "err", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &v1alpha1.LoopSpec{Initial: "gate", States: map[string]v1alpha1.State{
				"gate": {Learning: &v1alpha1.LearningSpec{Targets: []string{"A b", "it's"}}, OnSuccess: "done", OnFailure: "no", OnError: "err", Route: tc.route},
				"done": {Terminal: true}, "no": {Terminal: true}, "err": {Terminal: true}, "held": {Terminal: true},
			}}
			m, run := startRun(t, "test", spec, Options{})
			step, _ := m.Plan(run, t0)
			a := step.Action
			if a == nil || a.Agent || !a.CallsAgent || !strings.Contains(a.Command, `for t in 'A b' 'it'"'"'s'; do`) ||
				!strings.Contains(a.Command, "max=2\n") || !strings.Contains(a.Command, `claude --dangerously-skip-permissions -p "/ll:explore-api $t"`) {
				t.Fatalf("action %+v", a)
			}
			evs := eventsOf(m.Complete(run, &ActionResult{Output: tc.output}, t0))
			if run.CurrentState != tc.want {
				t.Errorf("in %s, want %s", run.CurrentState, tc.want)
			}
			var got []string
			for _, e := range evs {
				if strings.HasPrefix(e.Type, "learning_") {
					got = append(got, e.Type)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.events, ",") {
				t.Errorf("events %v, want %v", got, tc.events)
			}
		})
	}
}
