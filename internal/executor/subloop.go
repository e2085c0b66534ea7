package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/pycompat"
)

// Events of sub-loop states (looprun's own; the child's events are
// forwarded with a depth).
const (
	EventSubLoopStart    = "sub_loop_start"
	EventSubLoopComplete = "sub_loop_complete"
)

// MaxSubLoopDepth bounds how deep sub-loops nest: a deeper child ends its
// parent's state with an error.
const MaxSubLoopDepth = 8

// SubLoop is a child loop to run to its end (a state with loop:).
type SubLoop struct {
	State     string
	Iteration int32
	// Loop is the loop the child runs, its name expanded.
	Loop string
	// Child names the child's run; the same parent, run, state and
	// iteration always give the same name, so a driver that restarts finds
	// (or adopts) the child it had started.
	Child string
	// Passthrough: the child starts from Context under its own context.
	Passthrough bool
	// Context is the parent's context and captured outputs (Passthrough).
	Context map[string]any
	// With binds the child's parameters, templates expanded; nil when
	// the state has no with.
	With map[string]any
	// RunDir is the parent's context.run_dir, which a child bound with
	// with inherits.
	RunDir any
	// Timeout caps the child's timeout (the parent's remaining time, the
	// state's timeout); 0 means no cap.
	Timeout time.Duration
	// Worktree is the git branch whose worktree the child runs in,
	// expanded; "" for none.
	Worktree string
	// Budget caps the child's budget (ClampBudget): what is left of the
	// parent's; nil when the parent has none.
	Budget *v1alpha1.Budget
	// UsageTo is where the usage of the child's agent actions goes
	// (Machine.WithUsageTo): this state of the top run, in its iteration,
	// and its run_dir, at any depth, as little-loops writes it.
	UsageTo UsageTarget
}

// ChildResultOf is the result of a child run that ended.
func ChildResultOf(run *v1alpha1.RunState) *ChildResult {
	return &ChildResult{
		TerminatedBy: run.TerminatedBy, FailureTerminal: IsFailureTerminal(run),
		Error: run.Message, Captured: run.Captured, Usage: childUsage(run),
	}
}

func childUsage(run *v1alpha1.RunState) *v1alpha1.UsageTotals {
	if run.Usage == nil {
		return nil
	}
	u := run.Usage.UsageTotals
	return &u
}

// ChildName names the run of a sub-loop: from the parent's name, the run,
// the state and the iteration, short enough for a Kubernetes name and a
// label value, and valid as a local run's name.
func ChildName(parent, runID, state string, iteration int32) string {
	sum := sha256.Sum256([]byte(parent + "\x00" + runID + "\x00" + state + "\x00" + strconv.Itoa(int(iteration))))
	return dnsWord(parent, 30) + "-" + dnsWord(state, 20) + "-" + hex.EncodeToString(sum[:])[:8]
}

// dnsWord lowercases s and keeps letters, digits and inner '-', at most n.
func dnsWord(s string, n int) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= n {
			break
		}
	}
	w := strings.Trim(b.String(), "-")
	if len(w) > n {
		w = strings.TrimRight(w[:n], "-")
	}
	if w == "" {
		w = "x"
	}
	return w
}

// ChildContext is the context a sub-loop starts with: with binds
// parameters over the child's own context (defaults for those left
// unbound; a required one unbound is an error) and gives it the parent's
// run_dir unless bound; passthrough lays the child's own context over the
// parent's context and captured outputs. A text input gives the child its
// input_hash (InputHash), unless bound.
func ChildContext(sub *SubLoop, own map[string]any, params map[string]v1alpha1.Parameter) (map[string]any, error) {
	out := map[string]any{}
	switch {
	case sub.With != nil:
		maps.Copy(out, own)
		maps.Copy(out, sub.With)
		for _, name := range slices.Sorted(maps.Keys(params)) {
			p := params[name]
			if _, ok := sub.With[name]; ok {
				continue
			}
			if p.Required {
				return nil, fmt.Errorf("loop %q requires parameter %q, which the state's with does not bind", sub.Loop, name)
			}
			if p.Default != nil {
				v, err := decodeJSONValue(p.Default.Raw)
				if err != nil {
					return nil, fmt.Errorf("parameter %q: default: %w", name, err)
				}
				out[name] = v
			}
		}
		for name := range sub.With {
			p, ok := params[name]
			if ok && p.Type == "enum" && !slices.Contains(p.Values, fmt.Sprint(sub.With[name])) {
				return nil, fmt.Errorf("parameter %q is %v; one of %s", name, sub.With[name], strings.Join(p.Values, ", "))
			}
		}
		if _, ok := out["run_dir"]; !ok && sub.RunDir != nil {
			out["run_dir"] = sub.RunDir
		}
	case sub.Passthrough:
		maps.Copy(out, sub.Context)
		maps.Copy(out, own)
	default:
		maps.Copy(out, own)
	}
	if _, ok := out["input_hash"]; !ok {
		if h, ok := InputHash(out["input"]); ok {
			out["input_hash"] = h
		}
	}
	return out, nil
}

