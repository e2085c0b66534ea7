package loopfile

import (
	"strings"
	"testing"
)

// A route for a verdict the state never gives is warned of, with the key
// nearest to it; the verdicts a state may give are not.
func TestRoutesNeverTaken(t *testing.T) {
	tests := []struct {
		name, state string
		want        []string // warnings (none when empty)
	}{
		{"misspelt shorthand", "action: 'true'\n    on_sucess: done\n    on_no: done", //nolint:misspell // the misspelling is the point
			[]string{"line 6: states.s.on_sucess: exit_code (a shell action's default evaluator) never gives the verdict sucess, so this route is never taken; it gives yes, no or error (did you mean on_success?)"}}, //nolint:misspell // as above
		{"misspelt state key that starts with on_", "action: 'true'\n    on_yes: done\n    on_maintian: done", //nolint:misspell // the misspelling is the point
			[]string{"states.s.on_maintian: exit_code (a shell action's default evaluator) never gives the verdict maintian", "(did you mean on_maintain?)"}}, //nolint:misspell // as above
		{"shorthand for a verdict the evaluator never gives", "action: 'true'\n    evaluate: {type: output_contains, pattern: x}\n    on_yes: done\n    on_partial: done",
			[]string{"states.s.on_partial: output_contains never gives the verdict partial, so this route is never taken; it gives yes, no or error"}},
		{"misspelt route key", "action: echo 1\n    evaluate: {type: convergence, target: 0}\n    route: {target: done, progres: s, stall: done}",
			[]string{"line 7: states.s.route.progres: convergence never gives the verdict progres, so this route is never taken; it gives target, progress, stall or error (did you mean progress?)"}},
		{"yes on convergence", "action: echo 1\n    evaluate: {type: convergence, target: 0}\n    route: {'yes': done, _: s}",
			[]string{"states.s.route.yes: convergence never gives the verdict yes"}},
		{"default for _", "action: 'true'\n    route: {'yes': done, default: s}",
			[]string{"states.s.route.default: exit_code (a shell action's default evaluator) never gives the verdict default", "(did you mean _, the route of any other verdict?)"}},
		{"misspelt sub-loop timeout", "loop: child\n    on_yes: done\n    on_timout: done",
			[]string{"states.s.on_timout: a sub-loop never gives the verdict timout, so this route is never taken; it gives yes, no, error or timeout (did you mean on_timeout?)"}},
		{"misspelt custom verdict", "action: x\n    evaluate:\n      type: llm_structured\n      schema: {type: object, properties: {verdict: {type: string, enum: [pass, fail]}}}\n    on_pass: done\n    on_fial: s",
			[]string{"states.s.on_fial: llm_structured with its own schema never gives the verdict fial, so this route is never taken; it gives pass, fail or error (did you mean on_fail?)"}},
		{"an empty route key", "action: 'true'\n    route: {'yes': done, '': s}",
			[]string{`states.s.route.: exit_code (a shell action's default evaluator) never gives the verdict "", so this route is never taken`}},
		{"an empty route key of classify", "action: x\n    evaluate: {type: classify}\n    route: {'': done, _: s}", nil},
		{"shell verdicts", "action: 'true'\n    on_yes: done\n    on_no: s\n    on_error: done", nil},
		{"same, as route keys", "action: 'true'\n    route: {'yes': done, 'no': s, error: done, _: s, _error: done}", nil},
		{"success and failure are not yes and no", "action: 'true'\n    route: {success: done, failure: s, _: s}",
			[]string{"states.s.route.success: exit_code (a shell action's default evaluator) never gives the verdict success, so this route is never taken; it gives yes, no or error",
				"states.s.route.failure: exit_code"}},
		{"on_yes on an MCP tool", "action: srv/tool\n    action_type: mcp_tool\n    on_success: done\n    on_error: s",
			[]string{"states.s.on_success: mcp_result (an MCP tool's default evaluator) never gives the verdict yes (on_success is on_yes), so this route is never taken; it gives success, tool_error, not_found, timeout or error"}},
		{"success from a judge's own schema", "action: x\n    evaluate:\n      type: llm_structured\n      schema: {type: object, properties: {verdict: {type: string, enum: [success, 'no']}}}\n    route: {success: done, 'no': s, 'yes': s}",
			[]string{"states.s.route.yes: llm_structured with its own schema never gives the verdict yes, so this route is never taken; it gives success, no or error"}},
		{"sub-loop verdicts", "loop: child\n    on_yes: done\n    on_no: s\n    on_error: done\n    on_timeout: done", nil},
		{"the judge's verdicts", "action: /review\n    on_yes: done\n    on_no: s\n    on_blocked: done\n    on_partial: s\n    on_cannot_judge: s", nil},
		{"uncertain verdicts", "action: x\n    evaluate: {type: llm_structured, uncertain_suffix: true}\n    on_yes: done\n    on_yes_uncertain: s\n    on_no_uncertain: s", nil},
		{"a schema with no enum of verdicts", "action: x\n    evaluate:\n      type: llm_structured\n      schema: {type: object, properties: {verdict: {type: string}}}\n    on_anything: done", nil},
		{"classify", "action: x\n    evaluate: {type: classify}\n    route: {red: done, green: s, _: done}", nil},
		{"convergence", "action: x\n    evaluate: {type: convergence, target: 1}\n    on_target: done\n    on_progress: s\n    on_stall: done", nil},
		{"mcp", "action: srv/tool\n    action_type: mcp_tool\n    route: {success: done, tool_error: s, not_found: done, timeout: done}", nil},
		{"approval", "approval: {message: 'go on'}\n    route: {approved: done, rejected: s, timeout: done}", nil},
		{"next", "action: 'true'\n    next: done\n    on_error: s", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "name: x\ninitial: s\nstates:\n  s:\n    " + tt.state + "\n  done:\n    terminal: true\n"
			f, err := Parse([]byte(doc), t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range f.Warnings {
				if strings.Contains(w, "never gives") {
					got = append(got, w)
				}
			}
			if len(tt.want) == 0 && len(got) > 0 {
				t.Errorf("warnings %q", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(strings.Join(got, "\n"), w) {
					t.Errorf("warnings %q\nlack %q", got, w)
				}
			}
		})
	}
}

// A Loop manifest's route table is checked too, in the manifest's words.
func TestManifestRoutesNeverTaken(t *testing.T) {
	f, err := Parse([]byte(manifestHead+"  states:\n    s:\n      action: echo 1\n      evaluate: {type: exit_code}\n      route:\n        succes: done\n        failure: s\n    done: {terminal: true}\n"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "line 12: spec.states.s.route.succes: exit_code never gives the verdict succes, so this route is never taken; it gives success, failure or error (did you mean success?)"
	if len(f.Warnings) != 1 || f.Warnings[0] != want {
		t.Errorf("warnings %q, want %q", f.Warnings, want)
	}
}
