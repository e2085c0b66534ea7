package loopfile

import (
	"strings"
	"testing"
)

const manifestHead = "apiVersion: looprun.io/v1alpha1\nkind: Loop\nmetadata:\n  name: m\nspec:\n  initial: s\n"

// A mistake in a file is named by its path and the line it is on.
func TestErrorsNamePathAndLine(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"manifest: misspelt state field", manifestHead +
			"  states:\n    s:\n      action: echo hi\n      nxet: done\n    done:\n      terminal: true\n",
			[]string{"line 10: spec.states.s.nxet: unknown field (did you mean next?)"}},
		{"manifest: field in the wrong case", manifestHead +
			"  states:\n    s:\n      action: echo hi\n      Next: done\n    done:\n      terminal: true\n",
			[]string{"line 10: spec.states.s.Next: unknown field (did you mean next?)"}},
		{"template: misspelt field of a nested mapping", "apiVersion: looprun.io/v1alpha1\nkind: LoopTemplate\nmetadata:\n  name: m\nspec:\n  initial: s\n" +
			"  states:\n    s:\n      terminal: true\n  circuit:\n    repeatedFailure:\n      progressPaths: [a]\n      windw: 3\n",
			[]string{"line 13: spec.circuit.repeatedFailure.windw: unknown field (did you mean window?)"}},
		{"manifest: misspelt metadata field", "apiVersion: looprun.io/v1alpha1\nkind: Loop\nmetadata:\n  nam: m\nspec:\n  initial: s\n  states:\n    s: {terminal: true}\n",
			[]string{"line 4: metadata.nam: unknown field (did you mean name?)"}},
		{"manifest: several mistakes", manifestHead +
			"  states:\n    s:\n      actoin: echo hi\n      nxet: done\n    done:\n      terminal: true\n",
			[]string{"line 9: spec.states.s.actoin: unknown field (did you mean action?)", "line 10: spec.states.s.nxet"}},
		{"manifest: parameters on a Loop", manifestHead +
			"  parameters:\n    x:\n      type: string\n  states:\n    s:\n      terminal: true\n",
			[]string{"line 7: spec.parameters: a Loop takes no parameters", "declared on a LoopTemplate (kind: LoopTemplate)"}},
		{"manifest: a state's field at the indentation of the states", manifestHead +
			"  states:\n    s:\n      action: echo hi\n    next: done\n    done:\n      terminal: true\n",
			[]string{"line 10: spec.states.next: must be a mapping (a State); next is a field of a State: is it indented a level too little?"}},
		{"manifest: a list where a mapping goes", manifestHead + "  states:\n    - s\n",
			[]string{"line 8: spec.states: must be a mapping"}},
		{"YAML: a state dedented a space", "name: x\ninitial: s\nstates:\n  s:\n    action: echo hi\n    next: done\n   done:\n    terminal: true\n",
			[]string{`line 7: did not find expected key: "done:" is indented 3 spaces`}},
		{"YAML: a route dedented a space", "name: x\ninitial: s\nstates:\n  s:\n    action: echo hi\n    evaluate:\n      type: exit_code\n   on_yes: done\n    on_no: s\n  done:\n    terminal: true\n",
			[]string{`line 8: did not find expected key: "on_yes: done" is indented 3 spaces`}},
		{"YAML: a top-level key indented a space", "name: x\ninitial: s\nstates:\n  s:\n    action: |\n      echo hi\n    next: done\n  done:\n    terminal: true\n max_steps: 3\n",
			[]string{`line 10: did not find expected key: "max_steps: 3" is indented 1 space,`}},
		{"YAML: a key indented too far", "name: x\ninitial: s\nstates:\n  s:\n    action: echo hi\n     next: done\n",
			[]string{"line 6: mapping values are not allowed"}},
		{"little-loops: a state's key at the indentation of the states", "name: x\ninitial: s\nstates:\n  s:\n    action: echo hi\n    next: done\n  done:\n  terminal: true\n",
			[]string{"line 7: states.done: must be a mapping (a state), not empty: are its keys indented under it?",
				"line 8: states.terminal: must be a mapping (a state); terminal is a key of a state: is it indented a level too little?"}},
		{"little-loops: a bad value", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    timeout: soon\n    next: d\n  d:\n    terminal: true\n",
			[]string{"line 6: states.a.timeout: must be seconds or a duration"}},
		{"little-loops: a bad list item", "name: x\ninitial: a\nrequired_inputs:\n  - ok\n  - not a name\nstates: {a: {terminal: true}}\n",
			[]string{"line 5: required_inputs[1]: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), t.TempDir(), Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// A line that lines up with keys above it is not said to line up with none.
func TestSyntaxErrorHintIsTrue(t *testing.T) {
	_, err := Parse([]byte("name: x\ninitial: s\nstates:\n  s:\n    action: echo hi\n  - done\n"), "", Options{})
	if want := "not valid YAML: line 6: did not find expected key"; err == nil || err.Error() != want {
		t.Errorf("err %v, want %q", err, want)
	}
}

// A LoopTemplate declares parameters; a Loop manifest without mistakes reads.
func TestManifestFieldsThatBelong(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: looprun.io/v1alpha1\nkind: LoopTemplate\nmetadata:\n  name: t\n  labels: {a: b}\nspec:\n  parameters:\n    x: {type: string, default: hi}\n" +
			"  initial: s\n  states:\n    s:\n      action: echo ${context.x}\n      timeout: 90s\n      next: done\n    done: {terminal: true}\n",
		manifestHead + "  context: {a: {b: [1, 2]}}\n  states:\n    s:\n      action: echo\n      evaluate: {type: classify, line: 1}\n      route: {x: done, _: done}\n" +
			"    done:\n      terminal: true\nstatus:\n  phase: Running\n",
	} {
		f, err := Parse([]byte(doc), "", Options{})
		if err != nil {
			t.Errorf("%v\n%s", err, doc)
			continue
		}
		if len(f.Loop.Spec.States) != 2 {
			t.Errorf("states %v", f.Loop.Spec.States)
		}
	}
}

func TestClosest(t *testing.T) {
	keys := []string{"next", "action", "on_success", "on_error", "terminal"}
	for word, want := range map[string]string{
		"nxet": "next", "Next": "next", "actoin": "action", "on_sucesss": "on_success", "on_eror": "on_error",
		"yes": "", "nope": "", "terminl": "terminal", "next": "",
	} {
		if got := closest(word, keys); got != want {
			t.Errorf("closest(%q) = %q, want %q", word, got, want)
		}
	}
}

// An unknown key of a little-loops file is warned of with the key nearest
// to it, or, for a state's key at the top level, with what that suggests.
func TestUnknownKeySuggestions(t *testing.T) {
	f, err := Parse([]byte("name: x\ninitial: s\nmax_step: 3\nstates:\n  s:\n    action: echo\n    evaluate: {type: output_contains, pattern: y, patern: x}\n"+
		"    on_yes: done\n    on_no: done\n    nxet: done\n  done:\n    terminal: true\n    tiemout: 3\nterminal: true\nfrobnicate: 1\n"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"line 3: max_step: unknown key; ignored (did you mean max_steps?)",
		"line 14: terminal: unknown key; ignored (a key of a state, at the top level: is it indented too little?)",
		"line 7: states.s.evaluate.patern: unknown evaluator key; ignored (did you mean pattern?)",
		"line 10: states.s.nxet: unknown key; ignored (did you mean next?)",
		"line 13: states.done.tiemout: unknown key; ignored (did you mean timeout?)",
		"line 15: frobnicate: unknown key; ignored",
	} {
		if !hasWarning(f, w) {
			t.Errorf("no warning %q in %q", w, f.Warnings)
		}
	}
	if hasWarning(f, "frobnicate: unknown key; ignored (") {
		t.Errorf("a suggestion for a key like no other: %q", f.Warnings)
	}
}
