package loopfile

import (
	"strings"
	"testing"
	"time"
)

// little-loops' cost_ceiling becomes the state's costCeiling (enforced by
// looprun), with no "not supported" warning; a negative one is refused.
func TestCostCeilingIsRead(t *testing.T) {
	doc := "name: x\ninitial: s\nstates:\n  s:\n    action: /fix\n    cost_ceiling: {cost_ceiling_per_state: 0.5, cost_warn_at: 0.25}\n    next: done\n  done: {terminal: true}\n"
	f, err := Parse([]byte(doc), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.Loop.Spec.States["s"].CostCeiling
	if c == nil || c.MaxCostUSD != "0.50" || c.WarnAtUSD != "0.25" {
		t.Fatalf("costCeiling %+v", c)
	}
	for _, w := range f.Warnings {
		if strings.Contains(w, "cost") {
			t.Errorf("warning %q", w)
		}
	}
	_, err = Parse([]byte(strings.Replace(doc, "0.5,", "-1,", 1)), t.TempDir(), Options{})
	if err == nil || !strings.Contains(err.Error(), "states.s.cost_ceiling.cost_ceiling_per_state") {
		t.Errorf("a negative ceiling: %v", err)
	}
}

// idle_timeout is read, and default_idle_timeout given to every state
// without one.
func TestIdleTimeoutIsRead(t *testing.T) {
	doc := "name: x\ninitial: a\ndefault_idle_timeout: 60\nstates:\n  a:\n    action: /fix\n    idle_timeout: 30\n    next: b\n  b:\n    action: /more\n    next: done\n  done: {terminal: true}\n"
	f, err := Parse([]byte(doc), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := f.Loop.Spec.States
	a, b := st["a"], st["b"]
	if a.GetIdleTimeout() != 30*time.Second || b.GetIdleTimeout() != time.Minute || st["done"].IdleTimeout != nil {
		t.Errorf("idle timeouts %v %v %v", st["a"].IdleTimeout, st["b"].IdleTimeout, st["done"].IdleTimeout)
	}
	for _, w := range f.Warnings {
		if strings.Contains(w, "idle") {
			t.Errorf("warning %q", w)
		}
	}
}
