package loopfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// reader converts one little-loops document, collecting warnings and errors.
type reader struct {
	opts     Options
	warnings []string
	errs     []string
	// inputKey and requiredInputs are the file's input_key and
	// required_inputs: how a local run takes its positional input.
	inputKey       string
	requiredInputs []string
	// parameters are the file's typed inputs (parameters:).
	parameters map[string]v1alpha1.Parameter
}

func (r *reader) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

func (r *reader) fail(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// Top-level keys little-loops knows that looprun does not use.
var ignoredTopLevel = map[string]string{
	"scope": "scope locks", "singleton": "scope locks", "on_handoff": "context handoff",
	"category": "catalogue metadata", "labels": "catalogue metadata", "visibility": "catalogue metadata",
	"commands": "catalogue metadata", "targets": "catalogue metadata",
	"config":            "ll-config overrides",
	"host_guard":        "the host memory guard",
	"prompt_size_guard": "the prompt size guard", "default_idle_timeout": "idle timeouts",
	"pruning_profile": "Claude harness settings", "tamper_guard": "Claude harness settings",
	"prepatch_check": "Claude harness settings", "session_mode": "Claude harness settings",
	"artifact_versioning": "Claude harness settings",
}

// State keys little-loops knows that looprun does not use.
var ignoredStateKeys = map[string]string{
	"idle_timeout": "idle timeouts", "append_to_messages": "the messages log",
	"max_rate_limit_retries":  "rate-limit retries",
	"on_rate_limit_exhausted": "rate-limit retries", "rate_limit_backoff_base_seconds": "rate-limit retries",
	"rate_limit_max_wait_seconds": "rate-limit retries", "rate_limit_long_wait_ladder": "rate-limit retries",
	"agent": "Claude CLI options", "tools": "Claude CLI options", "model": "Claude CLI options",
	"effort": "Claude CLI options", "request_path": "Claude CLI options", "session_mode": "Claude CLI options",
	"pruning_profile": "Claude CLI options",
	"cost_ceiling":    "cost ceilings", "tamper_guard": "harness guards", "prepatch_check": "harness guards",
	"description": "",
}

func (r *reader) littleLoops(doc map[string]any, dir string) (*v1alpha1.Loop, error) {
	doc, err := r.inherit(doc, dir, map[string]bool{})
	if err != nil {
		return nil, err
	}
	if err := flow(doc); err != nil {
		return nil, err
	}
	if err := r.fragments(doc, dir); err != nil {
		return nil, err
	}
	var missing []string
	for _, k := range []string{"name", "initial", "states"} {
		if _, ok := doc[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing required fields: %s", strings.Join(missing, ", "))
	}
	name := r.str(doc, "name", "name")
	// Every state of a little-loops file is throttled as little-loops
	// throttles it: warned at 8 runs in a row, escalated at 12.
	spec := v1alpha1.LoopSpec{Initial: r.str(doc, "initial", "initial"), Throttle: &v1alpha1.Throttle{
		WarnMax: ptr.To(v1alpha1.DefaultThrottleWarnMax), HardMax: ptr.To(v1alpha1.DefaultThrottleHardMax)}}
	r.topLevel(doc, &spec)
	states, ok := doc["states"].(map[string]any)
	if !ok {
		return nil, errors.New("states: must be a mapping of state names to states")
	}
	defaultTimeout := r.duration(doc, "default_timeout", "default_timeout")
	spec.States = make(map[string]v1alpha1.State, len(states))
	for _, sn := range slices.Sorted(maps.Keys(states)) {
		sm, ok := states[sn].(map[string]any)
		if !ok {
			r.fail("states.%s: must be a mapping", sn)
			continue
		}
		st := r.state(sn, sm)
		if st.Timeout == nil && defaultTimeout != nil && !st.Terminal {
			st.Timeout = defaultTimeout
		}
		spec.States[sn] = st
	}
	if len(r.errs) > 0 {
		return nil, errors.New(strings.Join(r.errs, "; "))
	}
	loop := NewLoop(name, spec)
	if d, ok := doc["description"].(string); ok && d != "" {
		loop.Annotations = map[string]string{"looprun.io/description": strings.TrimSpace(d)}
	}
	return loop, nil
}

func (r *reader) topLevel(doc map[string]any, spec *v1alpha1.LoopSpec) {
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		v := doc[k]
		switch k {
		case "name", "initial", "states", "description", "default_timeout":
		case "context":
			ctx, ok := v.(map[string]any)
			if !ok {
				r.fail("context: must be a mapping")
				continue
			}
			spec.Context = map[string]apiextensionsv1.JSON{}
			for ck, cv := range ctx {
				spec.Context[ck] = toJSON(cv)
			}
		case "max_steps":
			spec.MaxIterations = r.int32p(doc, k, k)
		case "max_iterations":
			if _, both := doc["max_steps"]; both {
				spec.MaxPasses = r.int32p(doc, k, k) // beside max_steps: full passes
				continue
			}
			spec.MaxIterations = r.int32p(doc, k, k)
		case "on_max_steps":
			spec.OnMaxIterations = r.str(doc, k, k)
		case "on_max_iterations":
			spec.OnMaxPasses = r.str(doc, k, k)
		case "max_edge_revisits":
			spec.MaxEdgeRevisits = r.int32p(doc, k, k)
		case "timeout":
			spec.Timeout = r.duration(doc, k, k)
		case "backoff":
			spec.Backoff = r.duration(doc, k, k)
		case "maintain":
			spec.Maintain = r.boolean(doc, k, k)
		case "llm":
			spec.LLM = r.llm(v)
		case "input_key", "required_inputs":
			r.inputs(doc, k)
		case "parameters", "circuit":
			r.block(k, v, spec)
		default:
			if why, ok := ignoredTopLevel[k]; ok {
				r.warn("%s: %s is not supported by looprun; ignored", k, why)
			} else if !strings.HasSuffix(k, "_ok") {
				r.warn("%s: unknown key; ignored", k)
			}
		}
	}
}

// block reads a top-level key holding a block of its own.
func (r *reader) block(k string, v any, spec *v1alpha1.LoopSpec) {
	if k == "parameters" {
		r.params(v)
		return
	}
	spec.Circuit = r.circuit(v)
}

// circuit reads the circuit breakers (repeated_failure).
func (r *reader) circuit(v any) *v1alpha1.CircuitSpec {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("circuit: must be a mapping")
		return nil
	}
	c := &v1alpha1.CircuitSpec{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "repeated_failure" {
			r.warn("circuit.%s: unknown key; ignored", k)
			continue
		}
		rm, ok := m[k].(map[string]any)
		if !ok {
			r.fail("circuit.repeated_failure: must be a mapping")
			continue
		}
		rf := &v1alpha1.RepeatedFailure{}
		for _, rk := range slices.Sorted(maps.Keys(rm)) {
			fp := "circuit.repeated_failure." + rk
			switch rk {
			case "window":
				rf.Window = r.int32p(rm, rk, fp)
			case "recurrent_window":
				rf.RecurrentWindow = r.int32p(rm, rk, fp)
			case "on_repeated_failure":
				rf.OnRepeatedFailure = r.str(rm, rk, fp)
			case "progress_paths":
				rf.ProgressPaths = r.strings(rm, rk, fp)
			case "exclude_paths":
				rf.ExcludePaths = r.strings(rm, rk, fp)
			default:
				r.warn("%s: unknown key; ignored", fp)
			}
		}
		c.RepeatedFailure = rf
	}
	return c
}

