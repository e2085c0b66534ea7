package executor

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/baseurl"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/pycompat"
)

// MaxStates is how many states a loop may have (the Loop CRD's bound on
// spec.states).
const MaxStates = 128

// Validate checks a spec: what the CRD schema checks and more (templates,
// evaluator fields, captured names). Every error names the field, such as
// spec.states[check].evaluate.operator.
func Validate(spec *v1alpha1.LoopSpec) field.ErrorList { return validate(spec, false) }

// ValidateLittleLoops checks the spec of a loop read from a little-loops
// file, which ll-loop's run would start: as Validate, but a number field
// of an evaluator (output_numeric's or convergence's target, tolerance)
// may hold anything, for ll-loop reads it only when the state is
// evaluated (and its run ends in error there, or the verdict is error;
// see evaluate.Result.Broken), and route keys are told apart as written
// (the verdicts yes and success differ in a little-loops file).
func ValidateLittleLoops(spec *v1alpha1.LoopSpec) field.ErrorList { return validate(spec, true) }

func validate(spec *v1alpha1.LoopSpec, littleLoops bool) field.ErrorList {
	var errs field.ErrorList
	root := field.NewPath("spec")
	if len(spec.States) == 0 {
		errs = append(errs, field.Required(root.Child("states"), "a loop needs at least one state"))
	}
	if len(spec.States) > MaxStates {
		errs = append(errs, field.TooMany(root.Child("states"), len(spec.States), MaxStates))
	}
	if spec.Initial == "" {
		errs = append(errs, field.Required(root.Child("initial"), "name the state the loop starts in"))
	} else if _, ok := spec.States[spec.Initial]; !ok && len(spec.States) > 0 {
		errs = append(errs, field.NotFound(root.Child("initial"), spec.Initial))
	}
	errs = append(errs, validateLimits(spec, root)...)
	for _, f := range []struct{ name, target string }{{"onMaxIterations", spec.OnMaxIterations}, {"onMaxPasses", spec.OnMaxPasses}} {
		if _, ok := spec.States[f.target]; f.target != "" && !ok {
			errs = append(errs, field.NotFound(root.Child(f.name), f.target))
		}
	}
	errs = append(errs, validateCircuit(spec, root)...)
	errs = append(errs, validateBudget(spec, root)...)
	if _, err := DecodeContext(spec.Context); err != nil {
		errs = append(errs, field.Invalid(root.Child("context"), "", err.Error()))
	}
	captured := map[string]bool{}
	terminal := false
	for name, st := range spec.States {
		if st.Capture != "" {
			captured[st.Capture] = true
		}
		if st.Loop != "" {
			captured[name] = true // how its child ended
			// A child's captures come back too, under names only its own
			// file knows: as little-loops, check no capture names then.
			captured[anyCapture] = true
		}
		terminal = terminal || st.Terminal
	}
	errs = append(errs, validateExitHook(spec.OnExit, captured, root.Child("onExit"))...)
	errs = append(errs, validateGit(spec, captured, root.Child("runner", "workspace", "git"))...)
	if !terminal && len(spec.States) > 0 {
		errs = append(errs, field.Required(root.Child("states"), "at least one state must be terminal"))
	}
	for _, name := range slices.Sorted(maps.Keys(spec.States)) {
		st := spec.States[name]
		errs = append(errs, validateState(spec, name, &st, captured, littleLoops, root.Child("states").Key(name))...)
	}
	return errs
}

