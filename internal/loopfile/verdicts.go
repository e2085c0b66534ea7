package loopfile

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// A route for a verdict the state never gives is never taken: on_success
// misspelt routes a verdict no evaluator gives. little-loops accepts such
// routes without a word; looprun warns, naming the state and the key and
// the key nearest to it.

// verdicts are the verdicts a state can give.
type verdicts struct {
	// by says what gives them ("exit_code", "a sub-loop").
	by string
	// gives are the verdicts, canonical (success, not yes), in the order
	// they are told.
	gives []string
	// words are gives as a little-loops file writes them, where that is
	// not yes for success and no for failure: an evaluator that says the
	// word success itself (mcp_result, a judge's own answers) gives a
	// verdict of its own there, which on_yes does not take. nil: gives so
	// written.
	words []string
	// open: any verdict may come (classify; a judge's own schema with no
	// enum of verdicts).
	open bool
}

var (
	yesNoError = []string{v1alpha1.VerdictSuccess, v1alpha1.VerdictFailure, v1alpha1.VerdictError}
	// judgeAnswer is what the LLM judge's default schema gives, and error.
	judgeAnswer = append(canonical(evaluate.DefaultVerdicts), v1alpha1.VerdictError)
	mcpResult   = []string{v1alpha1.VerdictSuccess, v1alpha1.VerdictToolError, v1alpha1.VerdictNotFound, v1alpha1.VerdictTimeout, v1alpha1.VerdictError}
)

// mcpVerdicts are what mcp_result gives: its success is the word success.
func mcpVerdicts(by string) verdicts { return verdicts{by: by, gives: mcpResult, words: mcpResult} }

// verdictsOf are the verdicts st can give, as the executor decides them.
func verdictsOf(st *v1alpha1.State) verdicts {
	switch {
	case st.Loop != "":
		return verdicts{by: "a sub-loop", gives: []string{v1alpha1.VerdictSuccess, v1alpha1.VerdictFailure, v1alpha1.VerdictError, v1alpha1.VerdictTimeout}}
	case st.Approval != nil:
		return verdicts{by: "an approval", gives: []string{v1alpha1.VerdictApproved, v1alpha1.VerdictRejected, v1alpha1.VerdictTimeout, v1alpha1.VerdictError}}
	case st.Evaluate != nil:
		return evaluatorVerdicts(st.Evaluate)
	case st.IsAgent():
		return verdicts{by: "the LLM judge (a prompt's default evaluator)", gives: judgeAnswer}
	case st.ActionType == v1alpha1.ActionMCP:
		return mcpVerdicts("mcp_result (an MCP tool's default evaluator)")
	case st.Learning != nil:
		return verdicts{by: "a learning state", gives: []string{v1alpha1.VerdictSuccess, v1alpha1.VerdictFailure, "blocked", v1alpha1.VerdictError}}
	case st.Action != "":
		return verdicts{by: "exit_code (a shell action's default evaluator)", gives: yesNoError}
	}
	return verdicts{by: "a state without an action or an evaluator", gives: []string{v1alpha1.VerdictSuccess}}
}

func evaluatorVerdicts(e *v1alpha1.Evaluate) verdicts {
	by := string(e.Type)
	switch e.Type {
	case v1alpha1.EvalExitCode, v1alpha1.EvalOutputNumeric, v1alpha1.EvalOutputJSON, v1alpha1.EvalOutputContains,
		v1alpha1.EvalHarborScorer, v1alpha1.EvalDiffStall, v1alpha1.EvalScoreStall, v1alpha1.EvalOpenQuestionStall,
		v1alpha1.EvalActionStall:
		return verdicts{by: by, gives: yesNoError}
	case v1alpha1.EvalConvergence:
		return verdicts{by: by, gives: []string{v1alpha1.VerdictTarget, v1alpha1.VerdictProgress, v1alpha1.VerdictStall, v1alpha1.VerdictError}}
	case v1alpha1.EvalMCPResult:
		return mcpVerdicts(by)
	case v1alpha1.EvalLLMStructured:
		answers := evaluate.DefaultVerdicts
		if e.Schema != nil {
			by += " with its own schema"
			enum, ok := schemaVerdicts(e.Schema.Raw)
			if !ok {
				return verdicts{by: by, open: true}
			}
			answers = enum
		}
		words := slices.Clone(answers)
		if e.UncertainSuffix {
			for _, a := range answers {
				words = append(words, a+"_uncertain")
			}
		}
		words = append(words, v1alpha1.VerdictError)
		return verdicts{by: by, gives: canonical(words), words: words}
	}
	return verdicts{by: by, open: true} // classify: any line of the output
}

// canonical are answers as verdicts (yes is success, no failure).
func canonical(answers []string) []string {
	out := make([]string, 0, len(answers))
	for _, a := range answers {
		out = append(out, v1alpha1.CanonicalVerdict(a))
	}
	return out
}

