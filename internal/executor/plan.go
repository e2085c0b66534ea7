package executor

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Plan says what the current state needs. It enters the state when needed
// (checking the limits first, counting the iteration, preparing the action)
// and returns the events that produced. Called again while an action is in
// flight, it returns the same action and no events (Step.InFlight): that is
// how a driver that lost track of an action (a restart) finds it again. The
// same holds for every wait: a sub-loop, an approval, a verdict awaited
// (the judge's, a search's), the run's clone, push and exit hook.
func (m *Machine) Plan(run *v1alpha1.RunState, now time.Time) (Step, []Event) {
	t := m.begin(run, now)
	step := t.plan()
	if len(t.events) == 0 {
		return step, nil
	}
	return step, t.done()
}

func (t *turn) plan() Step {
	run, spec := t.run, t.m.spec
	if run.Phase.IsFinished() {
		return t.afterEnd()
	}
	if step, ok := t.checkout(); ok {
		return step
	}
	if run.Action != nil {
		// A sub-loop whose name no longer expands hops to onError.
		if step := t.inFlight(); step.Kind != stepHop {
			step.InFlight = step.Kind != StepDone
			return step
		}
	}
	if run.NextStepAt != nil && t.now.Before(run.NextStepAt.Time) {
		return Step{Kind: StepWait, WaitUntil: run.NextStepAt.Time}
	}
	run.NextStepAt = nil
	if run.Transient != nil {
		run.Transient.Waiting = ""
	}
	t.dropStaleRetry()
	// Hops that run nothing (maintain restarts, exhausted retries, missing
	// variables routed to onError) continue here; each one either counts an
	// iteration or leaves a state for good, so the loop is bounded.
	for hops := 0; hops <= 2*len(spec.States)+2; hops++ {
		retrying := run.Retries > 0 // the same iteration's action again
		if step, stop := t.limitReached(retrying); stop {
			return step
		}
		st, ok := spec.States[run.CurrentState]
		if !ok {
			t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q does not exist", run.CurrentState))
			return Step{Kind: StepDone}
		}
		if !retrying {
			if done, hopped := t.beforeEnter(&st); done {
				return Step{Kind: StepDone}
			} else if hopped {
				continue
			}
		}
		if step, hopped, stop := t.checkBudget(&st); stop {
			return step
		} else if hopped {
			run.Retries = 0
			continue
		}
		if retrying {
			if step := t.startAction(&st); step.Kind != stepHop {
				return step
			}
			continue
		}
		run.Iteration++
		run.Routed, run.RoutedFromLoop = false, false
		t.emit(EventStateEnter, StateEnterEvent{State: run.CurrentState, Iteration: run.Iteration, IterationCount: run.Passes}.Data())
		if step := t.enter(&st); step.Kind != stepHop {
			return step
		}
	}
	t.finish(v1alpha1.TerminatedError, "the loop keeps jumping between states without running any")
	return Step{Kind: StepDone}
}

// enter is the step of the state just entered: its sub-loop, its
// approval, its action, or its verdict alone.
func (t *turn) enter(st *v1alpha1.State) Step {
	switch {
	case st.Loop != "":
		return t.subLoop(st, true)
	case st.Approval != nil:
		return t.approval(st)
	case st.Action == "" && st.Learning == nil:
		return Step{Kind: StepEvaluate}
	}
	return t.startAction(st)
}

// inFlight is the step of the action (or sub-loop) in flight.
func (t *turn) inFlight() Step {
	run, spec := t.run, t.m.spec
	a := run.Action
	if a.Verdict {
		// A state without an action whose verdict (the judge's, a
		// search's) is awaited: it is judged again, not entered again.
		return Step{Kind: StepEvaluate}
	}
	// The action in flight runs (again) as the loop says now: its
	// command is expanded from the spec, never taken from the saved
	// state, which only says which state and iteration it was.
	st, ok := spec.States[a.State]
	if ok && st.Loop != "" && a.State == run.CurrentState {
		return t.subLoop(&st, false)
	}
	if a.Approval != nil {
		return t.awaiting() // the question stays as it was asked
	}
	if !ok || (st.Action == "" && st.Learning == nil) {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q of the action in flight has no action", a.State))
		return Step{Kind: StepDone}
	}
	vars := t.vars()
	command, err := expandAction(spec, &st, vars)
	if err != nil {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q: action: %v", a.State, err))
		return Step{Kind: StepDone}
	}
	a.Command = command
	return Step{Kind: StepAction, Action: t.newAction(a.State, &st, a.Iteration, command, time.Duration(a.TimeoutSeconds)*time.Second, vars)}
}