// ClampTimeout applies the sub-loop's cap to the child's own timeout.
func ClampTimeout(spec *v1alpha1.LoopSpec, limit time.Duration) {
	if limit <= 0 {
		return
	}
	if spec.Timeout == nil || spec.Timeout.Duration > limit {
		spec.Timeout = &metav1.Duration{Duration: limit}
	}
}

// subLoop prepares the sub-loop of a state: a new one (started) or the one
// in flight. A name or binding that cannot expand goes to onError (a hop)
// or ends the run.
func (t *turn) subLoop(st *v1alpha1.State, start bool) Step {
	run := t.run
	vars := t.vars()
	name, err := interpolate.Expand(st.Loop, vars)
	simulated := t.m.opts.Simulated
	if err != nil && simulated {
		name, err = st.Loop, nil
	}
	var with map[string]any
	if err == nil && len(st.With) > 0 && !simulated {
		with, err = expandWith(st.With, vars)
	}
	var worktree string
	if err == nil && st.Worktree != "" && !simulated {
		worktree, err = interpolate.Expand(st.Worktree, vars)
	}
	if err != nil {
		run.Action = nil
		if !t.actionError(st, fmt.Errorf("state %q: loop: %w", run.CurrentState, err)) {
			return Step{Kind: StepDone}
		}
		return Step{Kind: stepHop}
	}
	iteration := run.Iteration
	if !start {
		iteration = run.Action.Iteration
	}
	sub := &SubLoop{
		State: run.CurrentState, Iteration: iteration, Loop: strings.TrimSpace(name),
		Child:       ChildName(t.m.name, run.RunID, run.CurrentState, iteration),
		Passthrough: st.ContextPassthrough && len(st.With) == 0, With: with, RunDir: t.m.context["run_dir"],
		Timeout: t.subLoopTimeout(st), Worktree: strings.TrimSpace(worktree), Budget: t.subLoopBudget(),
		UsageTo: t.m.usageTarget(run.CurrentState, iteration),
	}
	if sub.Passthrough {
		sub.Context = maps.Clone(t.m.context)
		// As little-loops: a capture gives its output; a sub-loop state's
		// entry is passed whole (${context.STATE.terminated_by}).
		for k, c := range run.Captured {
			if c.Loop != nil {
				sub.Context[k] = interpolate.ChildCaptured(c.Loop)
				continue
			}
			sub.Context[k] = c.Output
		}
	}
	if start {
		ts := metav1.NewTime(t.now)
		run.Action = &v1alpha1.ActionStatus{State: sub.State, Iteration: iteration, Loop: sub.Loop, Child: sub.Child, StartedAt: &ts}
		t.emit(EventSubLoopStart, SubLoopStartEvent{State: sub.State, Loop: sub.Loop, Child: sub.Child}.Data())
	} else {
		run.Action.Loop, run.Action.Child = sub.Loop, sub.Child
	}
	return Step{Kind: StepLoop, Loop: sub}
}

// subLoopTimeout is the cap on a child's timeout: the parent's remaining
// time (at least a second), and the state's own timeout.
func (t *turn) subLoopTimeout(st *v1alpha1.State) time.Duration {
	var limit time.Duration
	if total := t.m.spec.GetTimeout(); total > 0 {
		limit = max(time.Second, (total - Elapsed(t.run, t.now)).Truncate(time.Second))
	}
	if st.Timeout != nil && (limit == 0 || st.Timeout.Duration < limit) {
		limit = st.Timeout.Duration
	}
	return limit
}

// expandWith expands the templates in a with's strings, however deep.
func expandWith(with map[string]apiextensionsJSON, vars *interpolate.Vars) (map[string]any, error) {
	out := make(map[string]any, len(with))
	for _, k := range slices.Sorted(maps.Keys(with)) {
		var v any = nil
		if raw := with[k].Raw; len(raw) > 0 {
			dv, err := decodeJSONValue(raw)
			if err != nil {
				return nil, fmt.Errorf("with.%s: %w", k, err)
			}
			v = dv
		}
		ev, err := expandValue(v, vars)
		if err != nil {
			return nil, fmt.Errorf("with.%s: %w", k, err)
		}
		out[k] = ev
	}
	return out, nil
}

