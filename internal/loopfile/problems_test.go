package loopfile

import (
	"errors"
	"strings"
	"testing"
)

// Every problem of a file is reported at once, in line order, each with its
// line and its path as the file spells it; a route to a state that does
// not exist names the state meant.
func TestProblemsAllAtOnce(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"little-loops", "name: x\ninitial: test\nmax_steps: ten\ntimeout: 5 minutes\nstates:\n  test:\n    action: go test ./...\n    on_yes: done\n    on_no: fxi\n" +
			"  fix:\n    action: echo\n    next: test\n  done:\n    terminal: true\n",
			[]string{
				`line 3: max_steps: must be a whole number, not "ten"`,
				`line 4: timeout: must be seconds or a duration such as 90s, 5m or 1h30m, not "5 minutes"`,
				`line 9: states.test.on_no: no state is called "fxi" (did you mean fix?)`,
			}},
		{"little-loops: a route table and on_failure", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: classify}\n    route: {red: dnoe, _: a}\n" +
			"  b:\n    action: x\n    on_failure: nowhere\n  done:\n    terminal: true\n",
			[]string{
				`line 7: states.a.route.red: no state is called "dnoe" (did you mean done?)`,
				`line 10: states.b.on_failure: no state is called "nowhere"`,
			}},
		{"little-loops: a state that is not a mapping is not said to be missing", "name: x\ninitial: a\nstates:\n  a:\n    action: echo\n    on_yes: b\n    on_no: done\n  b: echo\n  done:\n    terminal: true\n",
			[]string{`line 8: states.b: must be a mapping`}},
		{"manifest: a state that is not a mapping is not said to be missing", manifestHead[:len(manifestHead)-len("  initial: s\n")] + "  initial: a\n  states:\n    a:\n      action: echo\n      onSuccess: b\n      onFailure: done\n    b: echo\n    done:\n      terminal: true\n",
			[]string{`line 12: spec.states.b: must be a mapping`}},
		{"little-loops: no initial state", "name: x\ninitial: nope\nstates:\n  done: {terminal: true}\n",
			[]string{`line 2: initial: no state is called "nope"`}},
		{"manifest", manifestHead[:len(manifestHead)-len("  initial: s\n")] + "  initial: test\n  maxIterations: ten\n  timeout: 5 minutes\n  states:\n    test:\n" +
			"      action: go test ./...\n      onSuccess: done\n      onFailure: fxi\n      bogus: 1\n      maxRetries: 1.5\n    fix:\n      action: echo\n      next: test\n    done:\n      terminal: true\n",
			[]string{
				`line 7: spec.maxIterations: must be a whole number, not "ten"`,
				`line 8: spec.timeout: must be a duration such as 90s, 5m or 1h30m, not "5 minutes"`,
				`line 13: spec.states.test.onFailure: no state is called "fxi" (did you mean fix?)`,
				`line 14: spec.states.test.bogus: unknown field`,
				`line 15: spec.states.test.maxRetries: must be a whole number, not "1.5"`,
			}},
		{"manifest: a route table", manifestHead + "  states:\n    s:\n      action: x\n      route: {yes: dnoe, _: s}\n    done:\n      terminal: true\n",
			[]string{`line 10: spec.states.s.route.yes: no state is called "dnoe" (did you mean done?)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), t.TempDir(), Options{})
			var p *Problems
			if !errors.As(err, &p) {
				t.Fatalf("err %v, want problems", err)
			}
			if len(p.List) != len(tt.want) {
				t.Fatalf("problems:\n%s\nwant %d", strings.Join(p.List, "\n"), len(tt.want))
			}
			for i, w := range tt.want {
				if p.List[i] != w {
					t.Errorf("problem %d:\n got %s\nwant %s", i, p.List[i], w)
				}
			}
		})
	}
}

// A file's path goes before each of its problems, one a line.
func TestProblemsError(t *testing.T) {
	p := &Problems{Path: "a.yaml", List: []string{"line 1: x: bad", "line 2: y: bad"}}
	if got, want := p.Error(), "a.yaml: line 1: x: bad\na.yaml: line 2: y: bad"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A problem found in a loaded loop's spec is said with the file's line
// and spelling.
func TestLocate(t *testing.T) {
	f, err := Parse([]byte("name: x\ninitial: a\nstates:\n  a:\n    action: echo ${context.x}\n    on_no: done\n    on_yes: done\n  done:\n    terminal: true\n"), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"spec.states[a].action":                "line 5: states.a.action: m",
		"spec.states[a].onFailure":             "line 6: states.a.on_no: m",
		"spec.maxIterations":                   "max_steps: m",
		"spec.states[a].rateLimit.onExhausted": "line 4: states.a.on_rate_limit_exhausted: m",
	} {
		if got := f.Locate(field, "m"); got != want {
			t.Errorf("Locate(%s) = %q, want %q", field, got, want)
		}
	}
	m, err := Parse([]byte(manifestHead+"  states:\n    s:\n      action: echo\n      next: done\n    done:\n      terminal: true\n"), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Locate("spec.states[s].action", "m"), "line 9: spec.states.s.action: m"; got != want {
		t.Errorf("manifest: %q, want %q", got, want)
	}
}
