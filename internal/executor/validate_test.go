package executor

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/looprun/looprun/api/v1alpha1"
)

func TestValidate(t *testing.T) {
	ok := func() *v1alpha1.LoopSpec { return fixSpec() }
	tests := []struct {
		name   string
		mutate func(*v1alpha1.LoopSpec)
		want   []string // substrings, each must appear in some error
	}{
		{"valid", func(*v1alpha1.LoopSpec) {}, nil},
		{"initial missing", func(s *v1alpha1.LoopSpec) { s.Initial = "" }, []string{"spec.initial: Required"}},
		{"initial unknown", func(s *v1alpha1.LoopSpec) { s.Initial = "nope" }, []string{`spec.initial: Not found: "nope"`}},
		{"no terminal", func(s *v1alpha1.LoopSpec) {
			delete(s.States, "done")
			s.States["check"] = v1alpha1.State{Action: "x", Next: "fix"}
		},
			[]string{"at least one state must be terminal"}},
		{"unknown target", func(s *v1alpha1.LoopSpec) { s.States["fix"] = v1alpha1.State{Action: "x", Next: "chek"} },
			[]string{`spec.states[fix].next: Not found: "chek"`}},
		{"route target", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", Route: map[string]v1alpha1.StateName{"success": "done", "_": "gone"}}
		}, []string{`spec.states[check].route[_]: Not found: "gone"`}},
		{"duplicate verdict keys", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", Route: map[string]v1alpha1.StateName{"yes": "done", "success": "fix"}}
		}, []string{"spec.states[check].route[yes]: Duplicate"}},
		{"exit hook empty", func(s *v1alpha1.LoopSpec) { s.OnExit = &v1alpha1.ExitHook{Action: " "} }, []string{"spec.onExit.action: Required"}},
		{"exit hook mcp", func(s *v1alpha1.LoopSpec) { s.OnExit = &v1alpha1.ExitHook{Action: "x", ActionType: v1alpha1.ActionMCP} },
			[]string{`spec.onExit.actionType: Unsupported value: "mcp"`}},
		{"exit hook template", func(s *v1alpha1.LoopSpec) { s.OnExit = &v1alpha1.ExitHook{Action: "echo ${captured.nope}"} },
			[]string{"spec.onExit.action", `no state captures "nope"`}},
		{"git push without a branch", func(s *v1alpha1.LoopSpec) {
			s.Runner = &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "c",
				Git: &v1alpha1.GitWorkspace{URL: " ", Push: &v1alpha1.GitPush{When: "Sometimes"}}}}
		}, []string{"spec.runner.workspace.git.url: Required", "spec.runner.workspace.git.push.branch: Required",
			`spec.runner.workspace.git.push.when: Unsupported value: "Sometimes"`}},
		{"git push branch template", func(s *v1alpha1.LoopSpec) {
			s.Runner = &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "c",
				Git: &v1alpha1.GitWorkspace{URL: "u", Push: &v1alpha1.GitPush{Branch: "b-${captured.nope}"}}}}
		}, []string{"spec.runner.workspace.git.push.branch", `no state captures "nope"`}},
		{"git push branch HEAD", func(s *v1alpha1.LoopSpec) {
			s.Runner = &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "c",
				Git: &v1alpha1.GitWorkspace{URL: "u", Push: &v1alpha1.GitPush{Branch: "HEAD"}}}}
		}, []string{`spec.runner.workspace.git.push.branch: Invalid value: "HEAD"`, "not a branch name"}},
		{"git push branch like an option", func(s *v1alpha1.LoopSpec) {
			s.Runner = &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "c",
				Git: &v1alpha1.GitWorkspace{URL: "u", Push: &v1alpha1.GitPush{Branch: "-delete"}}}}
		}, []string{`spec.runner.workspace.git.push.branch: Invalid value: "-delete"`}},
		{"approval with an action", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "x", Approval: &v1alpha1.Approval{Message: "ok?"}, OnSuccess: "check"}
		}, []string{"spec.states[fix].approval", "waits for a person"}},
		{"approval timeout", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Approval: &v1alpha1.Approval{Timeout: &metav1.Duration{}}, OnSuccess: "check"}
		}, []string{"spec.states[fix].approval.timeout", "must be positive"}},
		{"no way out", func(s *v1alpha1.LoopSpec) { s.States["fix"] = v1alpha1.State{Action: "x"} }, []string{`spec.states[fix]: Required value: state "fix" has no way out`}},
		{"$current in next", func(s *v1alpha1.LoopSpec) { s.States["fix"] = v1alpha1.State{Action: "x", Next: "$current"} },
			[]string{"spec.states[fix].next", "$current is only allowed"}},
		{"template target", func(s *v1alpha1.LoopSpec) { s.States["fix"] = v1alpha1.State{Action: "x", Next: "${context.next}"} },
			[]string{"spec.states[fix].next", "templates are not allowed"}},
		{"bad template", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "echo ${context.x:-y}", Next: "check"}
		},
			[]string{"spec.states[fix].action", "bash-style default"}},
		{"unknown capture", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "echo ${captured.errors.output}", Next: "check"}
		}, []string{"spec.states[fix].action", `no state captures "errors"`}},
		{"guarded capture is fine", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "echo ${captured.errors.output?}", Next: "check"}
		}, nil},
		{"llm baseURL with a dot segment", func(s *v1alpha1.LoopSpec) {
			s.LLM = &v1alpha1.LLMSpec{BaseURL: "http://llm.internal/team-a/%2E%2E/operator/"}
		}, []string{"spec.llm.baseURL", "dot segment"}},
		{"llm baseURL with a user", func(s *v1alpha1.LoopSpec) { s.LLM = &v1alpha1.LLMSpec{BaseURL: "http://k@llm.internal/"} },
			[]string{"spec.llm.baseURL", "no user"}},
		{"llm baseURL is fine", func(s *v1alpha1.LoopSpec) { s.LLM = &v1alpha1.LLMSpec{BaseURL: "https://llm.internal:8443/team-a/"} }, nil},
		{"evaluator type", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "comparator"}}
		}, []string{`spec.states[check].evaluate.type: Unsupported value: "comparator"`}},
		{"evaluator operator", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "output_numeric", Operator: "gte", Target: jsp(1)}}
		}, []string{`spec.states[check].evaluate.operator: Unsupported value: "gte"`}},
		{"numeric target required", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "output_numeric"}}
		}, []string{"spec.states[check].evaluate.target: Required"}},
		{"numeric target text", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "convergence", Target: jsp("ten")}}
		}, []string{"spec.states[check].evaluate.target", "number or a ${...} template"}},
		{"negative tolerance", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "convergence", Target: jsp(1), Tolerance: jsp(-1)}}
		}, []string{"spec.states[check].evaluate.tolerance", "must not be negative"}},
		{"json needs path", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "output_json", Target: jsp(1)}}
		}, []string{"spec.states[check].evaluate.path: Required"}},
		{"contains without a pattern matches all", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "output_contains"}}
		}, nil},
		{"route key empty", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", Route: map[string]v1alpha1.StateName{"": "done", "yes": "done"}}
		}, nil},
		{"route target empty", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", Route: map[string]v1alpha1.StateName{"yes": "", "no": "done"}}
		}, []string{"spec.states[check].route[yes]: Required"}},
		{"direction", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "convergence", Target: jsp(1), Direction: "down"}}
		}, []string{"spec.states[check].evaluate.direction"}},
		{"min confidence", func(s *v1alpha1.LoopSpec) {
			mc := 1.5
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "llm_structured", MinConfidence: &mc}}
		}, []string{"spec.states[check].evaluate.minConfidence"}},
		{"schema without verdict", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", Evaluate: &v1alpha1.Evaluate{Type: "llm_structured", Schema: jsp(map[string]any{"type": "object"})}}
		}, []string{"spec.states[check].evaluate.schema.properties.verdict"}},
		{"retries pairing", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "x", OnSuccess: "done", MaxRetries: i32(3)}
		}, []string{"spec.states[check].onRetryExhausted: Required"}},
		{"limits", func(s *v1alpha1.LoopSpec) { s.MaxIterations = i32(0); s.MaxEdgeRevisits = i32(-1) },
			[]string{"spec.maxIterations", "spec.maxEdgeRevisits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok()
			tt.mutate(s)
			errs := Validate(s)
			if len(tt.want) == 0 {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			all := errs.ToAggregate()
			if all == nil {
				t.Fatalf("no errors, want %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(all.Error(), w) {
					t.Errorf("errors %q do not contain %q", all.Error(), w)
				}
			}
		})
	}
}

