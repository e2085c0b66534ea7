package executor

import (
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A child machine's actions carry where their usage goes (WithUsageTo);
// a run's own carry nothing, their usage going to their own state.
func TestUsageTarget(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "ask", States: map[string]v1alpha1.State{
		"ask":  {Action: "/ask", ActionType: v1alpha1.ActionAgent, Next: "done"},
		"done": {Terminal: true},
	}}
	m, err := New("test", spec, Options{ContextDefaults: map[string]any{"run_dir": "/runs/child/"}})
	if err != nil {
		t.Fatal(err)
	}
	plan := func(m *Machine) *Action {
		run := &v1alpha1.RunState{}
		m.Start(run, "r", t0)
		s, _ := m.Plan(run, t0)
		if s.Action == nil {
			t.Fatalf("step %s", s.Kind)
		}
		return s.Action
	}
	if a := plan(m); a.UsageTo != nil || a.UsageTarget() != (UsageTarget{RunDir: "/runs/child/", State: "ask", Iteration: 1}) {
		t.Errorf("own action: %+v, target %+v", a.UsageTo, a.UsageTarget())
	}
	top := UsageTarget{RunDir: "/runs/top/", State: "sub", Iteration: 4}
	if a := plan(m.AsChild().WithUsageTo(&top)); a.UsageTarget() != top {
		t.Errorf("child's action: target %+v", a.UsageTarget())
	}
}
