package executor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// Complete finishes the current state with the result of its action (nil for
// a state without one): it evaluates, stores the capture, routes, and
// enforces the edge limit, and returns StepNext. When the verdict is the LLM
// judge's and res has no Judgement yet, it returns StepJudge with the
// question: the driver asks it and calls Complete again with the same
// result, its Judgement set (for a state without an action, a result
// holding only the Judgement). Until then the state waits (a state without
// an action is marked so: Plan returns StepEvaluate again). The run's
// clone, push and exit hook are completed here too.
func (m *Machine) Complete(run *v1alpha1.RunState, res *ActionResult, now time.Time) (Step, []Event) {
	t := m.begin(run, now)
	step := t.complete(res)
	if len(t.events) == 0 && step.Kind != StepNext {
		return step, nil
	}
	return step, t.done()
}

func (t *turn) complete(res *ActionResult) Step {
	run := t.run
	next := Step{Kind: StepNext}
	if t.completeLifecycle(res) {
		return next
	}
	st, res, ok := t.completing(checkUsage(t.asText(res)))
	if ok && st.Approval != nil {
		return t.completeApproval(&st, res)
	}
	if !ok || t.completeSpecial(&st, res) {
		return next
	}
	if t.answer == nil && !t.skipsEvaluation(&st, res) {
		if q := t.question(&st, res); q != nil {
			t.awaitVerdict()
			return Step{Kind: StepJudge, Judge: q}
		}
		if q := t.search(&st, res); q != nil {
			t.awaitVerdict()
			return Step{Kind: StepSearch, Search: q}
		}
	}
	run.Action = nil
	if t.recordAction(&st, res) {
		return next
	}
	if st.Next != "" {
		if why, over := t.overCeiling(&st); over {
			t.capture(&st, res, t.verdictName(v1alpha1.VerdictError))
			t.setPrev(&st, res)
			t.routeTo(&st, st.OnError, v1alpha1.VerdictError, "%s (no onError)", why)
			t.stopAfterRoute()
			return next
		}
		t.completeNext(&st, res)
		t.stopAfterRoute()
		return next
	}
	progress := takeProgress(res)
	result, typ, evaluated := t.evaluate(&st, res)
	if t.endBroken(&st, res, result) {
		return next
	}
	result = capVerdict(result)
	if evaluated {
		t.recordVerdict(typ, result)
	}
	if why, over := t.overCeiling(&st); over {
		result = evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": why}}
	}
	t.capture(&st, res, t.verdictWord(result))
	t.setPrev(&st, res)
	if t.signalEnds() {
		return next
	}
	if !t.transient(&st, res, result.Verdict) && !t.circuitTripped(res, result.Verdict, progress) {
		t.routeVerdict(&st, res, result)
	}
	t.stopAfterRoute()
	return next
}

// endBroken ends the run of a little-loops file whose evaluator could not
// judge (result.Broken), as ll-loop's evaluator raises and its run ends in
// error there, unjudged; the capture, made before, is kept. It reports
// whether it did.
func (t *turn) endBroken(st *v1alpha1.State, res *ActionResult, result evaluate.Result) bool {
	if !result.Broken || !t.m.opts.LittleLoops || st.Evaluate == nil {
		return false
	}
	t.capture(st, res, "")
	t.finish(v1alpha1.TerminatedError, evaluate.BrokenReason(st.Evaluate))
	return true
}

// awaitVerdict marks a state without an action as waiting for its verdict
// (the judge's, a search's), so that Plan returns the same step again
// instead of entering the state once more. A state with an action waits
// as its action in flight.
func (t *turn) awaitVerdict() {
	run := t.run
	if run.Action == nil {
		run.Action = &v1alpha1.ActionStatus{State: run.CurrentState, Iteration: run.Iteration, Verdict: true}
	}
}