// schemaVerdicts are the answers a judge's own schema allows: the enum of
// its verdict property; ok is false when it has none.
func schemaVerdicts(raw []byte) ([]string, bool) {
	var s struct {
		Properties struct {
			Verdict struct {
				Enum []any `json:"enum"`
			} `json:"verdict"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Properties.Verdict.Enum) == 0 {
		return nil, false
	}
	out := make([]string, 0, len(s.Properties.Verdict.Enum))
	for _, v := range s.Properties.Verdict.Enum {
		str, ok := v.(string)
		if !ok {
			return nil, false
		}
		out = append(out, str)
	}
	return out, true
}

// give reports whether verdict v may come (error always may: a failed
// action is an error whatever judges it); in a little-loops file v is a
// word as written there (success is not yes).
func (vs verdicts) give(v string, littleLoops bool) bool {
	if littleLoops {
		return vs.open || v == v1alpha1.VerdictError || slices.Contains(vs.written(), v)
	}
	v = v1alpha1.CanonicalVerdict(v)
	return vs.open || v == v1alpha1.VerdictError || slices.Contains(vs.gives, v)
}

// written are the verdicts as a little-loops file writes them.
func (vs verdicts) written() []string {
	if vs.words != nil {
		return vs.words
	}
	out := make([]string, 0, len(vs.gives))
	for _, v := range vs.gives {
		out = append(out, v1alpha1.LittleLoopsVerdict(v))
	}
	return out
}

// told is the verdicts as a sentence: "yes, no or error".
func (vs verdicts) told(littleLoops bool) string {
	all := vs.gives
	if littleLoops {
		all = vs.written()
	}
	words := make([]string, 0, len(all))
	for _, w := range all {
		if !slices.Contains(words, w) {
			words = append(words, w)
		}
	}
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// routeKeys are the keys that may route the verdicts vs gives: in a route
// table (prefix "") or as shorthands (prefix "on_"); in a little-loops
// file as written there (on_success for yes too).
func (vs verdicts) routeKeys(prefix string, littleLoops bool) []string {
	keys := map[string]bool{}
	all := vs.gives
	if littleLoops {
		all = vs.written()
	}
	for _, v := range all {
		keys[prefix+v] = true
		if alias := map[string]string{"yes": "success", "no": "failure"}[v]; littleLoops && prefix != "" && alias != "" {
			keys[prefix+alias] = true
		}
	}
	keys[prefix+v1alpha1.VerdictError] = true
	if prefix == "" {
		keys["_"], keys["_error"] = true, true
	}
	return slices.Sorted(maps.Keys(keys))
}

// neverTaken is the warning for the route key (at path fp) of a state
// that never gives verdict v, or "". others are keys the key may have
// been meant as besides the verdicts' own.
func neverTaken(vs verdicts, fp, key, v string, littleLoops bool, others ...string) string {
	if vs.give(v, littleLoops) {
		return ""
	}
	prefix := ""
	if strings.HasPrefix(key, "on_") {
		prefix = "on_"
	}
	hint := didYouMean(key, append(vs.routeKeys(prefix, littleLoops), others...))
	if hint == "" && prefix == "" && (key == "default" || key == "_default" || key == "*") {
		hint = " (did you mean _, the route of any other verdict?)"
	}
	word := cmp.Or(v, `""`) // an empty route key
	if alias := key[len(prefix):]; prefix != "" && alias != v {
		word = fmt.Sprintf("%s (%s is on_%s)", v, key, v) // on_success is on_yes
	}
	return fmt.Sprintf("%s: %s never gives the verdict %s, so this route is never taken; it gives %s%s",
		fp, vs.by, word, vs.told(littleLoops), hint)
}

// stateRouteKeys are the state keys that start with on_ and route no
// verdict.
var stateRouteKeys = []string{"on_maintain", "on_retry_exhausted", "on_throttle_hard", "on_rate_limit_exhausted"}

// checkRouteKeys warns of the routes of state m (read into st) that are
// never taken: route table keys and on_VERDICT shorthands for verdicts the
// state never gives.
func (r *reader) checkRouteKeys(name string, m map[string]any, st *v1alpha1.State) {
	if st.Terminal || st.Next != "" {
		return // no verdict routes it
	}
	vs := verdictsOf(st)
	if vs.open {
		return
	}
	fp := "states." + name
	if route, ok := m["route"].(map[string]any); ok {
		for _, k := range slices.Sorted(maps.Keys(route)) {
			if k == "_" || k == "_error" {
				continue
			}
			if w := neverTaken(vs, fp+".route."+k, k, k, true); w != "" {
				r.warn("%s", w)
			}
		}
		return // the shorthands are ignored beside a route table
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !strings.HasPrefix(k, "on_") || k == "on_error" || slices.Contains(stateRouteKeys, k) {
			continue
		}
		if _, ok := m[k].(string); !ok {
			continue
		}
		v := strings.TrimPrefix(k, "on_")
		switch k { // on_yes's and on_no's other names
		case "on_success":
			v = "yes"
		case "on_failure":
			v = "no"
		}
		if w := neverTaken(vs, fp+"."+k, k, v, true, stateRouteKeys...); w != "" {
			r.warn("%s", w)
		}
	}
}

// manifestRouteWarnings are checkRouteKeys' warnings for a Loop manifest's
// route tables, each with the line of its key.
func manifestRouteWarnings(spec *v1alpha1.LoopSpec, lines map[string]int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(spec.States)) {
		st := spec.States[name]
		if st.Terminal || st.Next != "" {
			continue
		}
		vs := verdictsOf(&st)
		for _, k := range slices.Sorted(maps.Keys(st.Route)) {
			if k == "_" || k == "_error" {
				continue
			}
			fp := "spec.states." + name + ".route." + k
			if w := neverTaken(vs, fp, k, k, false); w != "" {
				if l := lines[fp]; l > 0 {
					w = fmt.Sprintf("line %d: %s", l, w)
				}
				out = append(out, w)
			}
		}
	}
	return out
}