func expandValue(v any, vars *interpolate.Vars) (any, error) {
	switch t := v.(type) {
	case string:
		return interpolate.Expand(t, vars)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			ev, err := expandValue(e, vars)
			if err != nil {
				return nil, err
			}
			out[i] = ev
		}
		return out, nil
	case *pycompat.Dict:
		out := pycompat.NewDict(t.Len())
		for _, k := range t.Keys() {
			e, _ := t.Get(k)
			ev, err := expandValue(e, vars)
			if err != nil {
				return nil, err
			}
			out.Set(k, ev)
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ev, err := expandValue(e, vars)
			if err != nil {
				return nil, err
			}
			out[k] = ev
		}
		return out, nil
	}
	return v, nil
}

// completeSubLoop routes a sub-loop state on how its child ended.
func (t *turn) completeSubLoop(st *v1alpha1.State, res *ActionResult) {
	run := t.run
	loop := ""
	if run.Action != nil {
		loop = run.Action.Loop
	}
	run.Action = nil
	if res.Failure != nil || res.Child == nil {
		msg := "the sub-loop's result was lost"
		if res.Failure != nil {
			msg = res.Failure.Message
		}
		t.emit(EventSubLoopComplete, SubLoopCompleteEvent{State: run.CurrentState, Loop: loop, Lost: true, Error: msg}.Data())
		t.actionError(st, fmt.Errorf("state %q: loop %s: %s", run.CurrentState, loop, msg))
		return
	}
	c := res.Child
	by := TerminationName(c.TerminatedBy, t.m.opts.LittleLoops)
	verdict := v1alpha1.VerdictFailure
	switch c.TerminatedBy {
	case v1alpha1.TerminatedTerminal:
		if !c.FailureTerminal {
			verdict = v1alpha1.VerdictSuccess
		}
	case v1alpha1.TerminatedError:
		verdict = v1alpha1.VerdictError
	case v1alpha1.TerminatedTimeout, v1alpha1.TerminatedMaxIterations:
		verdict = VerdictTimeout
	}
	t.emit(EventSubLoopComplete, SubLoopCompleteEvent{State: run.CurrentState, Loop: loop, TerminatedBy: by, Verdict: verdict,
		FailureTerminal: c.FailureTerminal, Error: c.Error}.Data())
	t.resumeBudget(t.budget()) // a run its paused child held goes on
	if c.Usage != nil {
		run.Usage = addChildUsage(run.Usage, run.CurrentState, *c.Usage)
	}
	details := map[string]any{"terminated_by": by}
	if c.Error != "" {
		details["error"] = c.Error
	}
	run.LastResult = &v1alpha1.EvaluationResult{Verdict: verdict, Details: detailsJSON(details)}
	if !c.Scripted { // as in ll-loop simulate, a child that did not run left no captures
		t.storeChild(st, c, by, verdict)
	}
	if t.m.opts.LittleLoops {
		t.routeTo(st, subLoopTarget(st, verdict), verdict, noRoute)
		return
	}
	t.routeTo(st, subLoopTarget(st, verdict), verdict, "no route for the sub-loop's ending %s (verdict %q)", by, verdict)
}

// childVerdictName spells a sub-loop state's verdict as its capture keeps
// it: in a little-loops file yes, no or error, a child stopped by a limit
// being no.
func (t *turn) childVerdictName(v string) string {
	if t.m.opts.LittleLoops && v == VerdictTimeout {
		return "no"
	}
	return t.verdictName(v)
}

// VerdictTimeout is the verdict of a sub-loop state whose child a limit
// cut off; route "timeout" (little-loops: on_timeout) takes it.
const VerdictTimeout = v1alpha1.VerdictTimeout

// subLoopTarget is where a sub-loop's verdict goes: its own route, and
// for anything but success, onFailure when it has none.
func subLoopTarget(st *v1alpha1.State, verdict string) string {
	lookup := func(v string) string {
		if target, ok := st.Route[v]; ok {
			return string(target)
		}
		switch v {
		case v1alpha1.VerdictSuccess:
			return st.OnSuccess
		case v1alpha1.VerdictFailure:
			return st.OnFailure
		case v1alpha1.VerdictError:
			return st.OnError
		}
		return ""
	}
	if target := lookup(verdict); target != "" || verdict == v1alpha1.VerdictSuccess {
		return target
	}
	return lookup(v1alpha1.VerdictFailure)
}

