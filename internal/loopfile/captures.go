package loopfile

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// The capture of a sub-loop state (its capture:) holds the child's event
// stream. little-loops' validator refuses a file whose action or evaluator
// source reads anything of it but output and exit_code, unguarded (no
// :default=, no ?): ${captured.EVENTS.verdict} and
// ${captured.EVENTS.fix.output} are refused, the child's captures being
// under the state's own name. capture_reachability_ok: true at the top
// level silences the rule, as it silences little-loops'.

// eventStreamFields are what a reference may read of a sub-loop state's
// capture.
var eventStreamFields = []string{"output", "exit_code"}

// subLoopCaptureRefs refuses the references of a little-loops file to
// what a sub-loop state's capture does not hold, as little-loops does.
func (r *reader) subLoopCaptureRefs(doc map[string]any, states map[string]v1alpha1.State) {
	if evaluate.Truthy(doc["capture_reachability_ok"]) {
		return
	}
	// The sub-loop states whose capture each name is.
	delegating := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(states)) {
		if st := states[name]; st.Loop != "" && st.Capture != "" {
			delegating[st.Capture] = append(delegating[st.Capture], name)
		}
	}
	if len(delegating) == 0 {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(states)) {
		st := states[name]
		if st.Loop != "" {
			continue // its templates are the child's business
		}
		fields := []struct{ key, tmpl string }{{"action", st.Action}}
		if st.Evaluate != nil {
			fields = append(fields, struct{ key, tmpl string }{"evaluate.source", st.Evaluate.Source})
		}
		for _, f := range fields {
			for _, ref := range interpolate.References(f.tmpl) {
				r.eventStreamRef(fmt.Sprintf("states.%s.%s", name, f.key), ref, states, delegating)
			}
		}
	}
}

// eventStreamRef refuses ref (at fp) when it reads a sub-loop state's
// capture for something other than its output or exit code.
func (r *reader) eventStreamRef(fp string, ref interpolate.Ref, states map[string]v1alpha1.State, delegating map[string][]string) {
	if ref.Namespace != "captured" || ref.Guarded || len(ref.Path) < 2 {
		return
	}
	capture, rest := ref.Path[0], ref.Path[1:]
	if st, ok := states[capture]; ok && st.Loop != "" {
		return // a sub-loop state's own name: the child's captures are there
	}
	by := delegating[capture]
	if len(by) == 0 || len(rest) == 1 && slices.Contains(eventStreamFields, rest[0]) {
		return
	}
	r.fail("%s: ${captured.%s.%s}: %s is the capture of sub-loop state %s, which holds only the child's event stream (output, exit_code), "+
		"as little-loops reads it: the child's own captures are under the state's name (${captured.%s.NAME.output}), how it ended is ${captured.%s.terminated_by}",
		fp, capture, strings.Join(rest, "."), capture, strings.Join(by, ", "), by[0], by[0])
}