// recordAction records the result of a state's action (its event, its
// signal, its message) and reports whether the turn ends there: a signal
// ends the try, the action runs again, or the throttle stops the loop.
func (t *turn) recordAction(st *v1alpha1.State, res *ActionResult) bool {
	if res == nil {
		return false
	}
	if st.Action != "" {
		t.actionComplete(st, res)
		t.noteSignal(st, res)
		if !t.appendMessage(st, res) || t.signalEndsTry(st, res) {
			return true
		}
		if t.retry(st, res) || t.throttled(st) {
			t.stopAfterRoute() // LOOP_STOP: stops a retry too
			return true
		}
	}
	if st.Learning != nil {
		// The agent a learning gate runs may print a signal, as in
		// little-loops; it is heeded once the gate's verdict is recorded.
		t.noteSignal(st, res)
	}
	return false
}

// capVerdict turns a verdict longer than MaxVerdictBytes into an error.
func capVerdict(r evaluate.Result) evaluate.Result {
	if len(r.Verdict) <= MaxVerdictBytes {
		return r
	}
	return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{
		"error":        fmt.Sprintf("the verdict is %d bytes; at most %d", len(r.Verdict), MaxVerdictBytes),
		"verdict_tail": Tail(r.Verdict, 64),
	}}
}

// completing is the state to complete and the result of its action (nil
// for a state without one; the judge's answer is taken aside). ok is false
// when there is nothing to complete: the run ended, or ends now.
func (t *turn) completing(res *ActionResult) (v1alpha1.State, *ActionResult, bool) {
	run := t.run
	if run.Phase.IsFinished() {
		return v1alpha1.State{}, nil, false
	}
	st, ok := t.m.spec.States[run.CurrentState]
	if !ok {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q does not exist", run.CurrentState))
		return st, nil, false
	}
	if res != nil {
		t.answer, t.decided = res.Judgement, res.Verdict
		if st.Action == "" && st.Loop == "" && st.Learning == nil && (res.Judgement != nil || res.Verdict != nil) {
			res = nil // only the judge's answer, or a search's verdict
		}
	}
	if (st.Action != "" || st.Loop != "") && res == nil {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q: the action's result was lost", run.CurrentState))
		return st, nil, false
	}
	return st, res, true
}

// recordVerdict emits the evaluate event and keeps the result as the last.
func (t *turn) recordVerdict(typ string, result evaluate.Result) {
	ev := EvaluateEvent{Type: typ, Verdict: result.Verdict, Details: result.Details}
	if u := result.Usage; u != nil {
		ev.Usage = t.recordUsage(*u) // the judge's call
	}
	t.emit(EventEvaluate, ev.Data())
	t.run.LastResult = &v1alpha1.EvaluationResult{Verdict: result.Verdict, Details: detailsJSON(result.Details)}
}

// skipsEvaluation reports whether completing the state with res routes
// without judging the result: an unconditional next, a retry, or the
// throttle ending the state.
func (t *turn) skipsEvaluation(st *v1alpha1.State, res *ActionResult) bool {
	if st.Next != "" {
		return true
	}
	if res == nil || st.Action == "" {
		return false
	}
	if _, transient := transientReason(st.RetryPolicy, res); transient {
		return true
	}
	return t.throttleEnds(st)
}

// routeVerdict takes the state's route for the verdict: an error of an
// exit code the state does not retry escalates; no route ends the run, or
// restarts a maintain loop.
func (t *turn) routeVerdict(st *v1alpha1.State, res *ActionResult, result evaluate.Result) {
	verdict := result.Verdict
	var target string // "" for none
	if t.m.opts.LittleLoops {
		target = LittleLoopsRoute(st, t.verdictWord(result))
	} else {
		target, _ = Route(st, verdict)
	}
	if held, ok := t.abstentionTarget(st, verdict); ok {
		target = held
	}
	if verdict == v1alpha1.VerdictError && res != nil && nonRetryable(st, res) && (st.OnRetryExhausted != "" || st.OnError != "") {
		target = errorTarget(st, res)
	}
	if t.m.opts.LittleLoops {
		t.routeTo(st, target, verdict, noRoute)
		return
	}
	t.routeTo(st, target, verdict, "no route for verdict %q", verdict)
}

