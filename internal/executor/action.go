package executor

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/pycompat"
)

// What a runner gets for a state's action: the command rendered from the
// spec (a shell command, an agent prompt, an mcp call, a learning gate),
// and the evaluator it may judge with where the action runs.

// newAction is the Action a runner gets for the command of state st (named
// name); its templates all expand against vars.
func (t *turn) newAction(name string, st *v1alpha1.State, iteration int32, command string, timeout time.Duration, vars *interpolate.Vars) *Action {
	spec := t.m.spec
	var usageTo *UsageTarget
	if u := t.m.opts.usageTo; u != nil {
		c := *u
		usageTo = &c
	}
	var gate *LearningGate
	if st.Learning != nil {
		gate, _ = learningGate(st, vars) // expandAction made its script
	}
	return &Action{
		Learning: gate, UsageTo: usageTo, State: name, Iteration: iteration, Retry: t.run.Retries, Command: command, Agent: st.IsAgent(),
		CallsAgent: st.Learning != nil, RunDir: t.m.RunDir(), AgentCommand: t.agentCommand(st), Timeout: timeout,
		AgentStream: (st.IsAgent() || st.Learning != nil) && spec.AgentStreams(),
		IdleTimeout: st.GetIdleTimeout(), Env: agentEnv(spec, st),
		Evaluate: t.runnerEvaluate(st, vars), Probe: progressProbe(spec, st, vars, probe(st, vars)),
	}
}

// agentCommand is the command an agent action runs (its prompt appended):
// spec.agent.command, told the most it may spend when the run has a
// budget or the state a cost ceiling (claude's --max-budget-usd, a
// backstop to looprun's own check before the state).
//
// The state's agentName, tools and model (or spec.agent.model) are passed
// as little-loops passes them (--agent, --tools a,b, --model), after the
// command's own arguments. Other CLIs get the command as written.
func (t *turn) agentCommand(st *v1alpha1.State) []string {
	spec := t.m.spec
	command := spec.GetAgentCommand()
	if !st.IsAgent() || len(command) == 0 || filepath.Base(command[0]) != "claude" {
		return command
	}
	out := make([]string, 0, len(command)+8)
	out = append(out, command[0])
	if micro, ok := t.agentBudget(st); ok {
		out = append(out, "--max-budget-usd", pricing.FormatUSD(max(micro, 1)))
	}
	out = append(out, command[1:]...)
	if st.AgentName != "" {
		out = append(out, "--agent", st.AgentName)
	}
	if len(st.Tools) > 0 {
		out = append(out, "--tools", strings.Join(st.Tools, ","))
	}
	if model := cmp.Or(st.Model, agentDefault(spec).Model); model != "" {
		out = append(out, "--model", model)
	}
	return out
}

// agentEnv is the environment an agent action gets besides the runner's,
// and a learning gate for the agent it runs, as little-loops gives its
// agent: non-interactive (LL_NON_INTERACTIVE=1, and
// DANGEROUSLY_SKIP_PERMISSIONS=1 for its hooks, as the agent runs with
// permissions skipped), the project's working directory kept between its
// shell calls (CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR=1), its background
// tasks not disabled (CLAUDE_CODE_DISABLE_BACKGROUND_TASKS empty, whatever
// looprun was given), and LL_AUTOMATION=1 and LL_AUTOMATION_PROFILE under
// an automation profile (the state's, else the loop's), both empty without
// one.
func agentEnv(spec *v1alpha1.LoopSpec, st *v1alpha1.State) []string {
	if !st.IsAgent() && st.Learning == nil {
		return nil
	}
	env := []string{"LL_NON_INTERACTIVE=1", "CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR=1", "DANGEROUSLY_SKIP_PERMISSIONS=1",
		"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS="}
	profile := agentDefault(spec).AutomationProfile
	if st.AutomationProfile != nil {
		profile = *st.AutomationProfile
	}
	if profile == "" {
		return append(env, "LL_AUTOMATION=", "LL_AUTOMATION_PROFILE=")
	}
	return append(env, "LL_AUTOMATION=1", "LL_AUTOMATION_PROFILE="+profile)
}

