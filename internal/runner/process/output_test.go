package process

import (
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// The searches of a streamed output share one budget: many lines, each
// searched within the per-search limit, cannot add up to more.
func TestLineSearchesShareOneBudget(t *testing.T) {
	j := newLineJudge(&v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "never-there"})
	var clock time.Time
	reads := 0
	j.now = func() time.Time { // read before and after each search: it takes half a second
		reads++
		clock = clock.Add(time.Second / 2)
		return clock
	}
	lines := strings.Repeat("a line without it\n", 100)
	if _, err := j.Write([]byte(lines)); err != nil {
		t.Fatal(err)
	}
	j.flush()
	f := j.facts()
	if f.PatternMatched || !strings.Contains(f.PatternError, "together") {
		t.Errorf("facts %+v: want the budget spent", f)
	}
	if searches, want := reads/2, int(evaluate.MatchBudget/(time.Second/2)); searches != want {
		t.Errorf("%d searches: want them to stop once %s was spent (%d searches)", searches, evaluate.MatchBudget, want)
	}
}

// A pattern found before the budget is spent is found.
func TestLineSearchFindsWithinBudget(t *testing.T) {
	j := newLineJudge(&v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: `ok \d+`})
	if _, err := j.Write([]byte("no\nstill no\nok 42\nafter\n")); err != nil {
		t.Fatal(err)
	}
	if f := j.facts(); !f.PatternMatched || f.PatternError != "" {
		t.Errorf("facts %+v", f)
	}
}