// noRoute is how ll-loop words the end of a run whose state has no route
// for its verdict (the verdict is in the evaluate event and the state
// file's last_result); a run of a little-loops file ends so too.
const noRoute = "No valid transition"

// EndWhy is why run ended as people read it: its message, and, for
// ll-loop's words for a verdict no route takes (the state file keeps
// them as they are), the state and verdict.
func EndWhy(run *v1alpha1.RunState) string {
	verdict := ""
	if run.LastResult != nil {
		verdict = run.LastResult.Verdict
	}
	return EndWhyOf(run.Message, run.CurrentState, verdict)
}

// EndWhyOf is EndWhy of a run that ended in state with message, its last
// verdict that.
func EndWhyOf(message, state, verdict string) string {
	if message == noRoute && verdict != "" {
		return fmt.Sprintf("%s: state %q has no route for verdict %q", noRoute, state, verdict)
	}
	return message
}

// verdictWord is the verdict r gives as the loop's file names it: in a
// little-loops file yes and no, or success and failure when the
// evaluator said those very words (Result.Word).
func (t *turn) verdictWord(r evaluate.Result) string {
	if t.m.opts.LittleLoops && r.Word != "" {
		return r.Word
	}
	return t.verdictName(r.Verdict)
}

// routeTo moves the run to target on verdict. With no target ("") a
// maintain loop restarts at the state's onMaintain or initial, and any
// other run ends in error: "state S: " and why (a format and its args),
// or for a verdict a little-loops file does not route, ll-loop's words
// (see noRoute).
func (t *turn) routeTo(st *v1alpha1.State, target, verdict, why string, args ...any) {
	if target == "" {
		if !t.m.spec.Maintain && t.stopping() {
			t.finish(v1alpha1.TerminatedInterrupted, "") // LOOP_STOP: wins over a missing route
			return
		}
		if !t.m.spec.Maintain {
			msg := fmt.Sprintf("state %q: ", t.run.CurrentState) + fmt.Sprintf(why, args...)
			if why == noRoute {
				msg = why
			}
			t.finish(v1alpha1.TerminatedError, msg)
			return
		}
		target = cmp.Or(st.OnMaintain, t.m.spec.Initial)
	}
	t.transition(target, verdict)
}

// nonRetryable reports whether the action's exit code is not among the
// state's retryableExitCodes (when it lists any).
func nonRetryable(st *v1alpha1.State, res *ActionResult) bool {
	return st.RetryableExitCodes != nil && !slices.Contains(st.RetryableExitCodes, exitCode32(res.ExitCode))
}

// errorTarget is where a failed action goes: onError, or for an exit code
// the state does not retry, onRetryExhausted first.
func errorTarget(st *v1alpha1.State, res *ActionResult) string {
	if nonRetryable(st, res) && st.OnRetryExhausted != "" {
		return st.OnRetryExhausted
	}
	return st.OnError
}

// completeSpecial completes the states that neither evaluate nor route as
// others do: a sub-loop state, and a terminal summary state, whose action
// ran once before the run ends by its cap. It reports whether it did.
func (t *turn) completeSpecial(st *v1alpha1.State, res *ActionResult) bool {
	run := t.run
	switch {
	case run.Action != nil && run.Action.Flush:
		// The action flushed before the timeout ends the run (recorded, then
		// the end), or before the step cap's summary state (recorded; the
		// next plan goes to the summary).
		run.Action = nil
		if res != nil {
			t.actionComplete(st, res)
		}
		if limit := t.m.spec.GetTimeout(); limit > 0 && Elapsed(run, t.now) > limit {
			t.finish(v1alpha1.TerminatedTimeout, fmt.Sprintf("loop timeout %s exceeded", limit))
		}
	case st.Loop != "":
		t.completeSubLoop(st, res)
	case st.Terminal && run.CapSummary != "":
		run.Action = nil
		if res != nil {
			t.actionComplete(st, res)
			t.capture(st, res, "")
			t.setPrev(st, res)
		}
		t.finish(run.CapSummary, "")
	default:
		return false
	}
	return true
}