// A little-loops file's spec may hold a number field ll-loop reads only
// when the state is evaluated, and the route keys yes and success (two
// verdicts there); Validate refuses both, ValidateLittleLoops neither. A
// negative tolerance is refused by both.
func TestValidateLittleLoops(t *testing.T) {
	spec := func(e *v1alpha1.Evaluate, route map[string]v1alpha1.StateName) *v1alpha1.LoopSpec {
		s := fixSpec()
		s.States["check"] = v1alpha1.State{Action: "x", Evaluate: e, Route: route, OnError: "fix"}
		return s
	}
	for _, c := range []struct {
		name       string
		spec       *v1alpha1.LoopSpec
		strict, ll string // "" for none
	}{
		{"text target", spec(&v1alpha1.Evaluate{Type: "output_numeric", Operator: "eq", Target: jsp("abc")}, map[string]v1alpha1.StateName{"yes": "done"}),
			"must be a number or a ${...} template", ""},
		{"list target", spec(&v1alpha1.Evaluate{Type: "convergence", Target: jsp([]any{1})}, map[string]v1alpha1.StateName{"target": "done"}),
			"must be a number or a ${...} template", ""},
		{"boolean tolerance", spec(&v1alpha1.Evaluate{Type: "convergence", Target: jsp(1), Tolerance: jsp(true)}, map[string]v1alpha1.StateName{"target": "done"}),
			"must be a number or a ${...} template", ""},
		{"negative tolerance", spec(&v1alpha1.Evaluate{Type: "convergence", Target: jsp(1), Tolerance: jsp(-1)}, map[string]v1alpha1.StateName{"target": "done"}),
			"must not be negative", "must not be negative"},
		{"no target", spec(&v1alpha1.Evaluate{Type: "output_numeric", Operator: "eq"}, map[string]v1alpha1.StateName{"yes": "done"}),
			"target: Required", "target: Required"},
		{"yes and success", spec(nil, map[string]v1alpha1.StateName{"yes": "done", "success": "fix"}), "Duplicate", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []struct {
				validate func(*v1alpha1.LoopSpec) field.ErrorList
				want     string
			}{{Validate, c.strict}, {ValidateLittleLoops, c.ll}} {
				errs := v.validate(c.spec)
				if v.want == "" && len(errs) > 0 || v.want != "" && !strings.Contains(errs.ToAggregate().Error(), v.want) {
					t.Errorf("errors %v, want %q", errs, v.want)
				}
			}
		})
	}
}