// inputs reads input_key and required_inputs: where a local run's
// positional input goes, and what it must not start without.
func (r *reader) inputs(doc map[string]any, k string) {
	if k == "input_key" {
		r.inputKey = r.str(doc, k, k)
		if r.inputKey != "" && !interpolate.IsName(r.inputKey) {
			r.fail("input_key: %q is not a context variable name", r.inputKey)
		}
		return
	}
	list, ok := doc[k].([]any)
	if !ok {
		r.fail("required_inputs: must be a list of context variable names")
		return
	}
	for i, e := range list {
		s, ok := e.(string)
		if !ok || !interpolate.IsName(s) {
			r.fail("required_inputs[%d]: %v is not a context variable name", i, e)
			continue
		}
		r.requiredInputs = append(r.requiredInputs, s)
	}
}

func (r *reader) llm(v any) *v1alpha1.LLMSpec {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("llm: must be a mapping")
		return nil
	}
	l := &v1alpha1.LLMSpec{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		path := "llm." + k
		switch k {
		case "enabled":
			b := r.boolean(m, k, path)
			l.Enabled = &b
		case "model":
			l.Model = r.str(m, k, path)
		case "max_tokens":
			l.MaxTokens = r.int32p(m, k, path)
		case "timeout":
			l.Timeout = r.duration(m, k, path)
		case "base_url":
			l.BaseURL = r.str(m, k, path)
		case "effort":
			r.warn("%s: not supported by looprun; ignored", path)
		default:
			r.warn("%s: unknown key; ignored", path)
		}
	}
	return l
}

