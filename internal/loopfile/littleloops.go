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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/pycompat"
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
	// lines are the lines of the file's keys by path (states.a.action).
	lines map[string]int
	// ignored are the keys little-loops knows and looprun does without,
	// by what they are for.
	ignored map[string][]string
	// order is the order the file wrote its mappings' keys in.
	order keyOrder
}

// ignore notes that the key at fp, for why, is ignored.
func (r *reader) ignore(fp, why string) {
	if r.ignored == nil {
		r.ignored = map[string][]string{}
	}
	r.ignored[why] = append(r.ignored[why], fp)
}

// ignoredNotice is one line of all the keys ignored, by what they are
// for; "" when none is.
func (r *reader) ignoredNotice() string {
	if len(r.ignored) == 0 {
		return ""
	}
	var parts []string
	for _, why := range slices.Sorted(maps.Keys(r.ignored)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", why, strings.Join(r.ignored[why], ", ")))
	}
	return "looprun does without " + strings.Join(parts, "; ") + ": these keys are ignored, nothing to change"
}

// warn and fail record a warning and an error. Each message starts with
// the path of what it is about (states.a.timeout: ...); when the file
// itself has that key, its line goes first. (A key that came from a
// library, a parent loop or flow: has no line here.)
func (r *reader) warn(format string, args ...any) {
	r.warnings = append(r.warnings, r.located(fmt.Sprintf(format, args...)))
}

func (r *reader) fail(format string, args ...any) {
	r.errs = append(r.errs, r.located(fmt.Sprintf(format, args...)))
}

// located puts the line of the path msg starts with before it.
func (r *reader) located(msg string) string {
	if path, _, ok := strings.Cut(msg, ": "); ok && r.lines[path] > 0 {
		return fmt.Sprintf("line %d: %s", r.lines[path], msg)
	}
	return msg
}

// requiredWhy says what each required top-level field is.
var requiredWhy = map[string]string{
	"name":    "the loop's name (its run, state file and Loop are named after it)",
	"initial": "the state the loop starts in",
	"states":  "the mapping of state names to states",
}

// Top-level keys little-loops knows that looprun does not use.
var ignoredTopLevel = map[string]string{
	"scope": "scope locks", "singleton": "scope locks",
	"category": "catalogue metadata", "labels": "catalogue metadata", "visibility": "catalogue metadata",
	"commands": "catalogue metadata", "targets": "catalogue metadata",
	"config":            "ll-config overrides",
	"host_guard":        "the host memory guard",
	"prompt_size_guard": "the prompt size guard",
	"tamper_guard":      "Claude harness settings",
	"prepatch_check":    "Claude harness settings", "session_mode": "Claude harness settings",
	"artifact_versioning": "Claude harness settings",
}

// State keys little-loops knows that looprun does not use.
var ignoredStateKeys = map[string]string{
	"request_path": "Claude CLI options", "session_mode": "Claude CLI options",
	"tamper_guard": "harness guards", "prepatch_check": "harness guards",
	"description": "",
}

