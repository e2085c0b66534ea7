package loopfile

import (
	"strings"
	"testing"
)

// A state no route leads to and a judged prompt or a classify state whose
// verdicts no route takes are warned of, as little-loops warns of them, and
// nothing else is.
func TestStructureWarnings(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // the warnings of this test's kind, in order
	}{
		{"a state nothing routes to", "name: x\ninitial: a\nstates:\n  a:\n    action: 'true'\n    next: done\n  orphan:\n    action: 'true'\n    next: done\n  done:\n    terminal: true\n",
			[]string{"line 7: states.orphan: no route leads to this state from the initial state, so it never runs"}},
		{"reached only by a way in", "name: x\ninitial: a\nmax_steps: 3\non_max_steps: wrap\ncircuit:\n  repeated_failure: {on_repeated_failure: stuck}\nstates:\n" +
			"  a: {action: 'true', next: a}\n  wrap: {action: 'true', next: done}\n  stuck: {terminal: true}\n  done: {terminal: true}\n", nil},
		{"reached by onError and a rate limit", "name: x\ninitial: a\nstates:\n  a:\n    action: 'true'\n    route: {'yes': done, _: a}\n    on_error: err\n    max_rate_limit_retries: 2\n    on_rate_limit_exhausted: slow\n" +
			"  err: {terminal: true}\n  slow: {terminal: true}\n  done: {terminal: true}\n", nil},
		{"a route to itself does not reach", "name: x\ninitial: a\nstates:\n  a:\n    action: 'true'\n    next: done\n  b:\n    action: 'true'\n    on_yes: $current\n    on_no: b\n  done:\n    terminal: true\n",
			[]string{"line 7: states.b: no route leads"}},
		{"a prompt that routes only on_yes", "name: x\ninitial: a\nstates:\n  a:\n    action: do it\n    action_type: prompt\n    on_yes: done\n  done:\n    terminal: true\n",
			[]string{"line 4: states.a: the LLM judge may answer no or partial, which no route takes: the run ends in error on that answer; add on_no and on_partial, a next, or a route table with _"}},
		{"a slash command with on_no", "name: x\ninitial: a\nstates:\n  a:\n    action: /review\n    on_success: done\n    on_failure: a\n  done:\n    terminal: true\n",
			[]string{"states.a: the LLM judge may answer partial, which no route takes"}},
		{"an llm_structured shell state", "name: x\ninitial: a\nstates:\n  a:\n    action: cat x\n    evaluate: {type: llm_structured}\n    on_yes: done\n    on_partial: a\n  done:\n    terminal: true\n",
			[]string{"states.a: the LLM judge may answer no, which no route takes"}},
		{"a judged prompt routed in full", "name: x\ninitial: a\nstates:\n  a:\n    action: /review\n    on_yes: done\n    on_no: a\n    on_partial: a\n  done:\n    terminal: true\n", nil},
		{"a judged prompt with next", "name: x\ninitial: a\nstates:\n  a:\n    action: /review\n    next: done\n  done:\n    terminal: true\n", nil},
		{"a shell state that routes only on_yes", "name: x\ninitial: a\nstates:\n  a:\n    action: 'true'\n    on_yes: done\n  done:\n    terminal: true\n", nil},
		{"dead ends meant", "name: x\ninitial: a\npartial_route_ok: true\nstates:\n  a:\n    action: /review\n    on_yes: b\n  b:\n    action: x\n    evaluate: {type: classify}\n    route: {red: done}\n  done:\n    terminal: true\n", nil},
		{"classify without _", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: classify}\n    route: {red: done, green: a}\n  done:\n    terminal: true\n",
			[]string{"line 4: states.a: classify gives whatever line the action prints, and the route table has no _ for the lines it does not list"}},
		{"classify with _", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: classify}\n    route: {red: done, _: a}\n  done:\n    terminal: true\n", nil},
		{"manifest: a state nothing routes to", manifestHead + "  states:\n    s:\n      action: 'true'\n      next: done\n    orphan:\n      terminal: true\n    done:\n      terminal: true\n",
			[]string{"line 11: spec.states.orphan: no route leads to this state from the initial state, so it never runs"}},
		{"manifest: output_contains without a pattern", manifestHead + "  states:\n    s:\n      action: 'true'\n      evaluate:\n        type: output_contains\n      onSuccess: done\n      onFailure: done\n    done:\n      terminal: true\n",
			[]string{"line 10: spec.states.s.evaluate: output_contains has no pattern, and an empty pattern matches every output: the verdict is always success (negated: failure)"}},
		{"little-loops: an empty pattern is meant", "name: x\ninitial: a\nstates:\n  a:\n    action: 'true'\n    evaluate: {type: output_contains, pattern: ''}\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n", nil},
		{"manifest: reached by a route table", manifestHead + "  onMaxIterations: wrap\n  states:\n    s:\n      action: 'true'\n      route: {success: done, _: s}\n    wrap:\n      terminal: true\n    done:\n      terminal: true\n", nil},
	}
	kinds := []string{"no route leads", "no route takes", "classify gives", "has no pattern"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte(tt.doc), t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range f.Warnings {
				for _, k := range kinds {
					if strings.Contains(w, k) {
						got = append(got, w)
					}
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %q\nlacks %q", got[i], w)
				}
			}
		})
	}
}