// actionComplete records the action's result as an event.
func (t *turn) actionComplete(st *v1alpha1.State, res *ActionResult) {
	ev := ActionCompleteEvent{
		ExitCode:      res.ExitCode,
		DurationMs:    res.Duration.Milliseconds(),
		OutputPreview: preview(res.Output, min(previewBytes, t.m.opts.MaxCaptureBytes)),
		StderrPreview: preview(res.Stderr, min(previewBytes, t.m.opts.MaxCaptureBytes)),
		IsPrompt:      st.IsAgent(),
		Failure:       res.Failure,
	}
	if st.IsAgent() {
		ev.Effort = cmp.Or(st.Effort, agentDefault(t.m.spec).Effort)
	}
	t.usedBy(&ev, res)
	t.emit(EventActionComplete, ev.Data())
}

// usedBy puts what the action used into its action_complete event and the
// run's usage: what the gateway metered, else what the agent reported.
func (t *turn) usedBy(ev *ActionCompleteEvent, res *ActionResult) {
	switch {
	case res.Metered != nil:
		ev.Model = res.Metered.Usage.Model
		ev.Usage, ev.Reported = t.recordMetered(*res.Metered, res.Usage)
		ev.Metered = true
	case res.Usage != nil:
		t.reported(ev, *res.Usage)
	}
}

// reported records usage an agent reported as the event's: an agent that
// named no model is "unknown", as in usage.jsonl.
func (t *turn) reported(ev *ActionCompleteEvent, u agentstream.Usage) {
	ev.Model, ev.Usage = cmp.Or(u.Model, agentstream.UnknownModel), t.recordUsage(u)
}

// setPrev makes the action's result ${prev.*}: once the state is judged
// (its evaluator's ${prev.*} is the state before's), before it routes, as
// little-loops. ${prev.output} is the output as printed, trailing newlines
// and all (a capture drops them).
func (t *turn) setPrev(st *v1alpha1.State, res *ActionResult) {
	if res == nil || st.Action == "" {
		return
	}
	t.run.PrevResult = &v1alpha1.PrevResult{
		Output:      Tail(res.Output, t.m.opts.MaxCaptureBytes),
		ExitCode:    exitCode32(res.ExitCode),
		State:       t.run.CurrentState,
		TimeoutKind: timeoutKind(res),
	}
}

// completeNext routes a state with an unconditional next: nothing is
// evaluated, but a failed action goes to onError when the state has one.
// In a little-loops file a failure of a known cause (a rate limit, an API
// error) is not tried again in place either: ll-loop reads causes only of
// states it evaluates.
func (t *turn) completeNext(st *v1alpha1.State, res *ActionResult) {
	t.capture(st, res, "")
	t.setPrev(st, res)
	if t.signalEnds() || !t.m.opts.LittleLoops && t.transient(st, res, "") {
		return
	}
	if res != nil && res.Failure != nil {
		if st.OnError != "" {
			t.transition(st.OnError, "")
			return
		}
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q: %s: %s", t.run.CurrentState, res.Failure.Reason, res.Failure.Message))
		return
	}
	if res != nil && res.ExitCode != 0 && st.OnError != "" {
		t.transition(errorTarget(st, res), "")
		return
	}
	if res != nil && res.ExitCode < 0 {
		t.finish(v1alpha1.TerminatedSystemSignal, fmt.Sprintf("state %q: action killed by signal %d", t.run.CurrentState, -res.ExitCode))
		return
	}
	t.transition(st.Next, "")
}