func (r *reader) littleLoops(doc map[string]any, dir string) (*v1alpha1.Loop, error) {
	doc, err := r.inherit(doc, dir, map[string]bool{})
	if err != nil {
		return nil, err
	}
	if err := flow(doc, r.order); err != nil {
		return nil, err
	}
	if err := r.fragments(doc, dir); err != nil {
		return nil, err
	}
	// A missing field is one problem among the file's others, all said at
	// once.
	for _, k := range []string{"name", "initial", "states"} {
		if _, ok := doc[k]; !ok {
			r.fail("%s: required: %s", k, requiredWhy[k])
		}
	}
	if _, ok := doc["states"]; !ok {
		return nil, &Problems{List: r.errs}
	}
	name := r.str(doc, "name", "name")
	// Every state of a little-loops file is throttled as little-loops
	// throttles it: warned at 8 runs in a row, escalated at 12; and every
	// failed action, shell ones too, is read for a rate limit.
	spec := v1alpha1.LoopSpec{Initial: r.str(doc, "initial", "initial"), Throttle: &v1alpha1.Throttle{
		WarnMax: ptr.To(v1alpha1.DefaultThrottleWarnMax), HardMax: ptr.To(v1alpha1.DefaultThrottleHardMax)},
		ClassifyFailures: v1alpha1.ClassifyAll}
	r.topLevel(doc, &spec)
	states, ok := doc["states"].(map[string]any)
	if !ok {
		return nil, errors.New("states: must be a mapping of state names to states")
	}
	defaultTimeout := r.duration(doc, "default_timeout", "default_timeout")
	defaultIdle := r.duration(doc, "default_idle_timeout", "default_idle_timeout")
	spec.States = make(map[string]v1alpha1.State, len(states))
	for _, sn := range slices.Sorted(maps.Keys(states)) {
		sm, ok := states[sn].(map[string]any)
		if !ok {
			r.fail("states.%s: must be a mapping%s", sn, notAStateHint(sn, states[sn]))
			continue
		}
		st := r.state(sn, sm)
		if st.Timeout == nil && defaultTimeout != nil && !st.Terminal {
			st.Timeout = defaultTimeout
		}
		if st.IdleTimeout == nil && defaultIdle != nil && !st.Terminal {
			st.IdleTimeout = defaultIdle
		}
		spec.States[sn] = st
	}
	r.subLoopCaptureRefs(doc, spec.States)
	failed := make([]string, len(r.errs))
	for i, e := range r.errs {
		failed[i] = failedPath(e)
	}
	if problems := append(r.errs, specProblems(&spec, FormatLittleLoops, r.lines, failed)...); len(problems) > 0 {
		slices.SortStableFunc(problems, byLine)
		return nil, &Problems{List: problems}
	}
	r.structureWarnings(doc, states)
	loop := NewLoop(name, spec)
	if d, ok := doc["description"].(string); ok && d != "" {
		loop.Annotations = map[string]string{"looprun.io/description": strings.TrimSpace(d)}
	}
	return loop, nil
}

// notAStateHint says why what stands where a state goes may not be one: a
// state's key at the indentation of the state names (terminal: true), or a
// state whose keys are not indented under it.
func notAStateHint(name string, v any) string {
	_, read := stateKeys.keys[name]
	_, ignored := stateKeys.ignored[name]
	switch {
	case read || ignored || strings.HasPrefix(name, "on_"):
		return fmt.Sprintf(" (a state); %s is a key of a state: is it indented a level too little? Indent it under the state above", name)
	case v == nil:
		return " (a state), not empty: are its keys indented under it?"
	}
	return ""
}

