package executor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// fixSpec is check -> fix -> check -> done.
func fixSpec() *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{
		Initial: "check",
		States: map[string]v1alpha1.State{
			"check": {Action: "pytest", OnSuccess: "done", OnFailure: "fix"},
			"fix":   {Action: "fix.sh", Next: "check"},
			"done":  {Terminal: true},
		},
	}
}

// Seed FEAT-045: check -> done on first success.
func TestSimpleSuccessPath(t *testing.T) {
	r := runLoop(t, fixSpec(), nil, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" || r.run.Iteration != 1 || r.run.TerminatedBy != v1alpha1.TerminatedTerminal || r.run.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("got state %s iteration %d terminatedBy %s phase %s", r.run.CurrentState, r.run.Iteration, r.run.TerminatedBy, r.run.Phase)
	}
}

// Seed FEAT-045: check -> fix -> check -> done; events for every step.
func TestFixRetryLoop(t *testing.T) {
	acts := &fakeActions{results: map[string][]ActionResult{"pytest": {{ExitCode: 1, Output: "1 failed\n"}, {ExitCode: 0, Output: "ok\n"}}}}
	r := runLoop(t, fixSpec(), acts, Options{}, time.Millisecond)
	if want := []string{"pytest", "fix.sh", "pytest"}; !slices.Equal(r.ran, want) {
		t.Errorf("ran %v, want %v", r.ran, want)
	}
	if r.run.Iteration != 3 || r.run.CurrentState != "done" {
		t.Errorf("iteration %d state %s", r.run.Iteration, r.run.CurrentState)
	}
	for _, typ := range []string{EventLoopStart, EventStateEnter, EventActionStart, EventActionComplete, EventEvaluate, EventRoute, EventLoopComplete} {
		if r.count(typ) == 0 {
			t.Errorf("no %s event", typ)
		}
	}
	if r.run.LastResult == nil || r.run.LastResult.Verdict != "success" {
		t.Errorf("lastResult = %+v", r.run.LastResult)
	}
	if r.run.PrevResult == nil || r.run.PrevResult.Output != "ok\n" || r.run.PrevResult.State != "check" {
		t.Errorf("prevResult = %+v", r.run.PrevResult)
	}
	golden(t, "fix-retry", r.events)
}