// validateCircuit checks the repeated-failure circuit.
func validateCircuit(spec *v1alpha1.LoopSpec, root *field.Path) field.ErrorList {
	rf := repeatedFailure(spec)
	if rf == nil {
		return nil
	}
	var errs field.ErrorList
	p := root.Child("circuit", "repeatedFailure")
	if rf.Window != nil && *rf.Window < 1 {
		errs = append(errs, field.Invalid(p.Child("window"), *rf.Window, "must be at least 1"))
	}
	if rf.RecurrentWindow != nil && *rf.RecurrentWindow < 2 {
		errs = append(errs, field.Invalid(p.Child("recurrentWindow"), *rf.RecurrentWindow, "must be at least 2"))
	}
	if to := rf.OnRepeatedFailure; to != "" && to != v1alpha1.CircuitAbort {
		if _, ok := spec.States[to]; !ok {
			errs = append(errs, field.Invalid(p.Child("onRepeatedFailure"), to, "must be abort or name a state"))
		}
	}
	return errs
}

func validateLimits(spec *v1alpha1.LoopSpec, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.MaxIterations != nil && *spec.MaxIterations < 1 {
		errs = append(errs, field.Invalid(root.Child("maxIterations"), *spec.MaxIterations, "must be at least 1"))
	}
	if spec.MaxPasses != nil && *spec.MaxPasses < 1 {
		errs = append(errs, field.Invalid(root.Child("maxPasses"), *spec.MaxPasses, "must be at least 1"))
	}
	if spec.MaxEdgeRevisits != nil && *spec.MaxEdgeRevisits < 1 {
		errs = append(errs, field.Invalid(root.Child("maxEdgeRevisits"), *spec.MaxEdgeRevisits, "must be at least 1"))
	}
	if spec.Timeout != nil && spec.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(root.Child("timeout"), spec.Timeout.Duration.String(), "must be positive"))
	}
	if spec.Backoff != nil && spec.Backoff.Duration < 0 {
		errs = append(errs, field.Invalid(root.Child("backoff"), spec.Backoff.Duration.String(), "must not be negative"))
	}
	if l := spec.LLM; l != nil {
		p := root.Child("llm")
		if l.MaxTokens != nil && *l.MaxTokens < 1 {
			errs = append(errs, field.Invalid(p.Child("maxTokens"), *l.MaxTokens, "must be at least 1"))
		}
		if l.Timeout != nil && l.Timeout.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("timeout"), l.Timeout.Duration.String(), "must be positive"))
		}
		if l.BaseURL != "" {
			// The operator compares it with its allow-list as the endpoint
			// reads it; what could read as another path is refused here.
			if _, err := baseurl.Parse(l.BaseURL); err != nil {
				errs = append(errs, field.Invalid(p.Child("baseURL"), l.BaseURL, err.Error()))
			}
		}
	}
	return errs
}

func validateState(spec *v1alpha1.LoopSpec, name string, st *v1alpha1.State, captured map[string]bool, littleLoops bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch st.ActionType {
	case "", v1alpha1.ActionShell, v1alpha1.ActionAgent, v1alpha1.ActionMCP:
	default:
		errs = append(errs, field.NotSupported(p.Child("actionType"), st.ActionType, []string{"shell", "agent", "mcp"}))
	}
	errs = append(errs, validateMCP(st, captured, p)...)
	errs = append(errs, validateLearning(st, captured, p)...)
	errs = append(errs, validateApproval(st, captured, p)...)
	if st.Timeout != nil && st.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("timeout"), st.Timeout.Duration.String(), "must be positive"))
	}
	if st.IdleTimeout != nil && st.IdleTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("idleTimeout"), st.IdleTimeout.Duration.String(), "must be positive"))
	}
	errs = append(errs, checkTemplate(st.Action, captured, p.Child("action"))...)
	if m := st.AppendToMessages; m != "" {
		if !strings.Contains(m, "${") {
			errs = append(errs, field.Invalid(p.Child("appendToMessages"), m, "must hold a ${...} template (little-loops refuses a fixed text)"))
		}
		errs = append(errs, checkTemplate(m, captured, p.Child("appendToMessages"))...)
	}
	errs = append(errs, checkParams(st, p)...)
	errs = append(errs, validateSubLoop(st, captured, p)...)
	errs = append(errs, validateTargets(spec, st, littleLoops, p)...)
	if !st.Terminal && st.Next == "" && len(st.Route) == 0 && st.OnSuccess == "" && st.OnFailure == "" && st.OnError == "" {
		errs = append(errs, field.Required(p, fmt.Sprintf("state %q has no way out: set next, route, onSuccess, onFailure or onError, or make it terminal", name)))
	}
	errs = append(errs, validateRetries(st, p)...)
	if st.Evaluate != nil {
		errs = append(errs, validateEvaluate(st.Evaluate, captured, littleLoops, p.Child("evaluate"))...)
	}
	return errs
}