// topLevelKeys are the keys of a little-loops file's top level.
var topLevelKeys = table[v1alpha1.LoopSpec]{
	keys: map[string]key[v1alpha1.LoopSpec]{
		"name": nil, "initial": nil, "states": nil, "description": nil, "default_timeout": nil, "default_idle_timeout": nil,
		"context": func(r *reader, m map[string]any, k, _ string, spec *v1alpha1.LoopSpec) {
			ctx, ok := m[k].(map[string]any)
			if !ok {
				r.fail("context: must be a mapping")
				return
			}
			spec.Context = map[string]apiextensionsv1.JSON{}
			for ck, cv := range ctx {
				spec.Context[ck] = r.order.toJSON(cv)
			}
		},
		"max_steps": int32Key(func(s *v1alpha1.LoopSpec) **int32 { return &s.MaxIterations }),
		"max_iterations": func(r *reader, m map[string]any, k, fp string, spec *v1alpha1.LoopSpec) {
			if _, both := m["max_steps"]; both {
				spec.MaxPasses = r.int32p(m, k, fp) // beside max_steps: full passes
				return
			}
			spec.MaxIterations = r.int32p(m, k, fp)
		},
		"on_max_steps":      strKey(func(s *v1alpha1.LoopSpec) *string { return &s.OnMaxIterations }),
		"on_max_iterations": strKey(func(s *v1alpha1.LoopSpec) *string { return &s.OnMaxPasses }),
		"max_edge_revisits": int32Key(func(s *v1alpha1.LoopSpec) **int32 { return &s.MaxEdgeRevisits }),
		"timeout":           durationKey(func(s *v1alpha1.LoopSpec) **metav1.Duration { return &s.Timeout }),
		"backoff":           durationKey(func(s *v1alpha1.LoopSpec) **metav1.Duration { return &s.Backoff }),
		"maintain":          boolKey(func(s *v1alpha1.LoopSpec) *bool { return &s.Maintain }),
		"llm": func(r *reader, m map[string]any, k, _ string, spec *v1alpha1.LoopSpec) {
			spec.LLM = r.llm(m[k])
		},
		"input_key":       func(r *reader, m map[string]any, k, _ string, _ *v1alpha1.LoopSpec) { r.inputs(m, k) },
		"required_inputs": func(r *reader, m map[string]any, k, _ string, _ *v1alpha1.LoopSpec) { r.inputs(m, k) },
		"parameters":      func(r *reader, m map[string]any, k, _ string, _ *v1alpha1.LoopSpec) { r.params(m[k]) },
		"circuit": func(r *reader, m map[string]any, k, _ string, spec *v1alpha1.LoopSpec) {
			spec.Circuit = r.circuit(m[k])
		},
		// A CONTEXT_HANDOFF: pauses the run whatever on_handoff says; only
		// spawn would do more in ll-loop (start a claude session to resume).
		"pruning_profile": func(r *reader, m map[string]any, k, fp string, spec *v1alpha1.LoopSpec) {
			if spec.Agent == nil {
				spec.Agent = &v1alpha1.AgentSpec{}
			}
			spec.Agent.AutomationProfile = r.pruningProfile(m[k], fp)
		},
		"on_handoff": func(r *reader, m map[string]any, k, fp string, _ *v1alpha1.LoopSpec) {
			switch h := r.str(m, k, fp); h {
			case "pause", "terminate":
			case "spawn":
				// A handoff pauses the run, and looprun resume goes on.
				r.ignore(fp+": spawn", "an agent session started on a handoff")
			default:
				r.fail("%s: %q is not pause, terminate or spawn", fp, h)
			}
		},
	},
	ignored: ignoredTopLevel,
	unknown: func(r *reader, _ map[string]any, k, fp, hint string, _ *v1alpha1.LoopSpec) {
		if strings.HasSuffix(k, "_ok") {
			return // little-loops' switches that silence its validator's rules
		}
		if _, state := stateKeys.keys[k]; state && hint == "" {
			hint = " (a key of a state, at the top level: is it indented too little?)"
		}
		r.warn("%s: unknown key; ignored%s", fp, hint)
	},
}

func (r *reader) topLevel(doc map[string]any, spec *v1alpha1.LoopSpec) {
	topLevelKeys.read(r, doc, "", spec)
}

// repeatedFailureKeys are the keys of circuit.repeated_failure.
var repeatedFailureKeys = table[v1alpha1.RepeatedFailure]{keys: map[string]key[v1alpha1.RepeatedFailure]{
	"window":              int32Key(func(f *v1alpha1.RepeatedFailure) **int32 { return &f.Window }),
	"recurrent_window":    int32Key(func(f *v1alpha1.RepeatedFailure) **int32 { return &f.RecurrentWindow }),
	"on_repeated_failure": strKey(func(f *v1alpha1.RepeatedFailure) *string { return &f.OnRepeatedFailure }),
	"progress_paths":      stringsKey(func(f *v1alpha1.RepeatedFailure) *[]string { return &f.ProgressPaths }),
	"exclude_paths":       stringsKey(func(f *v1alpha1.RepeatedFailure) *[]string { return &f.ExcludePaths }),
}}

