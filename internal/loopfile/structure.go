package loopfile

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// The warnings little-loops' validator gives about a loop's shape, given
// as it gives them (so that its bundled loops, where it is silent, read
// without a word): a state no route leads to, and a verdict a state may
// give that no route takes where that ends a run by mistake (a judged
// prompt routing only on_yes; a classify route table without _).

// unreachable are the states of refs (each state's route targets) that no
// route leads to from the seeds (the initial state and the other ways in),
// sorted.
func unreachable(seeds []string, refs map[string][]string) []string {
	seen := map[string]bool{}
	queue := slices.Clone(seeds)
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if _, ok := refs[s]; !ok || seen[s] {
			continue
		}
		seen[s] = true
		queue = append(queue, refs[s]...)
	}
	var out []string
	for _, s := range slices.Sorted(maps.Keys(refs)) {
		if !seen[s] {
			out = append(out, s)
		}
	}
	return out
}

const unreachableWarning = "%s: no route leads to this state from the initial state, so it never runs"

// structureWarnings are little-loops' warnings about the shape of a
// loop, from its document once from:, flow: and fragments are resolved.
func (r *reader) structureWarnings(doc, states map[string]any) {
	seeds := []string{str(doc["initial"]), str(doc["on_max_steps"]), str(doc["on_max_iterations"])}
	if c, ok := doc["circuit"].(map[string]any); ok {
		if rf, ok := c["repeated_failure"].(map[string]any); ok && rf["on_repeated_failure"] != v1alpha1.CircuitAbort {
			seeds = append(seeds, str(rf["on_repeated_failure"]))
		}
	}
	refs := make(map[string][]string, len(states))
	for name, v := range states {
		sm, _ := v.(map[string]any)
		refs[name] = stateRefs(sm)
	}
	if _, ok := states[str(doc["initial"])]; ok { // else that is the error to fix first
		for _, name := range unreachable(seeds, refs) {
			r.warn(unreachableWarning, "states."+name)
		}
	}
	if evaluate.Truthy(doc["partial_route_ok"]) {
		return // the loop says its dead ends are meant
	}
	for _, name := range slices.Sorted(maps.Keys(states)) {
		sm, _ := states[name].(map[string]any)
		r.deadEnds("states."+name, sm)
	}
}

// stateRefs are the states a little-loops state names as targets, as
// little-loops counts them: every on_ key (on_success only without on_yes,
// on_failure only without on_no, shorthands beside a route table too),
// next, and the route table's targets.
func stateRefs(sm map[string]any) []string {
	var out []string
	add := func(v any) {
		if s, ok := v.(string); ok && s != v1alpha1.CurrentStateToken {
			out = append(out, s)
		}
	}
	for k, v := range sm {
		switch {
		case k == "on_success" && evaluate.Truthy(sm["on_yes"]), k == "on_failure" && evaluate.Truthy(sm["on_no"]):
		case strings.HasPrefix(k, "on_"), k == "next":
			add(v)
		}
	}
	if route, ok := sm["route"].(map[string]any); ok {
		for k, v := range route {
			if !strings.HasPrefix(k, "_") || k == "_" || k == "_error" {
				add(v)
			}
		}
	}
	return out
}