// validateMCP checks an mcp state: it names its tool, and its params are
// a JSON object whose templates are sound.
func validateMCP(st *v1alpha1.State, captured map[string]bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if st.ActionType == v1alpha1.ActionMCP && st.Action == "" {
		errs = append(errs, field.Required(p.Child("action"), "an mcp action names its tool as server/tool"))
	}
	if st.Params == nil {
		return errs
	}
	pp := p.Child("params")
	if st.ActionType != v1alpha1.ActionMCP {
		errs = append(errs, field.Invalid(pp, "", "params are the arguments of an MCP tool: they need actionType mcp"))
	}
	var params map[string]any
	if err := json.Unmarshal(st.Params.Raw, &params); err != nil || params == nil {
		return append(errs, field.Invalid(pp, string(st.Params.Raw), "must be a JSON object"))
	}
	var walk func(v any, at *field.Path)
	walk = func(v any, at *field.Path) {
		switch x := v.(type) {
		case string:
			errs = append(errs, checkTemplate(x, captured, at)...)
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(x[k], at.Key(k))
			}
		case []any:
			for i, e := range x {
				walk(e, at.Index(i))
			}
		}
	}
	walk(params, pp)
	return errs
}

// validateLearning checks a learning state: it runs no action of its own,
// and names its targets one way.
func validateLearning(st *v1alpha1.State, captured map[string]bool, p *field.Path) field.ErrorList {
	l := st.Learning
	if l == nil {
		return nil
	}
	var errs field.ErrorList
	lp := p.Child("learning")
	if st.Action != "" || st.Loop != "" {
		errs = append(errs, field.Invalid(lp, "", "a learning state runs its gate: it has no action and no loop"))
	}
	if (len(l.Targets) == 0) == (l.TargetsCSV == "") {
		errs = append(errs, field.Required(lp.Child("targets"), "set targets or targetsCSV, not both"))
	}
	if l.MaxRetries != nil && *l.MaxRetries < 0 {
		errs = append(errs, field.Invalid(lp.Child("maxRetries"), *l.MaxRetries, "must not be negative"))
	}
	errs = append(errs, checkTemplate(l.TargetsCSV, captured, lp.Child("targetsCSV"))...)
	return append(errs, checkTemplate(l.MaxRetriesExpr, captured, lp.Child("maxRetriesExpr"))...)
}

// validateApproval checks an approval state: it waits for a person, so it
// runs nothing and judges nothing itself, and it goes on from its verdicts.
func validateApproval(st *v1alpha1.State, captured map[string]bool, p *field.Path) field.ErrorList {
	a := st.Approval
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	ap := p.Child("approval")
	if st.Action != "" || st.Loop != "" || st.Learning != nil || st.Next != "" || st.Evaluate != nil || st.Terminal {
		errs = append(errs, field.Invalid(ap, "", "an approval state waits for a person: it has no action, loop, learning, next or evaluate, and is not terminal"))
	}
	if a.Timeout != nil && a.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(ap.Child("timeout"), a.Timeout.Duration.String(), "must be positive"))
	}
	return append(errs, checkTemplate(a.Message, captured, ap.Child("message"))...)
}

