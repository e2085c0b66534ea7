package executor

import (
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

type evaluateResult = evaluate.Result

func TestRoute(t *testing.T) {
	short := v1alpha1.State{OnSuccess: "ok", OnFailure: "bad", OnError: "err"}
	onlyErr := v1alpha1.State{OnSuccess: "ok", OnError: "err"}
	table := v1alpha1.State{Route: map[string]v1alpha1.StateName{"success": "ok", "partial": "again", "_": "other", "_error": "err"}}
	errOnly := v1alpha1.State{Route: map[string]v1alpha1.StateName{"target": "done", "_error": "err"}}
	mixed := v1alpha1.State{OnSuccess: "ok", Route: map[string]v1alpha1.StateName{"blocked": "help"}}
	yesNo := v1alpha1.State{Route: map[string]v1alpha1.StateName{"yes": "ok", "no": "bad"}}
	tests := []struct {
		name    string
		st      v1alpha1.State
		verdict string
		want    string
		ok      bool
	}{
		{"shorthand success", short, "success", "ok", true},
		{"shorthand yes", short, "yes", "ok", true},
		{"shorthand no", short, "no", "bad", true},
		{"shorthand error", short, "error", "err", true},
		{"failure falls back to onError", onlyErr, "failure", "err", true},
		{"unknown verdict has no route", short, "partial", "", false},
		{"table exact", table, "partial", "again", true},
		{"table yes matches success", table, "yes", "ok", true},
		{"table default before _error", table, "error", "other", true},
		{"_error catches error", errOnly, "error", "err", true},
		{"_error catches failure", errOnly, "failure", "err", true},
		{"_error does not catch others", errOnly, "progress", "", false},
		{"table keys yes/no", yesNo, "success", "ok", true},
		{"table keys yes/no failure", yesNo, "failure", "bad", true},
		{"extra verdict then shorthand", mixed, "blocked", "help", true},
		{"shorthand after table miss", mixed, "success", "ok", true},
		{"empty verdict goes to default", table, "", "other", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Route(&tt.st, tt.verdict)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Route(%q) = %q, %v; want %q, %v", tt.verdict, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// A little-loops file routes as ll-loop: the verdict as the file writes
// it, route keys as written, a table's _error for error and no only, and
// on_error for no only without on_no; success said as such is not yes.
func TestLittleLoopsRoute(t *testing.T) {
	short := v1alpha1.State{OnSuccess: "ok", OnFailure: "bad", OnError: "err"}
	onlyErr := v1alpha1.State{OnSuccess: "ok", OnError: "err", Route: map[string]v1alpha1.StateName{"partial": "again"}}
	table := v1alpha1.State{Route: map[string]v1alpha1.StateName{"yes": "ok", "success": "said", "_error": "err"}}
	withDefault := v1alpha1.State{Route: map[string]v1alpha1.StateName{"target": "done", "_": "other"}}
	tests := []struct {
		name string
		st   v1alpha1.State
		word string
		want string
	}{
		{"on_yes takes yes", short, "yes", "ok"},
		{"on_yes does not take success", short, "success", ""},
		{"on_no does not take failure", short, "failure", ""},
		{"on_error takes error", short, "error", "err"},
		{"on_error takes no without on_no", onlyErr, "no", "err"},
		{"on_error does not take failure", onlyErr, "failure", ""},
		{"on_partial", onlyErr, "partial", "again"},
		{"nothing routes progress", onlyErr, "progress", ""},
		{"table yes key", table, "yes", "ok"},
		{"table success key", table, "success", "said"},
		{"table _error takes no", table, "no", "err"},
		{"table _error does not take failure", table, "failure", ""},
		{"table _error is no verdict", table, "_error", ""},
		{"table default", withDefault, "yes", "other"},
		{"table key before default", withDefault, "target", "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LittleLoopsRoute(&tt.st, tt.word); got != tt.want {
				t.Errorf("LittleLoopsRoute(%q) = %q, want %q", tt.word, got, tt.want)
			}
		})
	}
}

// In a little-loops run a classify line "success" has no route on_yes
// takes, and the run ends as ll-loop's does; an output_numeric target
// that is no number ends it at that state, its on_error not taken. A Loop
// manifest's run takes on_yes, and the error route.
func TestLittleLoopsNoRouteAndBrokenEvaluator(t *testing.T) {
	classify := func() *v1alpha1.LoopSpec {
		return &v1alpha1.LoopSpec{Initial: "check", States: map[string]v1alpha1.State{
			"check": {Action: "say", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalClassify}, OnSuccess: "done", OnError: "bad"},
			"bad":   {Terminal: true},
			"done":  {Terminal: true},
		}}
	}
	numeric := func() *v1alpha1.LoopSpec {
		return &v1alpha1.LoopSpec{Initial: "check", States: map[string]v1alpha1.State{
			"check": {Action: "say", Capture: "said", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputNumeric, Operator: "ge", Target: jsp("${context.goal}")},
				OnSuccess: "done", OnFailure: "done", OnError: "bad"},
			"bad":  {Terminal: true},
			"done": {Terminal: true},
		}, Context: map[string]apiextensionsJSON{"goal": jsonValue("ten")}}
	}
	say := func(out string) *fakeActions {
		return &fakeActions{results: map[string][]ActionResult{"say": {{Output: out}}}}
	}
	for _, c := range []struct {
		name        string
		spec        *v1alpha1.LoopSpec
		out         string
		littleLoops bool
		by          v1alpha1.TerminationReason
		state, msg  string
	}{
		{"classify success, little-loops", classify(), "success\n", true, v1alpha1.TerminatedError, "check", "No valid transition"},
		{"classify yes, little-loops", classify(), "yes\n", true, v1alpha1.TerminatedTerminal, "done", ""},
		{"classify success, manifest", classify(), "success\n", false, v1alpha1.TerminatedTerminal, "done", ""},
		{"classify failure, little-loops", classify(), "failure\n", true, v1alpha1.TerminatedError, "check", "No valid transition"},
		{"classify maybe, manifest", classify(), "maybe\n", false, v1alpha1.TerminatedError, "check", `state "check": no route for verdict "maybe"`},
		{"numeric target text, little-loops", numeric(), "7\n", true, v1alpha1.TerminatedError, "check", "output_numeric target must be numeric, got: '${context.goal}'"},
		{"numeric target text, manifest", numeric(), "7\n", false, v1alpha1.TerminatedTerminal, "bad", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runLoop(t, c.spec, say(c.out), Options{LittleLoops: c.littleLoops}, 0)
			if r.run.TerminatedBy != c.by || r.run.CurrentState != c.state || r.run.Message != c.msg {
				t.Errorf("ended %s in %s (%q), want %s in %s (%q)", r.run.TerminatedBy, r.run.CurrentState, r.run.Message, c.by, c.state, c.msg)
			}
		})
	}
	// The broken evaluator judged nothing; the capture, made before, is kept.
	r := runLoop(t, numeric(), say("7\n"), Options{LittleLoops: true}, 0)
	if r.count(EventEvaluate) != 0 || r.run.Captured["said"].Output != "7" {
		t.Errorf("evaluate events %d, captured %+v", r.count(EventEvaluate), r.run.Captured)
	}
}