func TestNewRejectsInvalidSpec(t *testing.T) {
	s := fixSpec()
	s.Initial = "missing"
	if _, err := New("x", s, Options{}); err == nil || !strings.Contains(err.Error(), "spec.initial") {
		t.Errorf("New: %v", err)
	}
}

// validate warns of a value a shell command takes unquoted: in a state's
// action and in the exit hook (where the run's end message, an action's
// words, may be), not in an agent's prompt or a quoted reference.
func TestShellWarnings(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":    {Action: "deploy ${context.target} ${captured.v.output:shell}", Next: "b"},
		"b":    {Action: "/fix ${captured.v.output}", ActionType: v1alpha1.ActionAgent, Next: "c"},
		"c":    {Action: "ls ${context.run_dir}/out", Next: "d"},
		"d":    {Action: " ${context.test_cmd}\n", Next: "done"},
		"done": {Terminal: true},
	}, OnExit: &v1alpha1.ExitHook{Action: "notify ${loop.name} ${loop.message} ${loop.final_state} ${captured.v.output}"}}
	got := strings.Join(ShellWarnings(spec), "\n")
	for _, want := range []string{"spec.states[a].action: ${context.target}", "spec.onExit.action: ${loop.message}", "spec.onExit.action: ${captured.v.output}"} {
		if !strings.Contains(got, want) {
			t.Errorf("no warning %q in:\n%s", want, got)
		}
	}
	// Not a value looprun gives itself, nor a command that is the value.
	for _, not := range []string{"states[b]", "${loop.name}", "${loop.final_state}", "states[a].action: ${captured", "states[c]", "states[d]"} {
		if strings.Contains(got, not) {
			t.Errorf("a warning of %q in:\n%s", not, got)
		}
	}
	spec.OnExit.ActionType = v1alpha1.ActionAgent
	if got := strings.Join(ShellWarnings(spec), "\n"); strings.Contains(got, "onExit") {
		t.Errorf("an agent exit hook warned: %s", got)
	}
}