// validateSubLoop checks the fields of a sub-loop state.
func validateSubLoop(st *v1alpha1.State, captured map[string]bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if st.Loop != "" && st.Action != "" {
		errs = append(errs, field.Invalid(p.Child("loop"), st.Loop, "a state runs an action or a loop, not both"))
	}
	if st.Loop == "" && st.Worktree != "" {
		errs = append(errs, field.Required(p.Child("loop"), "worktree is where a sub-loop runs: it needs loop"))
	}
	errs = append(errs, checkTemplate(st.Worktree, captured, p.Child("worktree"))...)
	// An empty with binds nothing: it is as good as none.
	if st.Loop == "" && len(st.With) > 0 {
		errs = append(errs, field.Required(p.Child("loop"), "with binds a sub-loop's parameters: it needs loop"))
	}
	if len(st.With) > 0 && st.ContextPassthrough {
		errs = append(errs, field.Invalid(p.Child("with"), "", "with and contextPassthrough cannot both be set"))
	}
	if st.Loop != "" && strings.TrimSpace(st.Loop) == "" {
		errs = append(errs, field.Invalid(p.Child("loop"), st.Loop, "must name a loop"))
	}
	errs = append(errs, checkTemplate(st.Loop, captured, p.Child("loop"))...)
	for _, k := range slices.Sorted(maps.Keys(st.With)) {
		var s string
		if json.Unmarshal(st.With[k].Raw, &s) == nil {
			errs = append(errs, checkTemplate(s, captured, p.Child("with").Key(k))...)
		}
	}
	return errs
}

func validateTargets(spec *v1alpha1.LoopSpec, st *v1alpha1.State, littleLoops bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(fp *field.Path, target string, current bool) {
		switch {
		case target == "":
			// Only a route entry gets here empty (Targets skips unset
			// fields), and Route would go to a state named "".
			errs = append(errs, field.Required(fp, "a route entry names the state it goes to"))
		case target == v1alpha1.CurrentStateToken && current:
			return
		case target == v1alpha1.CurrentStateToken:
			errs = append(errs, field.Invalid(fp, target, "$current is only allowed in route, onSuccess, onFailure and onError"))
		case interpolate.HasReferences(target):
			errs = append(errs, field.Invalid(fp, target, "route targets must name a state; templates are not allowed"))
		default:
			if _, ok := spec.States[target]; !ok {
				errs = append(errs, field.NotFound(fp, target))
			}
		}
	}
	seen := map[string]string{}
	for _, t := range Targets(st) {
		fp := p.Child(t.Field)
		if t.Field == "rateLimit.onExhausted" {
			fp = p.Child("rateLimit", "onExhausted")
		}
		if t.Verdict != "" || t.Field == "route" {
			fp = p.Child("route").Key(t.Verdict) // "" names the verdict "", which no evaluator gives: a route never taken, as in little-loops
			same := v1alpha1.CanonicalVerdict(t.Verdict)
			if littleLoops {
				same = t.Verdict // yes and success are two verdicts there
			}
			if other, dup := seen[same]; dup {
				errs = append(errs, field.Duplicate(fp, fmt.Sprintf("%s (same verdict as %s)", t.Verdict, other)))
			}
			seen[same] = t.Verdict
		}
		check(fp, t.To, t.Current)
	}
	return errs
}

// Target is one way out of a state: the field that names it, the verdict
// of a route entry, and the state it goes to (maybe $current, where
// Current says that is allowed).
type Target struct {
	Field, Verdict, To string
	Current            bool
}

// Targets are the ways out of st that name a state, in a fixed order: its
// fields, then its route entries by verdict.
func Targets(st *v1alpha1.State) []Target {
	var out []Target
	for _, t := range []Target{
		{Field: "onSuccess", To: st.OnSuccess, Current: true},
		{Field: "onFailure", To: st.OnFailure, Current: true},
		{Field: "onError", To: st.OnError, Current: true},
		{Field: "next", To: st.Next},
		{Field: "onMaintain", To: st.OnMaintain},
		{Field: "onRetryExhausted", To: st.OnRetryExhausted},
		{Field: "onThrottleHard", To: st.OnThrottleHard, Current: true},
		{Field: "rateLimit.onExhausted", To: st.RateLimit.GetOnExhausted()},
	} {
		if t.To != "" {
			out = append(out, t)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Route)) {
		out = append(out, Target{Field: "route", Verdict: k, To: string(st.Route[k]), Current: true})
	}
	return out
}