// deadEnds warns of the verdicts of state sm (at fp) that no route takes
// where little-loops warns of them: a prompt judged by the LLM that routes
// only on_yes, and a classify state whose route table has no _.
func (r *reader) deadEnds(fp string, sm map[string]any) {
	next := sm["next"] != nil
	_, route := sm["route"]
	eval, _ := sm["evaluate"].(map[string]any)
	if eval["type"] == string(v1alpha1.EvalClassify) {
		if table, ok := sm["route"].(map[string]any); ok && table["_"] == nil {
			r.warn("%s: classify gives whatever line the action prints, and the route table has no _ for the lines it does not list: "+
				"the run ends in error on one; add _, or set partial_route_ok: true at the top level if that is meant", fp)
		}
		return
	}
	if next || route || !judged(sm, eval) || !evaluate.Truthy(or(sm["on_yes"], sm["on_success"])) {
		return
	}
	var missing, keys []string
	if !evaluate.Truthy(or(sm["on_no"], sm["on_failure"])) {
		missing, keys = append(missing, "no"), append(keys, "on_no")
	}
	if !evaluate.Truthy(sm["on_partial"]) {
		missing, keys = append(missing, "partial"), append(keys, "on_partial")
	}
	if len(missing) > 0 {
		r.warn("%s: the LLM judge may answer %s, which no route takes: the run ends in error on that answer; "+
			"add %s, a next, or a route table with _, or set partial_route_ok: true at the top level if that is meant",
			fp, strings.Join(missing, " or "), strings.Join(keys, " and "))
	}
}

// judged reports whether the LLM judge gives a little-loops state's
// verdict: an llm_structured evaluator (or little-loops' check_semantic),
// or, without an evaluator, a prompt or slash command (action_type, or an
// action starting with /).
func judged(sm, eval map[string]any) bool {
	if eval != nil {
		return eval["type"] == string(v1alpha1.EvalLLMStructured) || eval["type"] == "check_semantic"
	}
	switch sm["action_type"] {
	case "prompt", "slash_command":
		return true
	case nil:
		a, _ := sm["action"].(string)
		return strings.HasPrefix(a, "/")
	}
	return false
}

// manifestStructureWarnings are the warnings of a Loop manifest's states
// that no route leads to, each with the line of its key.
func manifestStructureWarnings(spec *v1alpha1.LoopSpec, lines map[string]int) []string {
	seeds := []string{spec.Initial, spec.OnMaxIterations, spec.OnMaxPasses}
	if c := spec.Circuit; c != nil && c.RepeatedFailure != nil && c.RepeatedFailure.OnRepeatedFailure != v1alpha1.CircuitAbort {
		seeds = append(seeds, c.RepeatedFailure.OnRepeatedFailure)
	}
	refs := make(map[string][]string, len(spec.States))
	for name, st := range spec.States {
		refs[name] = []string{st.OnSuccess, st.OnFailure, st.OnError, st.Next, st.OnMaintain, st.OnRetryExhausted, st.OnThrottleHard, st.RateLimit.GetOnExhausted()}
		for _, t := range st.Route {
			refs[name] = append(refs[name], string(t))
		}
	}
	if _, ok := spec.States[spec.Initial]; !ok {
		return nil // that is the error to fix first
	}
	var out []string
	for _, name := range unreachable(seeds, refs) {
		fp := "spec.states." + name
		w := fmt.Sprintf(unreachableWarning, fp)
		if l := lines[fp]; l > 0 {
			w = fmt.Sprintf("line %d: %s", l, w)
		}
		out = append(out, w)
	}
	return out
}

// manifestPatternWarnings warn of an output_contains with no pattern in a
// Loop manifest: a little-loops file may mean it (an empty pattern matches
// every output, as in Python's re), but a manifest that leaves pattern out
// has most likely forgotten it, and its state then always succeeds.
func manifestPatternWarnings(spec *v1alpha1.LoopSpec, lines map[string]int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(spec.States)) {
		e := spec.States[name].Evaluate
		if e == nil || e.Type != v1alpha1.EvalOutputContains || e.Pattern != "" {
			continue
		}
		fp := "spec.states." + name + ".evaluate"
		w := fp + ": output_contains has no pattern, and an empty pattern matches every output: the verdict is always success (negated: failure)"
		if l := lines[fp]; l > 0 {
			w = fmt.Sprintf("line %d: %s", l, w)
		}
		out = append(out, w)
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// or is Python's a or b.
func or(a, b any) any {
	if evaluate.Truthy(a) {
		return a
	}
	return b
}