// beforeEnter handles what happens instead of entering the current state:
// a terminal state ends the run (or restarts a maintain loop), and a state
// that re-entered itself too often goes to onRetryExhausted. done: the run
// ended; hopped: the run moved to another state without running one.
func (t *turn) beforeEnter(st *v1alpha1.State) (done, hopped bool) {
	run := t.run
	if st.Terminal && !t.terminalSummary(st) {
		if t.endAtTerminal() {
			return true, false
		}
		t.maintainRestart(st)
		return false, true
	}
	if st.MaxRetries != nil && run.RetryCounts[run.CurrentState] > *st.MaxRetries {
		if !t.retryExhausted(st) {
			return true, false
		}
		return false, true
	}
	return false, false
}

// endAtTerminal ends the run in the terminal state entered, unless a
// maintain loop restarts: by the cap whose summary ran, or as terminal.
func (t *turn) endAtTerminal() bool {
	switch {
	case t.run.CapSummary != "":
		t.finish(t.run.CapSummary, "")
	case !t.m.spec.Maintain:
		t.finish(v1alpha1.TerminatedTerminal, "")
	default:
		return false
	}
	return true
}

// terminalSummary reports whether the terminal state entered is a cap's
// summary state with an action, which runs once before the run ends.
func (t *turn) terminalSummary(st *v1alpha1.State) bool {
	run, spec := t.run, t.m.spec
	if st.Action == "" || run.CapSummary == "" {
		return false
	}
	summary := spec.OnMaxIterations
	if run.CapSummary == v1alpha1.TerminatedMaxPasses {
		summary = spec.OnMaxPasses
	}
	return run.CurrentState == summary
}

// dropStaleRetry forgets a pending retry whose state no longer has an
// action with a retry policy (the spec changed in between).
func (t *turn) dropStaleRetry() {
	run := t.run
	if run.Retries == 0 {
		return
	}
	if st, ok := t.m.spec.States[run.CurrentState]; !ok || st.Action == "" || st.Terminal || st.RetryPolicy == nil {
		run.Retries = 0
	}
}

// limitReached ends the run at maxIterations (unless the next action is a
// retry of the current iteration's), at maxPasses, or at the loop's
// timeout. A cap with a summary state jumps there first, once. stop: the
// step is the run's (its end, or the action flushed before a timeout).
func (t *turn) limitReached(retrying bool) (step Step, stop bool) {
	run, spec := t.run, t.m.spec
	done := Step{Kind: StepDone}
	if !retrying && run.Iteration >= spec.GetMaxIterations() {
		if spec.OnMaxIterations != "" && run.CapSummary == "" && run.RoutedFromLoop {
			if step, ok := t.flush(false); ok {
				return step, true
			}
		}
		if !t.summarise(v1alpha1.TerminatedMaxIterations, spec.OnMaxIterations, EventMaxStepsSummary, MaxStepsSummaryEvent{Iterations: run.Iteration}) {
			return done, true
		}
	}
	if spec.MaxPasses != nil && run.Passes >= *spec.MaxPasses &&
		!t.summarise(v1alpha1.TerminatedMaxPasses, spec.OnMaxPasses, EventMaxPassesSummary, MaxPassesSummaryEvent{IterationCount: run.Passes}) {
		return done, true
	}
	if limit := spec.GetTimeout(); limit > 0 && Elapsed(run, t.now) > limit {
		if step, ok := t.flush(true); ok {
			return step, true
		}
		t.finish(v1alpha1.TerminatedTimeout, fmt.Sprintf("loop timeout %s exceeded", limit))
		return done, true
	}
	return Step{}, false
}