// checkParams reports ${param.NAME} in a state's action that the state does
// not bind (fragmentParams).
func checkParams(st *v1alpha1.State, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, r := range interpolate.References(st.Action) {
		if r.Namespace != "param" || r.Guarded || len(r.Path) == 0 {
			continue
		}
		if _, ok := st.FragmentParams[r.Path[0]]; !ok {
			errs = append(errs, field.Invalid(p.Child("action"), "${param."+strings.Join(r.Path, ".")+"}",
				fmt.Sprintf("the state binds no fragment parameter %q (fragmentParams; little-loops: with on a fragment state)", r.Path[0])))
		}
	}
	return errs
}

// anyCapture in the set of captured names stands for any name.
const anyCapture = "\x00any"

// checkTemplate reports syntax errors and references to captures no state makes.
// validateExitHook checks spec.onExit: a shell command or an agent
// prompt, its templates readable.
func validateExitHook(h *v1alpha1.ExitHook, captured map[string]bool, p *field.Path) field.ErrorList {
	if h == nil {
		return nil
	}
	var errs field.ErrorList
	if strings.TrimSpace(h.Action) == "" {
		errs = append(errs, field.Required(p.Child("action"), "the command (or prompt) to run when the run ends"))
	}
	if h.ActionType != "" && h.ActionType != v1alpha1.ActionShell && h.ActionType != v1alpha1.ActionAgent {
		errs = append(errs, field.NotSupported(p.Child("actionType"), h.ActionType, []v1alpha1.ActionType{v1alpha1.ActionShell, v1alpha1.ActionAgent}))
	}
	if h.Timeout != nil && h.Timeout.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("timeout"), h.Timeout.Duration.String(), "must not be negative"))
	}
	return append(errs, checkTemplate(h.Action, captured, p.Child("action"))...)
}

// validateGit checks spec.runner.workspace.git: a URL, a branch to push
// to, readable templates. (That a cluster's workspace outlives a Pod is
// the CRD's rule: a local run needs no volume.)
func validateGit(spec *v1alpha1.LoopSpec, captured map[string]bool, p *field.Path) field.ErrorList {
	g := spec.GitWorkspace()
	if g == nil {
		return nil
	}
	var errs field.ErrorList
	if strings.TrimSpace(g.URL) == "" {
		errs = append(errs, field.Required(p.Child("url"), "the repository to clone"))
	}
	if g.Depth < 0 {
		errs = append(errs, field.Invalid(p.Child("depth"), g.Depth, "must not be negative"))
	}
	if push := g.Push; push != nil {
		pp := p.Child("push")
		if strings.TrimSpace(push.Branch) == "" {
			errs = append(errs, field.Required(pp.Child("branch"), "the branch to push to"))
		}
		if push.When != "" && push.When != v1alpha1.PushWhenCompleted && push.When != v1alpha1.PushWhenAlways {
			errs = append(errs, field.NotSupported(pp.Child("when"), push.When, []v1alpha1.GitPushWhen{v1alpha1.PushWhenCompleted, v1alpha1.PushWhenAlways}))
		}
		errs = append(errs, checkTemplate(push.Branch, captured, pp.Child("branch"))...)
		if b := strings.TrimSpace(push.Branch); b != "" && !strings.Contains(b, "${") {
			if err := gitws.CheckBranch(push.Branch); err != nil {
				errs = append(errs, field.Invalid(pp.Child("branch"), push.Branch, err.Error()))
			}
		}
		errs = append(errs, checkTemplate(push.CommitMessage, captured, pp.Child("commitMessage"))...)
	}
	return errs
}