// evaluate judges the state's result. evaluated is false for a state with
// neither action nor evaluator, which simply succeeds.
func (t *turn) evaluate(st *v1alpha1.State, res *ActionResult) (result evaluate.Result, typ string, evaluated bool) {
	cfg := st.Evaluate
	typ = "default"
	if cfg != nil {
		typ = string(cfg.Type)
	}
	if res != nil && res.Failure != nil {
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{
			"reason": res.Failure.Reason, "error": res.Failure.Message,
		}}, typ, true
	}
	if t.decided != nil {
		return *t.decided, typ, true
	}
	if cfg != nil && isStall(cfg.Type) {
		return t.evaluateStall(cfg, res), typ, true
	}
	if cfg == nil && res == nil {
		return evaluate.Result{Verdict: v1alpha1.VerdictSuccess}, "", false
	}
	in := t.judged(st, res)
	switch {
	case judgedByLLM(st):
		return t.llmVerdict(in), typ, true
	case cfg == nil && st.Learning != nil:
		return t.learningVerdict(st, res), typ, true
	case cfg == nil:
		return t.defaultVerdict(st, in.Output, in.ExitCode), typ, true
	}
	return evaluate.Deterministic(cfg, in), typ, true
}

// judged is what the state's evaluator reads: the action's output (or the
// evaluator's source, expanded) and exit code.
func (t *turn) judged(st *v1alpha1.State, res *ActionResult) evaluate.Input {
	vars := t.vars()
	in := evaluate.Input{Expand: func(s string) (string, error) { return interpolate.Expand(s, vars) }}
	if res != nil {
		in.Output, in.ExitCode = res.Output, res.ExitCode
	}
	if cfg := st.Evaluate; cfg != nil && cfg.Source != "" {
		if s, err := in.Expand(cfg.Source); err == nil {
			in.Output = s
		}
	}
	return in
}

// judgedByLLM reports whether the LLM judge gives the state's verdict: an
// llm_structured evaluator, or an agent action without an evaluator.
func judgedByLLM(st *v1alpha1.State) bool {
	if cfg := st.Evaluate; cfg != nil {
		return cfg.Type == v1alpha1.EvalLLMStructured
	}
	return st.IsAgent()
}

// llmVerdict is the verdict of a state the LLM judge weighs: decided here
// when the judge is off or the action timed out, else the judge's answer.
func (t *turn) llmVerdict(in evaluate.Input) evaluate.Result {
	if r, ok := evaluate.Precheck(v1alpha1.EvalLLMStructured, in.ExitCode); !ok {
		return r
	}
	if !t.m.spec.LLMEnabled() {
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "LLM evaluation is disabled (spec.llm.enabled: false)"}}
	}
	if t.answer == nil {
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "the judge's answer is missing"}}
	}
	return *t.answer
}

// question is what the LLM judge is to be asked about the state's result;
// nil when its verdict is decided without the judge (see evaluate).
func (t *turn) question(st *v1alpha1.State, res *ActionResult) *evaluate.JudgeRequest {
	if res != nil && res.Failure != nil || t.decided != nil || !judgedByLLM(st) || !t.m.spec.LLMEnabled() {
		return nil
	}
	in := t.judged(st, res)
	if _, ok := evaluate.Precheck(v1alpha1.EvalLLMStructured, in.ExitCode); !ok {
		return nil
	}
	// The state's own model, when it names one, judges its result too.
	req := &evaluate.JudgeRequest{Output: evaluate.JudgedTail(in.Output), Model: st.Model, MinConfidence: v1alpha1.DefaultMinConfidence}
	if cfg := st.Evaluate; cfg != nil {
		prompt, err := in.Expand(cfg.Prompt)
		if err != nil {
			prompt = cfg.Prompt
		}
		req.Prompt = prompt
		if cfg.Schema != nil {
			req.Schema = json.RawMessage(cfg.Schema.Raw)
		}
		req.MinConfidence = cfg.GetMinConfidence()
		req.UncertainSuffix = cfg.UncertainSuffix
	}
	return req
}

