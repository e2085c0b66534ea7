package executor

import (
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

func mcpSpec(params string, cmd []string) *v1alpha1.LoopSpec {
	spec := &v1alpha1.LoopSpec{Initial: "call",
		Context: map[string]apiextensionsv1.JSON{"who": jsonValue("it's me")},
		States: map[string]v1alpha1.State{
			"call": {Action: "files/${context.kind}", ActionType: v1alpha1.ActionMCP,
				Route: map[string]v1alpha1.StateName{"success": "done", "tool_error": "bad", "not_found": "bad", "timeout": "bad"}},
			"done": {Terminal: true},
			"bad":  {Terminal: true},
		}}
	spec.Context["kind"] = jsonValue("read")
	if params != "" {
		st := spec.States["call"]
		st.Params = &apiextensionsv1.JSON{Raw: []byte(params)}
		spec.States["call"] = st
	}
	if cmd != nil {
		spec.MCP = &v1alpha1.MCPSpec{Command: cmd}
	}
	return spec
}

// An mcp action runs the MCP command with the tool and its params as JSON
// (their keys in the order written), every word quoted for the shell; the
// params' strings are templates.
func TestMCPAction(t *testing.T) {
	cases := []struct {
		name, params string
		cmd          []string
		want         string
	}{
		{"default command, no params", "", nil, `exec mcp-call files/read '{}'`},
		{"params expanded and quoted", `{"path": "/tmp/${context.kind}.txt", "n": 12345678901234567890, "deep": [{"who": "${context.who}"}], "flag": true}`,
			[]string{"/opt/bin/mcp call", "--json"},
			`exec '/opt/bin/mcp call' --json files/read '{"path": "/tmp/read.txt", "n": 12345678901234567890, "deep": [{"who": "it'"'"'s me"}], "flag": true}'`},
		{"as Python's json.dumps", `{"t": "café <b>&\"x\"\n 😀", "z": null, "e": {}, "l": []}`, nil,
			`exec mcp-call files/read '{"t": "caf\u00e9 <b>&\"x\"\n \ud83d\ude00", "z": null, "e": {}, "l": []}'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, run := startRun(t, "test", mcpSpec(tc.params, tc.cmd), Options{})
			step, _ := m.Plan(run, t0)
			a := step.Action
			if a == nil || a.Agent {
				t.Fatalf("step %+v", step)
			}
			if a.Command != tc.want {
				t.Errorf("command\n got %s\nwant %s", a.Command, tc.want)
			}
			if a.Timeout != 30*time.Second {
				t.Errorf("timeout %v, want the MCP default 30s", a.Timeout)
			}
			if a.Evaluate == nil || a.Evaluate.Type != v1alpha1.EvalMCPResult {
				t.Errorf("the runner judges with %+v, want mcp_result", a.Evaluate)
			}
		})
	}
}

// With no evaluate, an mcp state routes on mcp_result's verdicts.
func TestMCPRouting(t *testing.T) {
	cases := []struct {
		output string
		exit   int
		want   string
	}{
		{`{"isError": false}`, 0, "done"},
		{`{"isError": true}`, 0, "bad"},
		{"", 127, "bad"},
		{"", 124, "bad"},
	}
	for _, tc := range cases {
		m, run := startRun(t, "test", mcpSpec("", nil), Options{})
		m.Plan(run, t0)
		m.Complete(run, &ActionResult{Output: tc.output, ExitCode: tc.exit}, t0)
		if run.CurrentState != tc.want {
			t.Errorf("%q exit %d: in %s, want %s (%s)", tc.output, tc.exit, run.CurrentState, tc.want, run.Message)
		}
	}
}

func TestMCPValidation(t *testing.T) {
	cases := []struct {
		name string
		edit func(*v1alpha1.State)
		want string
	}{
		{"params without mcp", func(s *v1alpha1.State) { s.ActionType = ""; s.Action = "echo" }, "states[call].params: Invalid value: \"\": params are the arguments of an MCP tool"},
		{"no tool", func(s *v1alpha1.State) { s.Action = "" }, "states[call].action: Required value: an mcp action names its tool"},
		{"params not an object", func(s *v1alpha1.State) { s.Params.Raw = []byte(`[1]`) }, "states[call].params: Invalid value: \"[1]\": must be a JSON object"},
		{"bad template in params", func(s *v1alpha1.State) { s.Params.Raw = []byte(`{"a": {"b": "${captured.nope.output}"}}`) }, `states[call].params[a][b]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := mcpSpec(`{"a": 1}`, nil)
			st := spec.States["call"]
			tc.edit(&st)
			spec.States["call"] = st
			_, err := New("test", spec, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