func checkTemplate(tmpl string, captured map[string]bool, p *field.Path) field.ErrorList {
	if !interpolate.HasReferences(tmpl) {
		return nil
	}
	if err := interpolate.Check(tmpl); err != nil {
		return field.ErrorList{field.Invalid(p, tmpl, err.Error())}
	}
	var errs field.ErrorList
	for _, r := range interpolate.References(tmpl) {
		if r.Namespace == "captured" && !r.Guarded && !captured[r.Path[0]] && !captured[anyCapture] {
			errs = append(errs, field.Invalid(p, tmpl, fmt.Sprintf("${captured.%s...}: no state captures %q", r.Path[0], r.Path[0])))
		}
	}
	return errs
}

func validateEvaluate(e *v1alpha1.Evaluate, captured map[string]bool, littleLoops bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !e.Type.IsKnown() {
		return append(errs, field.NotSupported(p.Child("type"), e.Type, v1alpha1.Evaluators))
	}
	if e.Operator != "" && !slices.Contains(evaluate.Operators, e.Operator) {
		errs = append(errs, field.NotSupported(p.Child("operator"), e.Operator, evaluate.Operators))
	}
	if e.Direction != "" && e.Direction != "minimize" && e.Direction != "maximize" {
		errs = append(errs, field.NotSupported(p.Child("direction"), e.Direction, []string{"minimize", "maximize"}))
	}
	for _, f := range []struct {
		name string
		v    *int32
	}{{"maxStall", e.MaxStall}, {"maxRepeat", e.MaxRepeat}} {
		if f.v != nil && *f.v < 1 {
			errs = append(errs, field.Invalid(p.Child(f.name), *f.v, "must be at least 1"))
		}
	}
	if e.Epsilon != nil && *e.Epsilon < 0 {
		errs = append(errs, field.Invalid(p.Child("epsilon"), *e.Epsilon, "must not be negative"))
	}
	errs = append(errs, checkTemplate(e.HistoryFile, captured, p.Child("historyFile"))...)
	if mc := e.MinConfidence; mc != nil && (*mc < 0 || *mc > 1) {
		errs = append(errs, field.Invalid(p.Child("minConfidence"), *mc, "must be between 0 and 1"))
	}
	errs = append(errs, validateEvaluatorFields(e, captured, littleLoops, p)...)
	if e.Line != nil && e.Line.Type == intstr.String && e.Line.StrVal != "first" && e.Line.StrVal != "last" {
		errs = append(errs, field.Invalid(p.Child("line"), e.Line.StrVal, "must be first, last or a line index"))
	}
	for _, f := range []struct {
		name, tmpl string
	}{{"source", e.Source}, {"previous", e.Previous}, {"prompt", e.Prompt}} {
		errs = append(errs, checkTemplate(f.tmpl, captured, p.Child(f.name))...)
	}
	return errs
}

// validateEvaluatorFields checks the fields each evaluator type requires.
func validateEvaluatorFields(e *v1alpha1.Evaluate, captured map[string]bool, littleLoops bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch e.Type {
	case v1alpha1.EvalOutputNumeric, v1alpha1.EvalConvergence:
		anyValue := 0
		if littleLoops {
			anyValue = numberAnyValue
		}
		errs = append(errs, checkNumberField(e.Target, numberRequired|anyValue, captured, p.Child("target"))...)
		if !littleLoops || e.Type == v1alpha1.EvalConvergence { // ll-loop reads no other tolerance
			errs = append(errs, checkNumberField(e.Tolerance, numberNonNegative|anyValue, captured, p.Child("tolerance"))...)
		}
	case v1alpha1.EvalOutputJSON:
		if e.Path == "" {
			errs = append(errs, field.Required(p.Child("path"), "output_json needs a path"))
		}
		if e.Target == nil {
			errs = append(errs, field.Required(p.Child("target"), "output_json needs a target"))
		}
	case v1alpha1.EvalOutputContains:
		// No pattern is the empty one, which every output holds: a state
		// that only runs its action and goes on, as in little-loops.
	case v1alpha1.EvalLLMStructured:
		errs = append(errs, checkSchema(e.Schema, p.Child("schema"))...)
	}
	return errs
}