// defaultVerdict judges a shell or mcp action whose state has no evaluate.
func (t *turn) defaultVerdict(st *v1alpha1.State, output string, exit int) evaluate.Result {
	if st.ActionType == v1alpha1.ActionMCP {
		return evaluate.MCPResult(output, exit)
	}
	return evaluate.ExitCode(exit)
}

// capture stores the action's result under the state's capture name,
// with the verdict named as ${captured.X.verdict} gives it (verdictWord).
func (t *turn) capture(st *v1alpha1.State, res *ActionResult, verdict string) {
	if st.Capture == "" || res == nil {
		return
	}
	if t.run.Captured == nil {
		t.run.Captured = map[string]v1alpha1.CapturedResult{}
	}
	output := trimOutput(res.Output)
	c := v1alpha1.CapturedResult{
		Output:      Tail(output, t.m.opts.MaxCaptureBytes),
		Stderr:      Tail(res.Stderr, t.m.opts.MaxCaptureBytes),
		ExitCode:    exitCode32(res.ExitCode),
		DurationMs:  res.Duration.Milliseconds(),
		Verdict:     verdict, // ${captured.X.verdict}: yes and no in a little-loops file
		TimeoutKind: timeoutKind(res),
	}
	if res.ExitCode != 0 {
		c.FailureType = failureType(res.Output+"\n"+res.Stderr, res.ExitCode, resultSeen(res))
	}
	t.run.Captured[st.Capture] = c
	if res.OutputTruncated || len(c.Output) < len(output) {
		t.emit(EventCaptureTruncated, CaptureTruncatedEvent{Capture: st.Capture, KeptBytes: len(c.Output), Bound: "capture"}.Data())
		t.m.cuts.record(t.run.RunID, st.Capture, keptHash(c.Output, c.Stderr))
	}
	t.keepCapturesWithinBudget()
}

// cutLog remembers, for the run its Machine runs, the captures reported cut
// (capture_truncated) and a hash of what each kept then. A capture cut
// again while it still holds just that is not reported again: past the
// budget every step shrinks every capture, and each is reported once per
// truncation, when it first keeps less than its action printed, not once
// per step. A capture its state wrote again holds something else, and its
// next cut is reported. This is memory for the log only, never for the
// run: a Machine built anew (a resumed run, each reconcile) reports a
// capture cut once more.
type cutLog struct {
	mu    sync.Mutex
	runID string
	kept  map[string]uint64
}

// record notes that capture name keeps content of hash h, reported cut.
func (l *cutLog) record(runID, name string, h uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runID != runID || l.kept == nil {
		l.runID, l.kept = runID, map[string]uint64{}
	}
	l.kept[name] = h
}

// reported says whether capture name, holding content of hash h, was
// reported cut already with just that content.
func (l *cutLog) reported(runID, name string, h uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.kept[name]
	return l.runID == runID && ok && k == h
}