// flush runs, once, the action of the state the loop has just routed to
// when a limit cuts in between the route and the state, as little-loops
// does: a handshake step (copy a flag, write a marker) is not lost. Before
// the timeout ends the run (timeout) only a shell action is flushed; before
// the step cap's summary state, after a route from a sub-loop state, any
// action (the state's agent too). Its verdict is not judged and it routes
// nowhere; then the run ends timeout, or the summary state runs.
func (t *turn) flush(timeout bool) (Step, bool) {
	run := t.run
	st, ok := t.m.spec.States[run.CurrentState]
	if !run.Routed || !ok || st.Terminal || st.Loop != "" || st.Action == "" ||
		timeout && (st.IsAgent() || st.ActionType == v1alpha1.ActionMCP) {
		return Step{}, false
	}
	run.Routed, run.RoutedFromLoop = false, false
	run.Iteration++
	t.emit(EventStateEnter, StateEnterEvent{State: run.CurrentState, Iteration: run.Iteration, IterationCount: run.Passes, Flushed: true}.Data())
	step := t.startAction(&st)
	if step.Kind != StepAction {
		return Step{}, false
	}
	run.Action.Flush = true
	return step, true
}

// summarise handles a cap that is reached: the first time, with a
// summary state, it jumps there (no route: the summary runs, then the run
// ends by the cap) and reports true; otherwise it ends the run.
func (t *turn) summarise(by v1alpha1.TerminationReason, summary, event string, ev summaryEvent) bool {
	run := t.run
	if summary == "" || run.CapSummary != "" {
		t.finish(by, "")
		return false
	}
	if _, ok := t.m.spec.States[summary]; !ok {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("summary state %q does not exist", summary))
		return false
	}
	t.emit(event, ev.withSummary(summary))
	run.CapSummary = by
	delete(run.RetryCounts, run.CurrentState)
	run.CurrentState = summary
	return true
}

// stepHop tells plan's loop that startAction moved to another state
// without running anything.
const stepHop StepKind = -1

// startAction prepares the current state's action: its first try of the
// iteration, or a retry (run.Retries). A template that cannot expand goes
// to onError (a hop) or ends the run.
func (t *turn) startAction(st *v1alpha1.State) Step {
	run, spec := t.run, t.m.spec
	vars := t.vars()
	command, err := expandAction(spec, st, vars)
	if err != nil {
		run.Retries = 0
		if !t.actionError(st, fmt.Errorf("state %q: action: %w", run.CurrentState, err)) {
			return Step{Kind: StepDone}
		}
		return Step{Kind: stepHop}
	}
	a := t.newAction(run.CurrentState, st, run.Iteration, command, st.GetTimeout(), vars)
	ts := metav1.NewTime(t.now)
	run.Action = &v1alpha1.ActionStatus{
		State: a.State, Iteration: a.Iteration, Command: a.Command, Agent: a.Agent,
		TimeoutSeconds: int64(a.Timeout / time.Second), StartedAt: &ts,
	}
	t.emit(EventActionStart, ActionStartEvent{Action: command, IsPrompt: a.Agent, Retry: a.Retry}.Data())
	return Step{Kind: StepAction, Action: a}
}

// maintainRestart jumps from a terminal state back to onMaintain or initial.
// The hop counts as an iteration and a pass.
func (t *turn) maintainRestart(st *v1alpha1.State) {
	run := t.run
	to := st.OnMaintain
	if to == "" {
		to = t.m.spec.Initial
	}
	run.Iteration++
	run.Passes++
	t.emit(EventRoute, RouteEvent{From: run.CurrentState, To: to, Reason: "maintain"}.Data())
	delete(run.RetryCounts, run.CurrentState)
	run.CurrentState = to
}

// retryExhausted leaves a state that re-entered itself too often. It reports
// false when the run ended.
func (t *turn) retryExhausted(st *v1alpha1.State) bool {
	run := t.run
	retries := run.RetryCounts[run.CurrentState]
	t.emit(EventRetryExhausted, RetryExhaustedEvent{State: run.CurrentState, Retries: retries, Next: st.OnRetryExhausted}.Data())
	delete(run.RetryCounts, run.CurrentState)
	if st.OnRetryExhausted == "" {
		t.finish(v1alpha1.TerminatedRetryExhausted, fmt.Sprintf("state %q re-entered itself %d times", run.CurrentState, retries))
		return false
	}
	run.CurrentState = st.OnRetryExhausted
	return true
}

// actionError handles an action that could not be prepared: onError when the
// state has it, otherwise the run ends. It reports false when the run ended.
func (t *turn) actionError(st *v1alpha1.State, err error) bool {
	if st.OnError == "" {
		t.finish(v1alpha1.TerminatedError, err.Error())
		return false
	}
	t.emit(EventActionError, ActionErrorEvent{State: t.run.CurrentState, Error: err.Error(), Route: "on_error"}.Data())
	return t.transition(st.OnError, "")
}