// storeChild keeps how the child ended under the state's name (and its
// captures, with passthrough or a with that binds something: an empty
// with is none), and its event stream and verdict under the state's
// capture (in place of whatever that name held).
func (t *turn) storeChild(st *v1alpha1.State, c *ChildResult, by, verdict string) {
	run := t.run
	if run.Captured == nil {
		run.Captured = map[string]v1alpha1.CapturedResult{}
	}
	sl := &v1alpha1.SubLoopResult{TerminatedBy: by, FailureTerminal: c.FailureTerminal}
	if c.TerminatedBy == v1alpha1.TerminatedError {
		// As in little-loops: only a child that ended in error leaves one.
		sl.Error = Tail(c.Error, t.m.opts.MaxCaptureBytes)
	}
	if st.ContextPassthrough || len(st.With) > 0 {
		sl.Captured = childCaptures(c.Captured, t.m.opts.MaxCaptureBytes)
	}
	run.Captured[run.CurrentState] = v1alpha1.CapturedResult{Loop: sl}
	switch {
	case st.Capture == "":
	case st.Capture == run.CurrentState && len(sl.Captured) > 0:
		// Captured under the state's own name, the event stream is
		// written over by the child's captures, as little-loops merges
		// them after it: the verdict alone stays beside them.
		run.Captured[st.Capture] = v1alpha1.CapturedResult{Verdict: t.childVerdictName(verdict), Loop: sl}
	default:
		out := Tail(c.Events, t.m.opts.MaxCaptureBytes)
		var own *v1alpha1.SubLoopResult
		if st.Capture == run.CurrentState {
			own = sl // beside how the child ended
		}
		run.Captured[st.Capture] = v1alpha1.CapturedResult{Output: out, Verdict: t.childVerdictName(verdict), Loop: own, EventStream: true}
		if len(out) < len(c.Events) {
			t.emit(EventCaptureTruncated, CaptureTruncatedEvent{Capture: st.Capture, KeptBytes: len(out), Bound: "capture"}.Data())
		}
	}
	t.keepCapturesWithinBudget()
}

// childCaptures are a child's captures as its parent keeps them (nil for
// none): each of its sub-loop states with how its own child ended, and
// that grandchild's captures under the state's name and a dot, however
// deep, as little-loops nests the child's captures in its parent's.
func childCaptures(captured map[string]v1alpha1.CapturedResult, limit int) map[string]v1alpha1.ChildCapture {
	if len(captured) == 0 {
		return nil
	}
	out := make(map[string]v1alpha1.ChildCapture, len(captured))
	for k, c := range captured {
		cc := v1alpha1.ChildCapture{Output: Tail(c.Output, limit), Stderr: Tail(c.Stderr, limit), ExitCode: c.ExitCode, DurationMs: c.DurationMs,
			Verdict: c.Verdict, FailureType: c.FailureType, TimeoutKind: c.TimeoutKind}
		if l := c.Loop; l != nil {
			cc.TerminatedBy, cc.FailureTerminal, cc.Error = l.TerminatedBy, l.FailureTerminal, Tail(l.Error, limit)
			for gk, gc := range l.Captured {
				gc.Output, gc.Stderr, gc.Error = Tail(gc.Output, limit), Tail(gc.Stderr, limit), Tail(gc.Error, limit)
				out[k+"."+gk] = gc
			}
		}
		out[k] = cc
	}
	return out
}

// Forward numbers a child's events as the parent's, each marked with its
// depth below the parent (a deeper child's events keep theirs).
func (m *Machine) Forward(run *v1alpha1.RunState, evs []Event, depth int) []Event {
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		data := make(map[string]any, len(e.Data)+1)
		maps.Copy(data, e.Data)
		if _, ok := data["depth"]; !ok {
			data["depth"] = depth
		}
		run.LastSeq++
		out = append(out, Event{Seq: run.LastSeq, Type: e.Type, Time: e.Time, Data: data})
	}
	return out
}

// EventLines writes events as JSON lines, as a capture of a sub-loop
// state holds them.
func EventLines(evs []Event) string {
	var b strings.Builder
	for i, e := range evs {
		line, err := json.Marshal(e)
		if err != nil {
			continue
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.Write(line)
	}
	return b.String()
}