// Seed FEAT-045: max_iterations ends the loop.
func TestMaxIterations(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "loop", MaxIterations: i32(3), States: map[string]v1alpha1.State{
		"loop": {Action: "fail.sh", OnFailure: "loop", OnSuccess: "done"},
		"done": {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"fail.sh": {{ExitCode: 1}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.Iteration != 3 || r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations || r.run.Phase != v1alpha1.PhaseInterrupted {
		t.Errorf("iteration %d terminatedBy %s phase %s", r.run.Iteration, r.run.TerminatedBy, r.run.Phase)
	}
}

func TestDefaultMaxIterationsIs50(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":    {Action: "x", Next: "b"},
		"b":    {Action: "y", Next: "a"},
		"done": {Terminal: true},
	}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.Iteration != 50 || r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations {
		t.Errorf("iteration %d terminatedBy %s", r.run.Iteration, r.run.TerminatedBy)
	}
}

// Seed FEAT-045: the loop timeout ends the loop between states.
func TestLoopTimeout(t *testing.T) {
	spec := fixSpec()
	spec.Timeout = dur(time.Minute)
	acts := &fakeActions{results: map[string][]ActionResult{"pytest": {{ExitCode: 1, Duration: 40 * time.Second}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedTimeout || r.run.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("terminatedBy %s phase %s", r.run.TerminatedBy, r.run.Phase)
	}
	// pytest (40s), fix, pytest (80s in total): the loop is out of time
	// when it routes to fix, whose shell action is flushed once (as
	// little-loops does) without being judged or routed.
	if r.run.Iteration != 4 || r.run.CurrentState != "fix" || strings.Join(r.ran, ",") != "pytest,fix.sh,pytest,fix.sh" || r.run.Action != nil {
		t.Errorf("iteration %d in %s, ran %v", r.run.Iteration, r.run.CurrentState, r.ran)
	}
	var flushed []any
	for _, e := range r.events {
		if e.Type == EventStateEnter && e.Data["flushed"] == true {
			flushed = append(flushed, e.Data["state"])
		}
	}
	if len(flushed) != 1 || flushed[0] != "fix" {
		t.Errorf("flushed state_enter events: %v", flushed)
	}
	// Out of time after the first state: the state it routes to is flushed.
	spec.Timeout = dur(time.Second)
	acts = &fakeActions{results: map[string][]ActionResult{"pytest": {{ExitCode: 1, Duration: 2 * time.Second}}}}
	if r = runLoop(t, spec, acts, Options{}, time.Millisecond); r.run.Iteration != 2 || r.run.TerminatedBy != v1alpha1.TerminatedTimeout {
		t.Errorf("iteration %d, %s", r.run.Iteration, r.run.TerminatedBy)
	}
}

// Seed FEAT-045: ${context.*} resolves in actions.
func TestVariableInterpolation(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "check", Context: map[string]apiextensionsJSON{"target_dir": jsonValue("src/")},
		States: map[string]v1alpha1.State{
			"check": {Action: "mypy ${context.target_dir}", OnSuccess: "done"},
			"done":  {Terminal: true},
		}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if len(r.ran) != 1 || r.ran[0] != "mypy src/" {
		t.Errorf("ran %v", r.ran)
	}
}

// Seed FEAT-045: capture stores the result; bounded to the tail.
func TestCapture(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "measure", States: map[string]v1alpha1.State{
		"measure": {Action: "count.sh", Capture: "errors", Next: "report"},
		"report":  {Action: "echo ${captured.errors.output} ${captured.errors.exit_code}", Next: "done"},
		"done":    {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"count.sh": {{Output: "42\n", Stderr: "note", ExitCode: 0, Duration: 250 * time.Millisecond}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	c := r.run.Captured["errors"]
	if c.Output != "42" || c.Stderr != "note" || c.ExitCode != 0 || c.DurationMs != 250 {
		t.Errorf("captured %+v", c)
	}
	if r.ran[1] != "echo 42 0" {
		t.Errorf("second action %q", r.ran[1])
	}
}

func TestCaptureIsBounded(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "big", States: map[string]v1alpha1.State{
		"big":  {Action: "big", Capture: "big", OnSuccess: "done"},
		"done": {Terminal: true},
	}}
	huge := strings.Repeat("x", 1<<20) + "END"
	acts := &fakeActions{results: map[string][]ActionResult{"big": {{Output: huge, Stderr: huge}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	c := r.run.Captured["big"]
	if len(c.Output) != DefaultMaxCaptureBytes || !strings.HasSuffix(c.Output, "END") || len(c.Stderr) != DefaultMaxCaptureBytes {
		t.Errorf("captured output %d bytes, stderr %d bytes", len(c.Output), len(c.Stderr))
	}
	if len(r.run.PrevResult.Output) != DefaultMaxCaptureBytes {
		t.Errorf("prev output %d bytes", len(r.run.PrevResult.Output))
	}
	for _, e := range r.events {
		if e.Type == EventActionComplete && len(e.Data["output_preview"].(string)) > previewBytes {
			t.Errorf("preview of %d bytes", len(e.Data["output_preview"].(string)))
		}
	}
}

// Seed FEAT-045: $current routes back to the state itself.
func TestCurrentToken(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "poll", States: map[string]v1alpha1.State{
		"poll": {Action: "ready?", OnSuccess: "done", OnFailure: "$current"},
		"done": {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"ready?": {{ExitCode: 1}, {ExitCode: 1}, {ExitCode: 0}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if len(r.ran) != 3 || r.run.CurrentState != "done" {
		t.Errorf("ran %d times, ended in %s", len(r.ran), r.run.CurrentState)
	}
	if r.run.EdgeRevisits["poll->poll"] != 2 {
		t.Errorf("edge counts %v", r.run.EdgeRevisits)
	}
}

// Seed FEAT-045: maintain restarts after the terminal state.
func TestMaintainMode(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "check", Maintain: true, MaxIterations: i32(7), States: map[string]v1alpha1.State{
		"check":  {Action: "check", OnSuccess: "done", OnFailure: "repair"},
		"repair": {Action: "repair", Next: "check"},
		"done":   {Terminal: true, OnMaintain: "check"},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"check": {{ExitCode: 1}, {ExitCode: 0}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations {
		t.Errorf("terminatedBy %s", r.run.TerminatedBy)
	}
	if r.run.Passes < 2 {
		t.Errorf("passes %d, want at least 2", r.run.Passes)
	}
	maintainHops := 0
	for _, e := range r.events {
		if e.Type == EventRoute && e.Data["reason"] == "maintain" {
			maintainHops++
			if e.Data["from"] != "done" || e.Data["to"] != "check" {
				t.Errorf("maintain hop %v", e.Data)
			}
		}
	}
	if maintainHops != int(r.run.Passes) {
		t.Errorf("%d maintain hops, %d passes", maintainHops, r.run.Passes)
	}
	golden(t, "maintain", r.events)
}

func TestMaintainRestartsOnNoRoute(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "check", Maintain: true, MaxIterations: i32(4), States: map[string]v1alpha1.State{
		"check": {Action: "check", OnSuccess: "done"},
		"done":  {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"check": {{ExitCode: 1}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations || len(r.ran) != 4 {
		t.Errorf("terminatedBy %s after %d runs", r.run.TerminatedBy, len(r.ran))
	}
}

// Seed FEAT-045: the default evaluator is exit_code for shell and the LLM
// judge for agent actions; an explicit evaluate overrides it.
func TestDefaultAndExplicitEvaluators(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "shell", States: map[string]v1alpha1.State{
		"shell":    {Action: "make", OnSuccess: "agent"},
		"agent":    {Action: "/fix the build", OnSuccess: "explicit", OnFailure: "failed"},
		"explicit": {Action: "count", Evaluate: &v1alpha1.Evaluate{Type: "output_numeric", Operator: "eq", Target: jsp(0)}, OnSuccess: "done"},
		"done":     {Terminal: true},
		"failed":   {Terminal: true},
	}}
	judge := &fakeJudge{verdicts: []string{"success"}}
	acts := &fakeActions{results: map[string][]ActionResult{"/fix the build": {{Output: "fixed it"}}, "count": {{Output: "0\n"}}}}
	r := runJudged(t, spec, acts, judge, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" {
		t.Fatalf("ended in %s: %s", r.run.CurrentState, r.run.Message)
	}
	if len(judge.reqs) != 1 || judge.reqs[0].Output != "fixed it" {
		t.Errorf("judge asked %+v", judge.reqs)
	}
	var types []string
	for _, e := range r.events {
		if e.Type == EventEvaluate {
			types = append(types, e.Data["type"].(string))
		}
		if e.Type == EventActionStart && e.Data["action"] == "/fix the build" && e.Data["is_prompt"] != true {
			t.Errorf("agent action not marked as prompt: %v", e.Data)
		}
	}
	if want := []string{"default", "default", "output_numeric"}; !slices.Equal(types, want) {
		t.Errorf("evaluate types %v, want %v", types, want)
	}
}

func TestAgentWithoutJudgeIsAnError(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "agent", States: map[string]v1alpha1.State{
		"agent":  {Action: "do it", ActionType: v1alpha1.ActionAgent, OnSuccess: "done", OnError: "failed"},
		"done":   {Terminal: true},
		"failed": {Terminal: true},
	}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.CurrentState != "failed" || r.run.Phase != v1alpha1.PhaseFailed || !IsFailureTerminal(r.run) {
		t.Errorf("state %s phase %s", r.run.CurrentState, r.run.Phase)
	}
}

func TestLLMDisabled(t *testing.T) {
	f := false
	spec := &v1alpha1.LoopSpec{Initial: "j", LLM: &v1alpha1.LLMSpec{Enabled: &f}, States: map[string]v1alpha1.State{
		"j":    {Action: "x", Evaluate: &v1alpha1.Evaluate{Type: "llm_structured", Prompt: "ok?"}, OnError: "done"},
		"done": {Terminal: true},
	}}
	judge := &fakeJudge{verdicts: []string{"success"}}
	r := runJudged(t, spec, nil, judge, Options{}, time.Millisecond)
	if len(judge.reqs) != 0 || r.run.LastResult.Verdict != "error" {
		t.Errorf("judge called %d times, verdict %s", len(judge.reqs), r.run.LastResult.Verdict)
	}
}

func TestLLMPromptIsInterpolated(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "j", Context: map[string]apiextensionsJSON{"goal": jsonValue("green tests")},
		States: map[string]v1alpha1.State{
			"j": {Action: "x", Evaluate: &v1alpha1.Evaluate{Type: "llm_structured", Prompt: "Did it reach ${context.goal}?",
				Schema: jsp(map[string]any{"type": "object", "properties": map[string]any{"verdict": map[string]any{"type": "string"}}})},
				Route: map[string]v1alpha1.StateName{"ship": "done", "_": "j"}},
			"done": {Terminal: true},
		}}
	judge := &fakeJudge{verdicts: []string{"ship"}}
	r := runJudged(t, spec, nil, judge, Options{}, time.Millisecond)
	if judge.reqs[0].Prompt != "Did it reach green tests?" || judge.reqs[0].Schema == nil {
		t.Errorf("request %+v", judge.reqs[0])
	}
	if r.run.CurrentState != "done" {
		t.Errorf("custom verdict routed to %s", r.run.CurrentState)
	}
}

func TestActionTimeoutIsAnError(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "slow", States: map[string]v1alpha1.State{
		"slow":     {Action: "sleep 999", Timeout: dur(time.Second), Evaluate: &v1alpha1.Evaluate{Type: "output_contains", Pattern: "x"}, OnSuccess: "done", OnError: "timedout"},
		"done":     {Terminal: true},
		"timedout": {Terminal: true, Failure: new(true)},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"sleep 999": {{ExitCode: 124, Output: "x"}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "timedout" || !IsFailureTerminal(r.run) {
		t.Errorf("ended in %s (%s)", r.run.CurrentState, r.run.Phase)
	}
}

// A missing variable goes to onError with an action_error event, or ends
// the run with an error that names the variable and the state.
func TestMissingVariable(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":    {Action: "deploy ${context.target}", OnSuccess: "done"},
		"done": {Terminal: true},
	}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || !strings.Contains(r.run.Message, `state "a"`) || !strings.Contains(r.run.Message, "${context.target}") {
		t.Errorf("terminatedBy %s message %q", r.run.TerminatedBy, r.run.Message)
	}
	if len(r.ran) != 0 {
		t.Errorf("ran %v", r.ran)
	}

	st := spec.States["a"]
	st.OnError = "recover"
	spec.States["a"] = st
	spec.States["recover"] = v1alpha1.State{Action: "echo recovering", Next: "done"}
	r = runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" || r.count(EventActionError) != 1 || !slices.Equal(r.ran, []string{"echo recovering"}) {
		t.Errorf("state %s, %d action_error, ran %v", r.run.CurrentState, r.count(EventActionError), r.ran)
	}
}

func TestNextWithFailedAction(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":       {Action: "step", Next: "done", OnError: "cleanup"},
		"b":       {Action: "step", Next: "done"},
		"cleanup": {Action: "cleanup", Next: "done"},
		"done":    {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"step": {{ExitCode: 3}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if !slices.Equal(r.ran, []string{"step", "cleanup"}) || r.count(EventEvaluate) != 0 {
		t.Errorf("ran %v with %d evaluations", r.ran, r.count(EventEvaluate))
	}
	spec.Initial = "b"
	acts = &fakeActions{results: map[string][]ActionResult{"step": {{ExitCode: 3}}}}
	r = runLoop(t, spec, acts, Options{}, time.Millisecond)
	if !slices.Equal(r.ran, []string{"step"}) || r.run.CurrentState != "done" {
		t.Errorf("without onError: ran %v, state %s", r.ran, r.run.CurrentState)
	}
}

func TestNoRouteIsAnError(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a":    {Action: "x", OnSuccess: "done"},
		"done": {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"x": {{ExitCode: 2}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedError || !strings.Contains(r.run.Message, `no route for verdict "error"`) {
		t.Errorf("%s: %s", r.run.TerminatedBy, r.run.Message)
	}
}

func TestCycleDetected(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", MaxEdgeRevisits: i32(2), States: map[string]v1alpha1.State{
		"a":    {Action: "a", Next: "b"},
		"b":    {Action: "b", Next: "a"},
		"done": {Terminal: true},
	}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedCycleDetected || r.count(EventCycleDetected) != 1 {
		t.Fatalf("terminatedBy %s", r.run.TerminatedBy)
	}
	// a->b twice, b->a twice, then the third a->b.
	if r.run.Iteration != 5 {
		t.Errorf("iteration %d, want 5", r.run.Iteration)
	}
}

func TestSelfLoopOf200NeedsRaisedLimits(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", MaxIterations: i32(200), States: map[string]v1alpha1.State{
		"a":    {Action: "true", OnSuccess: "$current"},
		"done": {Terminal: true},
	}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedCycleDetected || r.run.Iteration != 101 {
		t.Errorf("default maxEdgeRevisits: %s at %d", r.run.TerminatedBy, r.run.Iteration)
	}
	spec.MaxEdgeRevisits = i32(1000)
	r = runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedMaxIterations || r.run.Iteration != 200 {
		t.Errorf("raised: %s at %d", r.run.TerminatedBy, r.run.Iteration)
	}
}

func TestMaxRetries(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "try", States: map[string]v1alpha1.State{
		"try":     {Action: "flaky", OnSuccess: "done", OnFailure: "$current", MaxRetries: i32(2), OnRetryExhausted: "give_up"},
		"done":    {Terminal: true},
		"give_up": {Terminal: true, Failure: new(true)},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"flaky": {{ExitCode: 1}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if len(r.ran) != 3 || r.run.CurrentState != "give_up" || r.count(EventRetryExhausted) != 1 {
		t.Errorf("ran %d times, ended in %s", len(r.ran), r.run.CurrentState)
	}
	for _, e := range r.events {
		if e.Type == EventRetryExhausted && (e.Data["state"] != "try" || e.Data["next"] != "give_up") {
			t.Errorf("retry_exhausted %v", e.Data)
		}
	}
	// A success in between resets the count.
	acts = &fakeActions{results: map[string][]ActionResult{"flaky": {{ExitCode: 1}, {ExitCode: 1}, {ExitCode: 0}}}}
	r = runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" {
		t.Errorf("ended in %s", r.run.CurrentState)
	}
}

func TestBackoffWaits(t *testing.T) {
	spec := fixSpec()
	spec.Backoff = dur(30 * time.Second)
	m, run := startRun(t, "test", spec, Options{})
	step, _ := m.Plan(run, t0)
	m.Complete(run, &ActionResult{ExitCode: 1}, t0)
	if step.Kind != StepAction {
		t.Fatalf("first step %v", step.Kind)
	}
	step, evs := m.Plan(run, t0.Add(time.Second))
	if step.Kind != StepWait || !step.WaitUntil.Equal(t0.Add(30*time.Second)) || len(evs) != 0 {
		t.Fatalf("during backoff: %v until %v, %d events", step.Kind, step.WaitUntil, len(evs))
	}
	step, _ = m.Plan(run, t0.Add(30*time.Second))
	if step.Kind != StepAction || step.Action.State != "fix" {
		t.Errorf("after backoff: %v", step.Kind)
	}
}

func TestDecisionStateWithSource(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "measure", States: map[string]v1alpha1.State{
		"measure": {Action: "count", Capture: "n", Next: "decide"},
		"decide": {Evaluate: &v1alpha1.Evaluate{Type: "output_numeric", Source: "${captured.n.output}", Operator: "lt", Target: jsp(10)},
			OnSuccess: "done", OnFailure: "measure"},
		"done": {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"count": {{Output: "12"}, {Output: "9"}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" || len(r.ran) != 2 {
		t.Errorf("state %s after %d actions", r.run.CurrentState, len(r.ran))
	}
}

func TestStateWithoutActionOrEvaluateSucceeds(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "gate", States: map[string]v1alpha1.State{
		"gate": {OnSuccess: "done"},
		"done": {Terminal: true},
	}}
	r := runLoop(t, spec, nil, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" || r.count(EventEvaluate) != 0 {
		t.Errorf("state %s, %d evaluations", r.run.CurrentState, r.count(EventEvaluate))
	}
}

func TestConvergenceTrace(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "measure", States: map[string]v1alpha1.State{
		"measure": {Action: "measure", Capture: "metric",
			Evaluate: &v1alpha1.Evaluate{Type: "convergence", Target: jsp(0), Tolerance: jsp(0.5), Previous: "${captured.metric.output:default=}"},
			Route:    map[string]v1alpha1.StateName{"target": "done", "progress": "apply", "stall": "failed"}},
		"apply":  {Action: "apply", Next: "measure"},
		"done":   {Terminal: true},
		"failed": {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"measure": {{Output: "8"}, {Output: "4"}, {Output: "0.2"}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.CurrentState != "done" {
		t.Fatalf("ended in %s: %s", r.run.CurrentState, r.run.Message)
	}
	golden(t, "convergence", r.events)
}

func TestResumeRerunsActionInFlight(t *testing.T) {
	m, run := startRun(t, "test", fixSpec(), Options{})
	step, _ := m.Plan(run, t0)
	if step.Kind != StepAction || run.Action == nil {
		t.Fatal("no action in flight")
	}
	saved := run.DeepCopy() // what was on disk when the process died
	evs, ok := m.Resume(saved, t0.Add(time.Minute))
	if !ok || len(evs) != 2 || evs[0].Type != EventLoopResume || evs[1].Type != EventActionRestarted {
		t.Fatalf("resume events %v", evs)
	}
	again, evs := m.Plan(saved, t0.Add(time.Minute))
	if again.Kind != StepAction || again.Action.Command != "pytest" || again.Action.Iteration != 1 || len(evs) != 0 {
		t.Errorf("re-planned %+v with %d events", again, len(evs))
	}
	m.Complete(saved, &ActionResult{}, t0.Add(time.Minute))
	if saved.Iteration != 1 || saved.CurrentState != "done" {
		t.Errorf("iteration %d state %s", saved.Iteration, saved.CurrentState)
	}
	done := &v1alpha1.RunState{Phase: v1alpha1.PhaseCompleted}
	if _, ok := m.Resume(done, t0); ok {
		t.Error("resumed a completed run")
	}
}

func TestResumeKeepsElapsedTime(t *testing.T) {
	m, run := startRun(t, "test", fixSpec(), Options{})
	m.Plan(run, t0.Add(10*time.Second)) // saved at +10s, then the process died
	m.Resume(run, t0.Add(time.Hour))
	if got := Elapsed(run, t0.Add(time.Hour+5*time.Second)); got != 15*time.Second {
		t.Errorf("elapsed %v, want 15s", got)
	}
}

func TestInterruptKeepsActionForResume(t *testing.T) {
	m, run := startRun(t, "test", fixSpec(), Options{})
	m.Plan(run, t0)
	evs := m.Interrupt(run, t0, "interrupted")
	if run.Phase != v1alpha1.PhaseInterrupted || run.TerminatedBy != v1alpha1.TerminatedStopped || run.Action == nil || evs[0].Type != EventLoopComplete {
		t.Fatalf("phase %s by %s action %v", run.Phase, run.TerminatedBy, run.Action)
	}
	if _, ok := m.Resume(run, t0); !ok || run.Phase != v1alpha1.PhaseRunning || run.TerminatedBy != "" {
		t.Errorf("resume: phase %s", run.Phase)
	}
}

func TestPrecomputedVerdictWins(t *testing.T) {
	m, run := startRun(t, "test", fixSpec(), Options{})
	m.Plan(run, t0)
	m.Complete(run, &ActionResult{ExitCode: 0, Verdict: &evaluateResult{Verdict: "failure"}}, t0)
	if run.CurrentState != "fix" {
		t.Errorf("state %s", run.CurrentState)
	}
}

func TestRestartActionAndRecord(t *testing.T) {
	m, run := startRun(t, "test", fixSpec(), Options{})
	if evs := m.RestartAction(run, t0); evs != nil {
		t.Errorf("restart with nothing in flight: %v", evs)
	}
	m.Plan(run, t0)
	evs := m.RestartAction(run, t0.Add(time.Minute))
	if len(evs) != 1 || evs[0].Type != EventActionRestarted || evs[0].Seq != 4 || !run.Action.StartedAt.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("restart events %v", evs)
	}
	evs = m.Record(run, t0, EventSpecChanged, map[string]any{"generation": 2})
	if len(evs) != 1 || evs[0].Seq != 5 || run.LastSeq != 5 {
		t.Errorf("record %v", evs)
	}
}