// circuitKeys are the keys of circuit: the circuit breakers.
var circuitKeys = table[v1alpha1.CircuitSpec]{keys: map[string]key[v1alpha1.CircuitSpec]{
	"repeated_failure": nestedKey(&repeatedFailureKeys, func(c *v1alpha1.CircuitSpec) **v1alpha1.RepeatedFailure { return &c.RepeatedFailure }),
}}

// circuit reads the circuit breakers (repeated_failure).
func (r *reader) circuit(v any) *v1alpha1.CircuitSpec {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("circuit: must be a mapping")
		return nil
	}
	c := &v1alpha1.CircuitSpec{}
	circuitKeys.read(r, m, "circuit", c)
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

// llmKeys are the keys of llm: the judge's settings.
var llmKeys = table[v1alpha1.LLMSpec]{
	keys: map[string]key[v1alpha1.LLMSpec]{
		"enabled":    boolPtrKey(func(l *v1alpha1.LLMSpec) **bool { return &l.Enabled }),
		"model":      strKey(func(l *v1alpha1.LLMSpec) *string { return &l.Model }),
		"max_tokens": int32Key(func(l *v1alpha1.LLMSpec) **int32 { return &l.MaxTokens }),
		"timeout":    durationKey(func(l *v1alpha1.LLMSpec) **metav1.Duration { return &l.Timeout }),
		"base_url":   strKey(func(l *v1alpha1.LLMSpec) *string { return &l.BaseURL }),
	},
	ignored: map[string]string{"effort": "the judge's effort"},
}

func (r *reader) llm(v any) *v1alpha1.LLMSpec {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("llm: must be a mapping")
		return nil
	}
	l := &v1alpha1.LLMSpec{}
	llmKeys.read(r, m, "llm", l)
	return l
}

// costCeilingKeys are the keys of a state's cost_ceiling, in dollars.
var costCeilingKeys = table[v1alpha1.CostCeiling]{
	keys: map[string]key[v1alpha1.CostCeiling]{
		"cost_ceiling_per_state": usdKey(func(c *v1alpha1.CostCeiling) *string { return &c.MaxCostUSD }),
		"cost_warn_at":           usdKey(func(c *v1alpha1.CostCeiling) *string { return &c.WarnAtUSD }),
	},
}

// usdKey reads a dollar amount (a number, not negative) as the decimal
// string the API holds, rounded to a millionth.
func usdKey[T any](field func(*T) *string) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) {
		f := r.number(m, k, fp)
		if f < 0 || f > 1e9 || math.IsNaN(f) {
			r.fail("%s: must be a dollar amount from 0 to 1e9", fp)
			return
		}
		*field(into) = pricing.FormatUSD(int64(math.Round(f * 1e6)))
	}
}