func (r *reader) state(name string, m map[string]any) v1alpha1.State {
	var st v1alpha1.State
	p := "states." + name
	extra := map[string]string{}
	_, hasRoute := m["route"]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fp := p + "." + k
		switch k {
		case "action":
			st.Action = r.str(m, k, fp)
		case "action_type", "params", "type", "learning":
			r.actionKey(m, k, fp, &st)
		case "evaluate":
			st.Evaluate = r.evaluate(m[k], fp)
		case "route":
			st.Route = r.route(m[k], fp)
		case "next":
			st.Next = r.str(m, k, fp)
		case "terminal":
			st.Terminal = r.boolean(m, k, fp)
		case "failure":
			b := r.boolean(m, k, fp)
			st.Failure = &b
		case "capture":
			st.Capture = r.str(m, k, fp)
		case "timeout":
			st.Timeout = r.duration(m, k, fp)
		case "on_maintain":
			st.OnMaintain = r.str(m, k, fp)
		case "max_retries":
			st.MaxRetries = r.int32p(m, k, fp)
		case "on_retry_exhausted":
			st.OnRetryExhausted = r.str(m, k, fp)
		case "loop", "context_passthrough", "with", "worktree", fragmentParamsKey:
			r.compositionKey(m, k, fp, &st)
		default:
			r.stateExtra(m, k, fp, hasRoute, &st, extra)
		}
	}
	if len(extra) > 0 {
		if st.Route == nil {
			st.Route = map[string]v1alpha1.StateName{}
		}
		for k, v := range extra {
			st.Route[k] = v1alpha1.StateName(v)
		}
	}
	return st
}

// stateExtra handles the throttle, shorthand routes and the keys looprun
// does not support.
func (r *reader) stateExtra(m map[string]any, k, fp string, hasRoute bool, st *v1alpha1.State, extra map[string]string) {
	switch k {
	case "throttle":
		st.Throttle = r.throttle(m[k], fp)
		return
	case "on_throttle_hard":
		st.OnThrottleHard = r.str(m, k, fp)
		return
	case "retryable_exit_codes":
		list, ok := m[k].([]any)
		if !ok {
			r.fail("%s: must be a list of exit codes", fp)
			return
		}
		st.RetryableExitCodes = []int32{}
		for i := range list {
			if c := r.int32p(map[string]any{k: list[i]}, k, fmt.Sprintf("%s[%d]", fp, i)); c != nil {
				st.RetryableExitCodes = append(st.RetryableExitCodes, *c)
			}
		}
		return
	}
	if why, ok := ignoredStateKeys[k]; ok {
		if why != "" {
			r.warn("%s: %s is not supported by looprun; ignored", fp, why)
		}
		return
	}
	if !strings.HasPrefix(k, "on_") {
		r.warn("%s: unknown key; ignored", fp)
		return
	}
	if hasRoute {
		r.warn("%s: ignored because the state has a route table (as in little-loops)", fp)
		return
	}
	target := r.str(m, k, fp)
	switch k {
	case "on_yes", "on_success":
		st.OnSuccess = target
	case "on_no", "on_failure":
		st.OnFailure = target
	case "on_error":
		st.OnError = target
	default:
		extra[v1alpha1.CanonicalVerdict(strings.TrimPrefix(k, "on_"))] = target
	}
}

// throttle reads a state's throttle (normal_max is little-loops' own
// bookkeeping; it changes nothing).
func (r *reader) throttle(v any, fp string) *v1alpha1.Throttle {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping", fp)
		return nil
	}
	th := &v1alpha1.Throttle{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "warn_max":
			th.WarnMax = r.int32p(m, k, fp+"."+k)
		case "hard_max":
			th.HardMax = r.int32p(m, k, fp+"."+k)
		case "normal_max":
		default:
			r.warn("%s.%s: unknown key; ignored", fp, k)
		}
	}
	return th
}