// agentDefault is spec.agent, or its zero value.
func agentDefault(spec *v1alpha1.LoopSpec) v1alpha1.AgentSpec {
	if spec.Agent == nil {
		return v1alpha1.AgentSpec{}
	}
	return *spec.Agent
}

// expandAction expands a state's action, within MaxCommandBytes.
func expandAction(spec *v1alpha1.LoopSpec, st *v1alpha1.State, vars *interpolate.Vars) (string, error) {
	if st.Learning != nil {
		return learningScript(spec, st, vars)
	}
	command, err := interpolate.Expand(st.Action, vars)
	if err != nil {
		return "", err
	}
	if st.ActionType == v1alpha1.ActionMCP {
		if command, err = mcpCall(spec.GetMCPCommand(), command, st.Params, vars); err != nil {
			return "", err
		}
	}
	if len(command) > MaxCommandBytes {
		return "", fmt.Errorf("the expanded action is %d bytes, more than the %d an action may have (capture less, or pass it through a file)", len(command), MaxCommandBytes)
	}
	return command, nil
}

// mcpCall is the shell command of an mcp action: the MCP command with the
// tool and its params (strings expanded) as JSON, run in place of the
// shell so that its exit code is the action's.
func mcpCall(command []string, tool string, params *apiextensionsv1.JSON, vars *interpolate.Vars) (string, error) {
	var args any = pycompat.NewDict(0)
	if params != nil && len(params.Raw) > 0 {
		v, err := decodeJSONValue(params.Raw)
		if err != nil {
			return "", fmt.Errorf("params: %w", err)
		}
		if _, ok := v.(*pycompat.Dict); !ok {
			return "", errors.New("params: must be a JSON object")
		}
		args = v
	}
	expanded, err := expandValue(args, vars)
	if err != nil {
		return "", fmt.Errorf("params: %w", err)
	}
	words := make([]string, 0, len(command)+2)
	for _, w := range append(slices.Clip(command), tool, pycompat.JSONDumps(expanded)) {
		words = append(words, interpolate.ShellQuote(w))
	}
	return "exec " + strings.Join(words, " "), nil
}

// runnerEvaluate is the state's evaluator prepared for a runner that judges
// the complete output where the action runs: deterministic, its templates
// expanded now. Templates that read what only exists once the action ended
// (prev, result, the elapsed time) or a source other than stdout keep the
// judging here, on the output's tail; so does a template that cannot expand.
func (t *turn) runnerEvaluate(st *v1alpha1.State, vars *interpolate.Vars) *v1alpha1.Evaluate {
	cfg := st.Evaluate
	if cfg == nil && st.ActionType == v1alpha1.ActionMCP {
		cfg = &v1alpha1.Evaluate{Type: v1alpha1.EvalMCPResult}
	}
	if st.Next != "" || cfg == nil || !evaluate.IsDeterministic(cfg.Type) || cfg.Source != "" {
		return nil
	}
	out := cfg.DeepCopy()
	expandJSON := func(v *apiextensionsv1.JSON) bool {
		var s string
		if v == nil || json.Unmarshal(v.Raw, &s) != nil || !interpolate.HasReferences(s) {
			return true
		}
		if !stableTemplate(s) {
			return false
		}
		x, err := interpolate.Expand(s, vars)
		if err != nil {
			return false
		}
		raw, _ := json.Marshal(x)
		v.Raw = raw
		return true
	}
	if !expandJSON(out.Target) || !expandJSON(out.Tolerance) {
		return nil
	}
	if out.Previous != "" {
		if !stableTemplate(out.Previous) {
			return nil
		}
		x, err := interpolate.Expand(out.Previous, vars)
		if err != nil {
			return nil
		}
		out.Previous = x
	}
	return out
}

// stableTemplate reports whether a template means the same before and after
// the action runs.
func stableTemplate(s string) bool {
	refs := interpolate.References(s)
	if refs == nil {
		return false
	}
	for _, r := range refs {
		switch {
		case r.Namespace == "prev", r.Namespace == "result":
			return false
		case r.Namespace == "loop" && len(r.Path) > 0 && strings.HasPrefix(r.Path[0], "elapsed"):
			return false
		}
	}
	return true
}