// stateKeys are the keys of a state.
var stateKeys = table[stateRead]{
	keys: map[string]key[stateRead]{
		"action":              strKey(func(s *stateRead) *string { return &s.Action }),
		"action_type":         actionTypeKey,
		"params":              paramsKey,
		"type":                stateType,
		"learning":            learningKey,
		"evaluate":            func(r *reader, m map[string]any, k, fp string, s *stateRead) { s.Evaluate = r.evaluate(m[k], fp) },
		"route":               func(r *reader, m map[string]any, k, fp string, s *stateRead) { s.Route = r.route(m[k], fp) },
		"next":                strKey(func(s *stateRead) *string { return &s.Next }),
		"terminal":            boolKey(func(s *stateRead) *bool { return &s.Terminal }),
		"failure":             boolPtrKey(func(s *stateRead) **bool { return &s.Failure }),
		"capture":             strKey(func(s *stateRead) *string { return &s.Capture }),
		"append_to_messages":  strKey(func(s *stateRead) *string { return &s.AppendToMessages }),
		"timeout":             durationKey(func(s *stateRead) **metav1.Duration { return &s.Timeout }),
		"on_maintain":         strKey(func(s *stateRead) *string { return &s.OnMaintain }),
		"max_retries":         int32Key(func(s *stateRead) **int32 { return &s.MaxRetries }),
		"on_retry_exhausted":  strKey(func(s *stateRead) *string { return &s.OnRetryExhausted }),
		"loop":                strKey(func(s *stateRead) *string { return &s.Loop }),
		"context_passthrough": boolKey(func(s *stateRead) *bool { return &s.ContextPassthrough }),
		"with":                func(r *reader, m map[string]any, k, fp string, s *stateRead) { r.with(m, k, fp, &s.State) },
		"worktree":            worktreeKey,
		fragmentParamsKey:     fragmentParamsRead,
		"approval":            nestedKey(&approvalKeys, func(s *stateRead) **v1alpha1.Approval { return &s.Approval }),
		"throttle":            func(r *reader, m map[string]any, k, fp string, s *stateRead) { s.Throttle = r.throttle(m[k], fp) },
		"on_throttle_hard":    strKey(func(s *stateRead) *string { return &s.OnThrottleHard }),
		"retryable_exit_codes": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
			s.RetryableExitCodes = r.exitCodes(m, k, fp)
		},
		"retry_policy": retryPolicyKey,
		"model":        strKey(func(s *stateRead) *string { return &s.Model }),
		"pruning_profile": func(r *reader, m map[string]any, k, fp string, s *stateRead) {
			p := r.pruningProfile(m[k], fp)
			s.AutomationProfile = &p
		},
		"idle_timeout": durationKey(func(s *stateRead) **metav1.Duration { return &s.IdleTimeout }),
		"agent":        strKey(func(s *stateRead) *string { return &s.AgentName }),
		"effort":       strKey(func(s *stateRead) *string { return &s.Effort }),
		"tools":        stringsKey(func(s *stateRead) *[]string { return &s.Tools }),
		"cost_ceiling": nestedKey(&costCeilingKeys, func(s *stateRead) **v1alpha1.CostCeiling { return &s.CostCeiling }),

		"max_rate_limit_retries":          rateLimitKeys["max_rate_limit_retries"],
		"on_rate_limit_exhausted":         rateLimitKeys["on_rate_limit_exhausted"],
		"rate_limit_backoff_base_seconds": rateLimitKeys["rate_limit_backoff_base_seconds"],
		"rate_limit_max_wait_seconds":     rateLimitKeys["rate_limit_max_wait_seconds"],
		"rate_limit_long_wait_ladder":     rateLimitKeys["rate_limit_long_wait_ladder"],
	},
	ignored: ignoredStateKeys,
	unknown: shorthandRoute,
}

// stateRead is a state being read, with the shorthand routes (on_VERDICT)
// that go into its route table once all its keys are read.
type stateRead struct {
	v1alpha1.State
	hasRoute bool
	extra    map[string]string
}

func (r *reader) state(name string, m map[string]any) v1alpha1.State {
	_, hasRoute := m["route"]
	st := stateRead{hasRoute: hasRoute, extra: map[string]string{}}
	stateKeys.read(r, m, "states."+name, &st)
	r.checkRateLimitPair(name, m)
	r.checkRouteKeys(name, m, &st.State)
	if st.ActionType == "" && st.Action != "" && !strings.HasPrefix(st.Action, "/") && st.IsAgent() {
		// little-loops takes an action for a slash command only when its
		// very first character is /: after white space it is shell.
		st.ActionType = v1alpha1.ActionShell
	}
	if len(st.extra) > 0 {
		if st.Route == nil {
			st.Route = map[string]v1alpha1.StateName{}
		}
		for k, v := range st.extra {
			st.Route[k] = v1alpha1.StateName(v)
		}
	}
	return st.State
}