// Rules for number-or-template fields.
const (
	numberRequired = 1 << iota
	numberNonNegative
	// numberAnyValue lets through a value that is neither a number nor a
	// template (a little-loops file's: ll-loop reads it only when the
	// state is evaluated); a negative number is still refused where
	// numberNonNegative.
	numberAnyValue
)

// checkNumberField checks a number-or-template field.
func checkNumberField(j *apiextensionsv1.JSON, rules int, captured map[string]bool, p *field.Path) field.ErrorList {
	if j == nil {
		if rules&numberRequired != 0 {
			return field.ErrorList{field.Required(p, "a number or a template is required")}
		}
		return nil
	}
	v, err := decodeJSONValue(j.Raw)
	if err != nil {
		return field.ErrorList{field.Invalid(p, string(j.Raw), err.Error())}
	}
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		if err != nil {
			return field.ErrorList{field.Invalid(p, t.String(), "must be a number")}
		}
		if rules&numberNonNegative != 0 && f < 0 {
			return field.ErrorList{field.Invalid(p, t.String(), "must not be negative")}
		}
		return nil
	case string:
		if !interpolate.HasReferences(t) && rules&numberAnyValue == 0 {
			if _, ok := pycompat.ParseFloat(t); !ok { // as little-loops reads it, with Python's float()
				return field.ErrorList{field.Invalid(p, t, "must be a number or a ${...} template")}
			}
		}
		return checkTemplate(t, captured, p)
	case nil:
		if rules&numberRequired != 0 {
			return field.ErrorList{field.Required(p, "a number or a template is required")}
		}
		return nil
	}
	if rules&numberAnyValue != 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, string(j.Raw), "must be a number or a ${...} template")}
}

func checkSchema(j *apiextensionsv1.JSON, p *field.Path) field.ErrorList {
	if j == nil {
		return nil
	}
	var s struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(j.Raw, &s); err != nil {
		return field.ErrorList{field.Invalid(p, "", "must be a JSON schema object: "+err.Error())}
	}
	if _, ok := s.Properties["verdict"]; !ok {
		return field.ErrorList{field.Required(p.Child("properties", "verdict"), "the answer schema must have a verdict property")}
	}
	return nil
}

// validateRetries checks maxRetries, onRetryExhausted and retryPolicy.
func validateRetries(st *v1alpha1.State, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if st.MaxRetries != nil && *st.MaxRetries < 1 {
		errs = append(errs, field.Invalid(p.Child("maxRetries"), *st.MaxRetries, "must be at least 1"))
	}
	if st.MaxRetries != nil && st.OnRetryExhausted == "" {
		errs = append(errs, field.Required(p.Child("onRetryExhausted"), "maxRetries needs onRetryExhausted"))
	}
	if st.OnRetryExhausted != "" && st.MaxRetries == nil && st.RetryPolicy == nil {
		errs = append(errs, field.Required(p.Child("maxRetries"), "onRetryExhausted needs maxRetries or retryPolicy"))
	}
	if rp := st.RetryPolicy; rp != nil {
		errs = append(errs, validateRetryPolicy(st, rp, p.Child("retryPolicy"))...)
	}
	if rl := st.RateLimit; rl != nil {
		errs = append(errs, validateRateLimit(rl, p.Child("rateLimit"))...)
	}
	return errs
}

