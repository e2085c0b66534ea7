package loopfile

import (
	"strings"
	"testing"
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