// shorthandRoute reads a state's other keys: on_VERDICT shorthand routes
// (ignored beside a route table, as in little-loops); anything else is
// unknown.
func shorthandRoute(r *reader, m map[string]any, k, fp, hint string, st *stateRead) {
	if !strings.HasPrefix(k, "on_") {
		r.warn("%s: unknown key; ignored%s", fp, hint)
		return
	}
	if st.hasRoute {
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
		st.extra[strings.TrimPrefix(k, "on_")] = target
	}
}

// approvalKeys are the keys of an approval state's approval.
var approvalKeys = table[v1alpha1.Approval]{keys: map[string]key[v1alpha1.Approval]{
	"message": strKey(func(a *v1alpha1.Approval) *string { return &a.Message }),
	"timeout": durationKey(func(a *v1alpha1.Approval) **metav1.Duration { return &a.Timeout }),
}}

// throttleKeys are the keys of a state's throttle (normal_max is
// little-loops' own bookkeeping; it changes nothing).
var throttleKeys = table[v1alpha1.Throttle]{
	keys: map[string]key[v1alpha1.Throttle]{
		"warn_max": int32Key(func(t *v1alpha1.Throttle) **int32 { return &t.WarnMax }),
		"hard_max": int32Key(func(t *v1alpha1.Throttle) **int32 { return &t.HardMax }),
	},
	ignored: map[string]string{"normal_max": ""},
}

// throttle reads a state's throttle.
func (r *reader) throttle(v any, fp string) *v1alpha1.Throttle {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping", fp)
		return nil
	}
	th := &v1alpha1.Throttle{}
	throttleKeys.read(r, m, fp, th)
	return th
}

// The keys that say how a state's action runs.

func stateType(r *reader, m map[string]any, k, fp string, _ *stateRead) {
	if t := r.str(m, k, fp); t != "learning" {
		r.fail("%s: state type %q is not supported (learning)", fp, t)
	} else if _, ok := m["learning"]; !ok {
		r.fail("%s: a learning state needs learning", fp)
	}
}

func learningKey(r *reader, m map[string]any, k, fp string, st *stateRead) {
	if m["type"] != "learning" {
		r.fail("%s: learning needs type: learning", fp)
		return
	}
	st.Learning = r.learning(m[k], fp)
}

func paramsKey(r *reader, m map[string]any, k, fp string, st *stateRead) {
	if _, ok := m[k].(map[string]any); !ok {
		r.fail("%s: must be a mapping of the tool's arguments", fp)
		return
	}
	j := r.order.toJSON(m[k])
	st.Params = &j
}

func actionTypeKey(r *reader, m map[string]any, k, fp string, st *stateRead) {
	st.ActionType = r.actionType(m, k, fp)
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

// learningKeys are the keys of a learning state's learning.
var learningKeys = table[v1alpha1.LearningSpec]{keys: map[string]key[v1alpha1.LearningSpec]{
	"targets":          stringsKey(func(l *v1alpha1.LearningSpec) *[]string { return &l.Targets }),
	"targets_csv":      strKey(func(l *v1alpha1.LearningSpec) *string { return &l.TargetsCSV }),
	"max_retries":      int32Key(func(l *v1alpha1.LearningSpec) **int32 { return &l.MaxRetries }),
	"max_retries_expr": strKey(func(l *v1alpha1.LearningSpec) *string { return &l.MaxRetriesExpr }),
}}

// learning reads what a learning state proves.
func (r *reader) learning(v any, fp string) *v1alpha1.LearningSpec {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping", fp)
		return nil
	}
	l := &v1alpha1.LearningSpec{}
	learningKeys.read(r, m, fp, l)
	if (len(l.Targets) == 0) == (l.TargetsCSV == "") {
		r.fail("%s: set targets or targets_csv (one of them)", fp)
	}
	return l
}