// validateRateLimit checks a state's rateLimit: waits are positive.
func validateRateLimit(rl *v1alpha1.RateLimit, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	// A state without an action (a sub-loop's) never uses it, as in
	// little-loops, whose fragments put it on such states too.
	if rl.MaxRetries != nil && (*rl.MaxRetries < 1 || *rl.MaxRetries > 100) {
		errs = append(errs, field.Invalid(p.Child("maxRetries"), *rl.MaxRetries, "must be between 1 and 100"))
	}
	for _, d := range []struct {
		name string
		v    *metav1.Duration
	}{{"backoff", rl.Backoff}, {"maxWait", rl.MaxWait}} {
		if d.v != nil && d.v.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.Duration.String(), "must be positive"))
		}
	}
	for i, d := range rl.LongWaitLadder {
		if d.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("longWaitLadder").Index(i), d.Duration.String(), "must be positive"))
		}
	}
	return errs
}

func validateRetryPolicy(st *v1alpha1.State, rp *v1alpha1.RetryPolicy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if st.Action == "" {
		errs = append(errs, field.Invalid(p, "retryPolicy", "a state without an action has nothing to retry"))
	}
	if rp.Limit < 1 || rp.Limit > 100 {
		errs = append(errs, field.Invalid(p.Child("limit"), rp.Limit, "must be between 1 and 100"))
	}
	if rp.Factor != nil && (*rp.Factor < 1 || *rp.Factor > 10) {
		errs = append(errs, field.Invalid(p.Child("factor"), *rp.Factor, "must be between 1 and 10"))
	}
	for _, d := range []struct {
		name string
		v    *metav1.Duration
	}{{"backoff", rp.Backoff}, {"maxDelay", rp.MaxDelay}} {
		if d.v != nil && d.v.Duration < 0 {
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.Duration.String(), "must not be negative"))
		}
	}
	return errs
}

// runSets reports whether a run gives the context variable k itself
// (RunContext.Defaults): the loop does not set it.
func runSets(spec *v1alpha1.LoopSpec, k string) bool {
	_, own := spec.Context[k]
	return !own && slices.Contains([]string{"run_dir", "max_steps", "repo_dir", "input_hash"}, k)
}

// ShellWarnings lists the values a loop's shell actions (and its shell
// exit hook) insert without quoting them for the shell: a context value, a
// capture, an environment variable or the run's end message with a space,
// a quote or a ';' in it changes the command.
func ShellWarnings(spec *v1alpha1.LoopSpec) []string {
	var out []string
	unquoted := func(where, action string) {
		refs := interpolate.References(action)
		if len(refs) == 1 && strings.TrimSpace(action) == "${"+refs[0].Namespace+"."+strings.Join(refs[0].Path, ".")+"}" {
			return // the whole command is the value: it is meant as shell syntax
		}
		for _, r := range refs {
			switch {
			case r.Namespace == "context" && len(r.Path) > 0 && runSets(spec, r.Path[0]):
				continue // a value looprun gives (a path it makes, a number)
			case r.Namespace == "context", r.Namespace == "captured", r.Namespace == "env", r.Namespace == "prev":
			case r.Namespace == "loop" && len(r.Path) > 0 && (r.Path[0] == "message" || r.Path[0] == "git"):
				// what the run's end says: an action's (an agent's) words
			default:
				continue
			}
			if !r.Shell {
				ref := r.Namespace + "." + strings.Join(r.Path, ".")
				out = append(out, fmt.Sprintf("%s: ${%s} goes into a shell command unquoted; write ${%s:shell} unless it is meant to be shell syntax", where, ref, ref))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.States)) {
		st := spec.States[name]
		if st.Action == "" || st.IsAgent() || st.ActionType == v1alpha1.ActionMCP {
			continue
		}
		unquoted(fmt.Sprintf("spec.states[%s].action", name), st.Action)
	}
	if h := spec.OnExit; h != nil && h.ActionType != v1alpha1.ActionAgent {
		unquoted("spec.onExit.action", h.Action)
	}
	return out
}