// actionKey reads the keys that say how the action runs.
func (r *reader) actionKey(m map[string]any, k, fp string, st *v1alpha1.State) {
	switch k {
	case "type":
		if t := r.str(m, k, fp); t != "learning" {
			r.fail("%s: state type %q is not supported (learning)", fp, t)
		} else if _, ok := m["learning"]; !ok {
			r.fail("%s: a learning state needs learning", fp)
		}
	case "learning":
		if m["type"] != "learning" {
			r.fail("%s: learning needs type: learning", fp)
			return
		}
		st.Learning = r.learning(m[k], fp)
	case "params":
		if _, ok := m[k].(map[string]any); !ok {
			r.fail("%s: must be a mapping of the tool's arguments", fp)
			return
		}
		j := toJSON(m[k])
		st.Params = &j
	default: // action_type
		st.ActionType = r.actionType(m, k, fp)
	}
}

// actionType maps little-loops' action types onto looprun's.
func (r *reader) actionType(m map[string]any, k, fp string) v1alpha1.ActionType {
	switch t := r.str(m, k, fp); t {
	case "shell":
		return v1alpha1.ActionShell
	case "prompt", "slash_command":
		return v1alpha1.ActionAgent
	case "mcp_tool":
		return v1alpha1.ActionMCP
	default:
		r.fail("%s: action type %q is not supported (shell, prompt, slash_command, mcp_tool)", fp, t)
		return ""
	}
}

// learning reads what a learning state proves.
func (r *reader) learning(v any, fp string) *v1alpha1.LearningSpec {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping", fp)
		return nil
	}
	l := &v1alpha1.LearningSpec{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kp := fp + "." + k
		switch k {
		case "targets":
			l.Targets = r.strings(m, k, kp)
		case "targets_csv":
			l.TargetsCSV = r.str(m, k, kp)
		case "max_retries":
			l.MaxRetries = r.int32p(m, k, kp)
		case "max_retries_expr":
			l.MaxRetriesExpr = r.str(m, k, kp)
		default:
			r.warn("%s: unknown key; ignored", kp)
		}
	}
	if (len(l.Targets) == 0) == (l.TargetsCSV == "") {
		r.fail("%s: set targets or targets_csv (one of them)", fp)
	}
	return l
}

// compositionKey reads the keys that compose loops: a sub-loop state's,
// and the parameters a fragment state binds.
func (r *reader) compositionKey(m map[string]any, k, fp string, st *v1alpha1.State) {
	switch k {
	case fragmentParamsKey:
		params, _ := m[k].(map[string]any)
		st.FragmentParams = make(map[string]apiextensionsv1.JSON, len(params))
		for name, v := range params {
			st.FragmentParams[name] = toJSON(v)
		}
	case "loop":
		st.Loop = r.str(m, k, fp)
	case "context_passthrough":
		st.ContextPassthrough = r.boolean(m, k, fp)
	case "with":
		r.with(m, k, fp, st)
	case "worktree":
		if _, ok := m["loop"]; !ok {
			r.fail("%s: worktree needs loop", fp)
		} else {
			st.Worktree = r.str(m, k, fp)
		}
	}
}

// with reads a state's with: a sub-loop's parameter bindings. (On a
// fragment state, with binds the fragment's ${param.*}, which looprun does
// not support.)
func (r *reader) with(m map[string]any, k, fp string, st *v1alpha1.State) {
	if _, ok := m["loop"]; !ok {
		r.warn("%s: fragment parameters are not supported by looprun; ignored", fp)
		return
	}
	w, ok := m[k].(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping of parameter names to values", fp)
		return
	}
	st.With = make(map[string]apiextensionsv1.JSON, len(w))
	for name, v := range w {
		st.With[name] = toJSON(v)
	}
}