// parameterKeys are the keys of a parameter.
var parameterKeys = table[v1alpha1.Parameter]{keys: map[string]key[v1alpha1.Parameter]{
	"type": func(r *reader, m map[string]any, k, fp string, p *v1alpha1.Parameter) {
		p.Type = v1alpha1.ParameterType(r.str(m, k, fp))
		switch p.Type {
		case "string", "integer", "number", "boolean", "enum", "path":
		default:
			r.fail("%s: %q is not a parameter type (string, integer, number, boolean, enum, path)", fp, p.Type)
		}
	},
	"required":    boolKey(func(p *v1alpha1.Parameter) *bool { return &p.Required }),
	"default":     jsonKey(func(p *v1alpha1.Parameter) **apiextensionsv1.JSON { return &p.Default }),
	"description": strKey(func(p *v1alpha1.Parameter) *string { return &p.Description }),
	"values": func(r *reader, m map[string]any, k, fp string, p *v1alpha1.Parameter) {
		list, ok := m[k].([]any)
		if !ok {
			r.fail("%s: must be a list", fp)
			return
		}
		for _, e := range list {
			p.Values = append(p.Values, fmt.Sprint(e))
		}
	},
}}

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
		parameterKeys.read(r, pm, fp, &p)
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
	// The keys as written: in a little-loops file the verdicts yes and
	// success differ (executor.LittleLoopsRoute).
	out := make(map[string]v1alpha1.StateName, len(m))
	for k := range m {
		out[k] = v1alpha1.StateName(r.str(m, k, fp+"."+k))
	}
	return out
}

// evaluateKeys are the keys of a state's evaluate.
var evaluateKeys = table[v1alpha1.Evaluate]{
	keys: map[string]key[v1alpha1.Evaluate]{
		"type": func(r *reader, m map[string]any, k, fp string, e *v1alpha1.Evaluate) {
			e.Type = v1alpha1.EvaluatorType(r.str(m, k, fp))
			if !e.Type.IsKnown() {
				r.fail("%s: evaluator %q is not supported", fp, e.Type)
			}
		},
		"operator":         strKey(func(e *v1alpha1.Evaluate) *string { return &e.Operator }),
		"pattern":          strKey(func(e *v1alpha1.Evaluate) *string { return &e.Pattern }),
		"path":             strKey(func(e *v1alpha1.Evaluate) *string { return &e.Path }),
		"key":              strKey(func(e *v1alpha1.Evaluate) *string { return &e.Key }),
		"direction":        strKey(func(e *v1alpha1.Evaluate) *string { return &e.Direction }),
		"previous":         strKey(func(e *v1alpha1.Evaluate) *string { return &e.Previous }),
		"source":           strKey(func(e *v1alpha1.Evaluate) *string { return &e.Source }),
		"prompt":           strKey(func(e *v1alpha1.Evaluate) *string { return &e.Prompt }),
		"history_file":     strKey(func(e *v1alpha1.Evaluate) *string { return &e.HistoryFile }),
		"target":           jsonKey(func(e *v1alpha1.Evaluate) **apiextensionsv1.JSON { return &e.Target }),
		"tolerance":        jsonKey(func(e *v1alpha1.Evaluate) **apiextensionsv1.JSON { return &e.Tolerance }),
		"schema":           jsonKey(func(e *v1alpha1.Evaluate) **apiextensionsv1.JSON { return &e.Schema }),
		"max_stall":        int32Key(func(e *v1alpha1.Evaluate) **int32 { return &e.MaxStall }),
		"max_repeat":       int32Key(func(e *v1alpha1.Evaluate) **int32 { return &e.MaxRepeat }),
		"error_patterns":   stringsKey(func(e *v1alpha1.Evaluate) *[]string { return &e.ErrorPatterns }),
		"scope":            stringsKey(func(e *v1alpha1.Evaluate) *[]string { return &e.Scope }),
		"track":            stringsKey(func(e *v1alpha1.Evaluate) *[]string { return &e.Track }),
		"negate":           boolKey(func(e *v1alpha1.Evaluate) *bool { return &e.Negate }),
		"uncertain_suffix": boolKey(func(e *v1alpha1.Evaluate) *bool { return &e.UncertainSuffix }),
		"min_confidence":   numberKey(func(e *v1alpha1.Evaluate) **float64 { return &e.MinConfidence }),
		"epsilon":          numberKey(func(e *v1alpha1.Evaluate) **float64 { return &e.Epsilon }),
		"line": func(r *reader, m map[string]any, k, fp string, e *v1alpha1.Evaluate) {
			e.Line = r.line(m, k, fp)
		},
	},
	unknown: func(r *reader, _ map[string]any, _, fp, hint string, _ *v1alpha1.Evaluate) {
		r.warn("%s: unknown evaluator key; ignored%s", fp, hint)
	},
}