// keptHash identifies what a capture keeps.
func keptHash(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// cut reports capture name cut to kept bytes (bound run_state) unless it
// was reported already holding what it held before (before), and records
// what it keeps now (after).
func (t *turn) cut(name string, kept int, before, after uint64) {
	if !t.m.cuts.reported(t.run.RunID, name, before) {
		t.emit(EventCaptureTruncated, CaptureTruncatedEvent{Capture: name, KeptBytes: kept, Bound: "run_state"}.Data())
	}
	t.m.cuts.record(t.run.RunID, name, after)
}

// keepCapturesWithinBudget shrinks the captures, each to an equal share of
// Options.MaxCapturedBytes (its tail), once together they hold more; each one cut
// is recorded when it first keeps less (see cutLog), so that no capture
// used in a template is cut silently.
func (t *turn) keepCapturesWithinBudget() {
	total := 0
	for _, c := range t.run.Captured {
		total += capturedSize(c)
	}
	if total <= t.m.opts.MaxCapturedBytes {
		return
	}
	share := t.m.opts.MaxCapturedBytes / len(t.run.Captured)
	for _, name := range slices.Sorted(maps.Keys(t.run.Captured)) {
		c := t.run.Captured[name]
		if capturedSize(c) <= share {
			continue
		}
		if l := c.Loop; l != nil && len(l.Captured) > 0 {
			// A sub-loop's captures share what the entry may keep.
			l = l.DeepCopy()
			each := share / len(l.Captured)
			for _, k := range slices.Sorted(maps.Keys(l.Captured)) {
				if cc := l.Captured[k]; len(cc.Output) > each {
					before := keptHash(cc.Output)
					cc.Output = Tail(cc.Output, each)
					l.Captured[k] = cc
					t.cut(name+"."+k, len(cc.Output), before, keptHash(cc.Output))
				}
			}
			c.Loop = l
			t.run.Captured[name] = c
			continue
		}
		before := keptHash(c.Output, c.Stderr)
		c.Stderr = Tail(c.Stderr, min(len(c.Stderr), share/4))
		c.Output = Tail(c.Output, share-len(c.Stderr))
		t.run.Captured[name] = c
		t.cut(name, len(c.Output), before, keptHash(c.Output, c.Stderr))
	}
}

// capturedSize is what a capture holds of outputs, a sub-loop's included.
func capturedSize(c v1alpha1.CapturedResult) int {
	n := len(c.Output) + len(c.Stderr)
	if c.Loop != nil {
		for _, cc := range c.Loop.Captured {
			n += len(cc.Output)
		}
	}
	return n
}

// LittleLoopsRoute finds the next state for a verdict of a little-loops
// file as ll-loop does, word the verdict as the file writes it (yes, not
// success; success only when the evaluator said success: Result.Word):
// the route table's key written so (never a key starting with _), then _,
// then _error for error and no; then on_yes for yes, on_no for no (else
// on_error), on_error for error. Nothing else routes a verdict: "" when
// none of them does.
func LittleLoopsRoute(st *v1alpha1.State, word string) string {
	if target, ok := st.Route[word]; ok && !strings.HasPrefix(word, "_") {
		return string(target)
	}
	if target, ok := st.Route["_"]; ok {
		return string(target)
	}
	if target, ok := st.Route["_error"]; ok && (word == v1alpha1.VerdictError || word == "no") {
		return string(target)
	}
	switch word {
	case "yes":
		return st.OnSuccess
	case "no":
		return cmp.Or(st.OnFailure, st.OnError)
	case v1alpha1.VerdictError:
		return st.OnError
	}
	return ""
}

// Route finds the next state for a verdict: the route table (exact verdict,
// then "_", then "_error" for error and failure), then the shorthands
// (onSuccess, onFailure falling back to onError, onError). yes and no match
// success and failure.
func Route(st *v1alpha1.State, verdict string) (string, bool) {
	v := v1alpha1.CanonicalVerdict(verdict)
	if len(st.Route) > 0 {
		for k, target := range st.Route {
			if k != "_" && k != "_error" && v1alpha1.CanonicalVerdict(k) == v {
				return string(target), true
			}
		}
		if target, ok := st.Route["_"]; ok {
			return string(target), true
		}
		if target, ok := st.Route["_error"]; ok && (v == v1alpha1.VerdictError || v == v1alpha1.VerdictFailure) {
			return string(target), true
		}
	}
	switch v {
	case v1alpha1.VerdictSuccess:
		return st.OnSuccess, st.OnSuccess != ""
	case v1alpha1.VerdictFailure:
		if st.OnFailure != "" {
			return st.OnFailure, true
		}
		return st.OnError, st.OnError != ""
	case v1alpha1.VerdictError:
		return st.OnError, st.OnError != ""
	}
	return "", false
}

// transition moves the run to target ($current is the state itself), counting
// the edge and the consecutive re-entries, and schedules the backoff. It
// reports false when the run ended.
func (t *turn) transition(target, verdict string) bool {
	run, spec := t.run, t.m.spec
	from := run.CurrentState
	to := target
	if to == v1alpha1.CurrentStateToken {
		to = from
	}
	if _, ok := spec.States[to]; !ok {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q: route target %q does not exist", from, to))
		return false
	}
	t.emit(EventRoute, RouteEvent{From: from, To: to, Verdict: verdict}.Data())
	edge := from + "->" + to
	if run.EdgeRevisits == nil {
		run.EdgeRevisits = map[string]int32{}
	}
	run.EdgeRevisits[edge]++
	if count, limit := run.EdgeRevisits[edge], spec.GetMaxEdgeRevisits(); count > limit {
		t.emit(EventCycleDetected, CycleDetectedEvent{Edge: edge, From: from, To: to, Count: count, Max: limit}.Data())
		t.finish(v1alpha1.TerminatedCycleDetected, fmt.Sprintf("edge %s taken %d times (maxEdgeRevisits %d)", edge, count, limit))
		return false
	}
	if to == from {
		if run.RetryCounts == nil {
			run.RetryCounts = map[string]int32{}
		}
		run.RetryCounts[to]++
	} else {
		delete(run.RetryCounts, from)
	}
	run.CurrentState = to
	run.Routed, run.RoutedFromLoop = true, spec.States[from].Loop != ""
	if b := spec.GetBackoff(); b > 0 {
		ts := metav1.NewTime(t.now.Add(b))
		run.NextStepAt = &ts
	}
	return true
}

// retry handles an action that failed for a transient reason under the
// state's retryPolicy: it schedules the next try after the policy's delay, or
// escalates when the retries are used up (onRetryExhausted, else the run
// ends retry_exhausted). It reports false when the result is to be judged.
func (t *turn) retry(st *v1alpha1.State, res *ActionResult) bool {
	run, p := t.run, st.RetryPolicy
	reason, transient := transientReason(p, res)
	if !transient {
		run.Retries = 0
		return false
	}
	if run.Retries >= p.Limit {
		retries := run.Retries
		run.Retries = 0
		t.emit(EventRetryExhausted, RetryExhaustedEvent{State: run.CurrentState, Retries: retries, Reason: reason, Next: st.OnRetryExhausted}.Data())
		if st.OnRetryExhausted == "" {
			t.finish(v1alpha1.TerminatedRetryExhausted, fmt.Sprintf("state %q escalated: its action failed %d times (%s)", run.CurrentState, retries+1, reason))
			return true
		}
		t.transition(st.OnRetryExhausted, "")
		return true
	}
	run.Retries++
	delay := p.Delay(run.Retries)
	at := metav1.NewTime(t.now.Add(delay))
	run.NextStepAt = &at
	t.emit(EventActionRetry, RetryEvent{State: run.CurrentState, Retry: run.Retries, Limit: p.Limit, DelayMs: delay.Milliseconds(), Reason: reason}.Data())
	return true
}

// transientReason says why a result is worth another try under p: a
// transient failure of the runner, or an exit code the policy lists.
func transientReason(p *v1alpha1.RetryPolicy, res *ActionResult) (string, bool) {
	switch {
	case p == nil || res == nil:
		return "", false
	case res.Failure != nil:
		return res.Failure.Reason, res.Failure.Transient
	case slices.ContainsFunc(p.ExitCodes, func(c int32) bool { return int(c) == res.ExitCode }):
		return fmt.Sprintf("exit code %d", res.ExitCode), true
	}
	return "", false
}