// params reads parameters: the typed inputs callers bind with with.
func (r *reader) params(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("parameters: must be a mapping of names to parameters")
		return
	}
	r.parameters = make(map[string]v1alpha1.Parameter, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		fp := "parameters." + name
		pm, ok := m[name].(map[string]any)
		if !ok {
			r.fail("%s: must be a mapping", fp)
			continue
		}
		var p v1alpha1.Parameter
		for _, k := range slices.Sorted(maps.Keys(pm)) {
			switch k {
			case "type":
				p.Type = v1alpha1.ParameterType(r.str(pm, k, fp+".type"))
				switch p.Type {
				case "string", "integer", "number", "boolean", "enum", "path":
				default:
					r.fail("%s.type: %q is not a parameter type (string, integer, number, boolean, enum, path)", fp, p.Type)
				}
			case "required":
				p.Required = r.boolean(pm, k, fp+".required")
			case "default":
				j := toJSON(pm[k])
				p.Default = &j
			case "description":
				p.Description = r.str(pm, k, fp+".description")
			case "values":
				list, ok := pm[k].([]any)
				if !ok {
					r.fail("%s.values: must be a list", fp)
					continue
				}
				for _, e := range list {
					p.Values = append(p.Values, fmt.Sprint(e))
				}
			default:
				r.warn("%s.%s: unknown key; ignored", fp, k)
			}
		}
		if p.Required && p.Default != nil {
			r.fail("%s: a required parameter cannot have a default", fp)
		}
		if p.Type == "enum" && len(p.Values) == 0 {
			r.fail("%s: an enum parameter needs values", fp)
		}
		r.parameters[name] = p
	}
}

func (r *reader) route(v any, fp string) map[string]v1alpha1.StateName {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping of verdicts to states", fp)
		return nil
	}
	out := make(map[string]v1alpha1.StateName, len(m))
	for k := range m {
		out[v1alpha1.CanonicalVerdict(k)] = v1alpha1.StateName(r.str(m, k, fp+"."+k))
	}
	return out
}

func (r *reader) evaluate(v any, fp string) *v1alpha1.Evaluate {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping", fp)
		return nil
	}
	e := &v1alpha1.Evaluate{}
	strs := map[string]*string{
		"operator": &e.Operator, "pattern": &e.Pattern, "path": &e.Path, "key": &e.Key,
		"direction": &e.Direction, "previous": &e.Previous, "source": &e.Source, "prompt": &e.Prompt,
		"history_file": &e.HistoryFile,
	}
	values := map[string]**apiextensionsv1.JSON{"target": &e.Target, "tolerance": &e.Tolerance, "schema": &e.Schema}
	ints := map[string]**int32{"max_stall": &e.MaxStall, "max_repeat": &e.MaxRepeat}
	lists := map[string]*[]string{"error_patterns": &e.ErrorPatterns, "scope": &e.Scope, "track": &e.Track}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kp := fp + "." + k
		if dst, ok := strs[k]; ok {
			*dst = r.str(m, k, kp)
			continue
		}
		if dst, ok := ints[k]; ok {
			*dst = r.int32p(m, k, kp)
			continue
		}
		if dst, ok := lists[k]; ok {
			*dst = r.strings(m, k, kp)
			continue
		}
		if dst, ok := values[k]; ok {
			j := toJSON(m[k])
			*dst = &j
			continue
		}
		switch k {
		case "type":
			e.Type = v1alpha1.EvaluatorType(r.str(m, k, kp))
			if !e.Type.IsKnown() {
				r.fail("%s: evaluator %q is not supported", kp, e.Type)
			}
		case "negate":
			e.Negate = r.boolean(m, k, kp)
		case "uncertain_suffix":
			e.UncertainSuffix = r.boolean(m, k, kp)
		case "min_confidence":
			f := r.number(m, k, kp)
			e.MinConfidence = &f
		case "epsilon":
			f := r.number(m, k, kp)
			e.Epsilon = &f
		case "line":
			e.Line = r.line(m, k, kp)
		default:
			r.warn("%s: unknown evaluator key; ignored", kp)
		}
	}
	return e
}

func (r *reader) line(m map[string]any, k, fp string) *intstr.IntOrString {
	switch v := m[k].(type) {
	case json.Number:
		i, err := v.Int64()
		if err != nil || i < math.MinInt32 || i > math.MaxInt32 {
			r.fail("%s: must be first, last or an integer", fp)
			return nil
		}
		l := intstr.FromInt32(int32(i))
		return &l
	case string:
		l := intstr.FromString(v)
		return &l
	}
	r.fail("%s: must be first, last or an integer", fp)
	return nil
}