func (r *reader) evaluate(v any, fp string) *v1alpha1.Evaluate {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping", fp)
		return nil
	}
	e := &v1alpha1.Evaluate{}
	evaluateKeys.read(r, m, fp, e)
	r.evaluatorRequires(m, fp, e)
	r.numberFieldWarnings(m, fp, e)
	return e
}

// numberFieldWarnings warns of a target (or convergence's tolerance) that
// is neither a number nor a template: ll-loop starts the run and reads it
// only when the state is evaluated, and so does looprun.
func (r *reader) numberFieldWarnings(m map[string]any, fp string, e *v1alpha1.Evaluate) {
	// What ll-loop does with text that reads as no number, per field.
	then := map[string]string{"target": "the run ends in error there"}
	if e.Type == v1alpha1.EvalConvergence {
		then = map[string]string{"target": "the verdict is error", "tolerance": "it counts as 0"}
	} else if e.Type != v1alpha1.EvalOutputNumeric {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(then)) {
		what := then[k]
		switch v := m[k].(type) {
		case json.Number, bool, nil:
			continue
		case string:
			if _, ok := pycompat.ParseFloat(v); ok || interpolate.HasReferences(v) {
				continue
			}
		default: // a list or a mapping: Python's float() raises
			what = "the run ends in error there"
		}
		r.warn("%s.%s: %s is not a number; when the state is evaluated %s, as in ll-loop", fp, k, shown(m[k]), what)
	}
}

// evaluatorRequires refuses, as ll-loop's validation does, an
// output_numeric or output_json without an operator (ll-loop does not
// take eq for it), an operator "", and an output_contains without a
// pattern (the pattern "" is one, matching every output). A key set to
// null is missing. Their other required keys (target, path) are
// executor.Validate's.
func (r *reader) evaluatorRequires(m map[string]any, fp string, e *v1alpha1.Evaluate) {
	switch e.Type {
	case v1alpha1.EvalOutputNumeric, v1alpha1.EvalOutputJSON:
		switch op, ok := m["operator"].(string); {
		case m["operator"] == nil:
			r.fail("%s: %s needs an operator (%s); ll-loop refuses the file without one", fp, e.Type, strings.Join(evaluate.Operators, ", "))
		case ok && op == "":
			r.fail("%s.operator: must be one of %s, not \"\"", fp, strings.Join(evaluate.Operators, ", "))
		}
	case v1alpha1.EvalOutputContains:
		if m["pattern"] == nil {
			r.fail("%s: output_contains needs a pattern (\"\" matches every output); ll-loop refuses the file without one", fp)
		}
	}
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

// pruningProfile reads little-loops' pruning_profile as the automation
// profile its agent actions run under: its name ("default" unless named),
// or "" (none) when it is not enabled. Its suppress_ switches change
// nothing in little-loops either.
func (r *reader) pruningProfile(v any, fp string) string {
	m, ok := v.(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping (enabled, name)", fp)
		return ""
	}
	if e, ok := m["enabled"]; ok && !evaluate.Truthy(e) {
		return ""
	}
	if n, ok := m["name"]; ok {
		return fmt.Sprint(n)
	}
	return "default"
}
