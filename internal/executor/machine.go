// Package executor is the loop engine: a pure state machine over a run state.
//
// It never blocks, sleeps, starts processes, calls a model or talks to
// Kubernetes. Every answer from outside is a Step the engine returns and a
// driver (the local CLI or the Loop reconciler) waits for: Plan says what
// the current state needs (an action, a sub-loop, a person's approval, a
// wait), Complete takes the answer and evaluates, routes and enforces the
// limits, or says it needs the LLM judge's verdict first. Both return the
// events to append.
package executor

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/pricing"
)

// DefaultMaxCaptureBytes bounds every output kept in the run state.
const DefaultMaxCaptureBytes = 4096

// The bounds of a run on a laptop: its state is a file, not a Loop's status
// in etcd, so a captured output is kept as a loop file expects (little-loops
// keeps all of it) up to a size that keeps the state file and checkpoints
// sane; past it the capture_truncated event says what was cut.
const (
	// LocalCaptureBytes bounds each output a local run keeps.
	LocalCaptureBytes = 256 << 10
	// LocalCapturedBytes bounds all captures of a local run together.
	LocalCapturedBytes = 1 << 20
)

// Bounds on what a run state holds, whatever the loop: a Loop's status
// stays well under 64 KiB, and an action a Pod can carry.
const (
	// DefaultMaxCapturedBytes bounds all captures together (output and
	// stderr): past it, each capture keeps an equal share of its tail.
	DefaultMaxCapturedBytes = 32 << 10
	// MaxVerdictBytes bounds a verdict (a classify line, a judge's
	// answer): a longer one is an error verdict.
	MaxVerdictBytes = 253
	// MaxDetailsBytes bounds an evaluation's details as stored.
	MaxDetailsBytes = 4 << 10
	// MaxCommandBytes bounds an action once its templates are expanded.
	MaxCommandBytes = 128 << 10
)

// previewBytes bounds the output previews in action_complete events.
const previewBytes = 2000

// Options configure a Machine.
type Options struct {
	// usageTo is set by WithUsageTo.
	usageTo *UsageTarget
	// Env resolves ${env.NAME}; nil means no variable is visible.
	Env func(string) (string, bool)
	// MaxCaptureBytes bounds each output kept in the run state (the tail);
	// default DefaultMaxCaptureBytes, what a Loop's status can carry.
	MaxCaptureBytes int
	// MaxCapturedBytes bounds all captures together; default
	// DefaultMaxCapturedBytes. A run on a laptop keeps far more (see
	// LocalCaptureBytes).
	MaxCapturedBytes int
	// LittleLoops names things in events as little-loops does, for a loop
	// read from a little-loops file: a run stopped by its step cap ends
	// with terminated_by max_steps (the run state keeps max_iterations).
	LittleLoops bool
	// ContextDefaults are context variables the runner gives a run (the
	// operator: run_dir, max_steps, input_hash), each unless the loop sets it.
	ContextDefaults map[string]any
	// SearchApart asks for pattern searches over an action's output (an
	// output_contains the runner did not judge) as a step of their own,
	// StepSearch, instead of running them inside Complete: the operator runs
	// them away from its workers, since a pattern may backtrack for seconds.
	SearchApart bool
	// IgnoreSignals makes the machine deaf to the signals actions print
	// (FATAL_ERROR:, CONTEXT_HANDOFF:, LOOP_STOP:): a sub-loop's child, as
	// little-loops runs its children.
	IgnoreSignals bool
	// Prices turn an agent action's tokens into its cost; nil: the
	// defaults (pricing.Default).
	Prices *pricing.Table
	// Clone is the checkout the run works in, made before its first
	// state (see lifecycle.go): a Loop's workspace.git (CloneOf), or what
	// looprun run --clone clones; nil for none.
	Clone *gitws.Op
	// Simulated is a simulation's machine: it runs no spec.onExit, and no
	// sub-loop's child runs, so a sub-loop state expands only its loop's
	// name, a name that does not expand standing as written, as in
	// ll-loop simulate (its with and worktree are not expanded).
	Simulated bool
}

// Machine runs one loop spec. It holds no run state (only what its log
// reported, cuts) and is safe for concurrent use.
type Machine struct {
	name    string
	spec    *v1alpha1.LoopSpec
	context map[string]any
	opts    Options
	cuts    cutLog
}

// New checks spec and returns a Machine for the loop called name.
func New(name string, spec *v1alpha1.LoopSpec, opts Options) (*Machine, error) {
	validate := Validate
	if opts.LittleLoops {
		validate = ValidateLittleLoops
	}
	if errs := validate(spec); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	ctx, err := DecodeContext(spec.Context)
	if err != nil {
		return nil, err
	}
	for k, v := range opts.ContextDefaults {
		if _, ok := ctx[k]; !ok {
			if ctx == nil {
				ctx = map[string]any{}
			}
			ctx[k] = v
		}
	}
	if opts.MaxCaptureBytes <= 0 {
		opts.MaxCaptureBytes = DefaultMaxCaptureBytes
	}
	if opts.MaxCapturedBytes <= 0 {
		opts.MaxCapturedBytes = DefaultMaxCapturedBytes
	}
	return &Machine{name: name, spec: spec, context: ctx, opts: opts}, nil
}

// AsChild is the machine for m's loop run as a sub-loop's child: deaf to
// the signals its actions print, as little-loops runs a child.
func (m *Machine) AsChild() *Machine {
	opts := m.opts
	opts.IgnoreSignals = true
	opts.Clone = nil // a child works in its parent's checkout
	return &Machine{name: m.name, spec: m.spec, context: m.context, opts: opts}
}

// WithUsageTo is the machine for m's loop whose agent actions' usage is
// written to u (the top run's sub-loop state, for a child; nil: each
// action's own).
func (m *Machine) WithUsageTo(u *UsageTarget) *Machine {
	opts := m.opts
	opts.usageTo = u
	return &Machine{name: m.name, spec: m.spec, context: m.context, opts: opts}
}

// usageTarget is where the usage of an action of state (in iteration)
// goes: the top run's sub-loop state for a child, else this run's.
func (m *Machine) usageTarget(state string, iteration int32) UsageTarget {
	if u := m.opts.usageTo; u != nil {
		return *u
	}
	return UsageTarget{RunDir: m.RunDir(), State: state, Iteration: iteration}
}

// Simulated is the machine for m's loop that a simulation walks (see
// Options.Simulated).
func (m *Machine) Simulated() *Machine {
	opts := m.opts
	opts.Simulated = true
	return &Machine{name: m.name, spec: m.spec, context: m.context, opts: opts}
}

// Spec returns the spec the machine runs.
func (m *Machine) Spec() *v1alpha1.LoopSpec { return m.spec }

// Name returns the loop's name.
func (m *Machine) Name() string { return m.name }

// DecodeContext decodes spec.context into plain values (numbers stay as written).
func DecodeContext(in map[string]apiextensionsJSON) (map[string]any, error) {
	out := make(map[string]any, len(in))
	for k, v := range in {
		if len(v.Raw) == 0 {
			out[k] = nil
			continue
		}
		dv, err := decodeJSONValue(v.Raw)
		if err != nil {
			return nil, fmt.Errorf("context.%s: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}

// StepKind says what the driver must do next. Each kind that waits for an
// answer from outside names the request in Step and takes the answer back in
// the ActionResult given to Complete.
type StepKind int

const (
	// StepAction asks the driver to run Step.Action, then call Complete with its result.
	StepAction StepKind = iota
	// StepEvaluate is a state without action: Complete with a nil result.
	StepEvaluate
	// StepWait means nothing to do until Step.WaitUntil (backoff); call Plan again then.
	StepWait
	// StepDone means the run is over. A run that ended in this Plan may
	// still have its push and exit hook to run: once the end is saved,
	// plan again while Machine.AfterEnd says so.
	StepDone
	// StepLoop asks the driver to run Step.Loop, a sub-loop, to its end,
	// then call Complete with a result whose Child says how it ended.
	StepLoop
	// StepApproval asks the driver for a person's answer to Step.Approval,
	// then Complete with a result whose Approval holds it; Complete with
	// none once Step.Approval.Deadline passed times the wait out.
	StepApproval
	// StepJudge is Complete's answer when the state's verdict is the LLM
	// judge's: nothing changed; the driver asks Step.Judge and calls
	// Complete again with the same result, its Judgement set.
	StepJudge
	// StepNext is Complete's answer when the state is complete: call Plan.
	StepNext
	// StepSearch is Complete's answer, with Options.SearchApart, when the
	// state's verdict is a pattern search the runner did not make: nothing
	// changed; the driver runs Step.Search (away from its own loop) and
	// calls Complete again with the same result, its Verdict set (see
	// Searched).
	StepSearch
	// StepPaused means the run's budget is spent (spec.budget, onExceeded
	// Pause): the run is Paused, Step.Paused says why, and nothing runs
	// until the budget is raised; call Plan again then.
	StepPaused
)

func (k StepKind) String() string {
	return [...]string{"Action", "Evaluate", "Wait", "Done", "Loop", "Approval", "Judge", "Next", "Search", "Paused"}[k]
}

// Step is what Plan (or Complete) asks of the driver.
type Step struct {
	Kind     StepKind
	Action   *Action
	Loop     *SubLoop
	Judge    *evaluate.JudgeRequest
	Approval *ApprovalRequest
	Search   *Search
	// WaitUntil is when a StepWait's wait is over.
	WaitUntil time.Time
	// Paused says why a StepPaused run holds (what it spent of which limit).
	Paused string
	// InFlight says Plan found the step's action (or clone, push, exit
	// hook) begun before, not begun now: a driver that lost track of it (a
	// restart) looks for it before it starts it again.
	InFlight bool
}

// Judged is res with the LLM judge's answer to the StepJudge question
// Complete asked about it; for a state without an action (res nil), a
// result holding only the answer.
func Judged(res *ActionResult, answer evaluate.Result) *ActionResult {
	if res == nil {
		res = &ActionResult{}
	}
	res.Judgement = &answer
	return res
}

// turn is one call of the engine (Plan, Complete, ...): it accumulates the
// events of the call and numbers them.
type turn struct {
	m      *Machine
	run    *v1alpha1.RunState
	now    time.Time
	events []Event
	// answer is the LLM judge's verdict Complete was given.
	answer *evaluate.Result
	// decided is the verdict Complete was given, made where the action ran
	// or by a StepSearch.
	decided *evaluate.Result
	// signal is the signal the state's action printed (see signals.go).
	signal *Signal
	// budgetRouted: the budget sent the run to budget.state, which is
	// entered whatever it spends.
	budgetRouted bool
	// visitCost is what the state's action and judge call completed in
	// this turn cost, in millionths of a dollar (its cost ceiling).
	visitCost int64
}

func (m *Machine) begin(run *v1alpha1.RunState, now time.Time) *turn {
	return &turn{m: m, run: run, now: now}
}

func (t *turn) emit(typ string, data map[string]any) {
	t.run.LastSeq++
	t.events = append(t.events, Event{Seq: t.run.LastSeq, Type: typ, Time: t.now, Data: data})
}

func (t *turn) done() []Event {
	ts := metav1.NewTime(t.now)
	t.run.UpdatedAt = &ts
	return t.events
}

// Start begins a new run in run (which should be empty), with the given id.
func (m *Machine) Start(run *v1alpha1.RunState, runID string, now time.Time) []Event {
	*run = v1alpha1.RunState{}
	t := m.begin(run, now)
	ts := metav1.NewTime(now)
	run.RunID = runID
	run.CurrentState = m.spec.Initial
	run.StartedAt = &ts
	run.Phase = v1alpha1.PhaseRunning
	t.emit(EventLoopStart, LoopStartEvent{Loop: m.name}.Data())
	return t.done()
}

// Resume continues a run that stopped (the process died, or it was
// interrupted). It books the time already spent, and says so when the action
// in flight will run again. ok is false when the run cannot be resumed
// because it completed or failed.
func (m *Machine) Resume(run *v1alpha1.RunState, now time.Time) ([]Event, bool) {
	if run.Phase != v1alpha1.PhaseRunning && run.Phase != v1alpha1.PhaseInterrupted && run.Phase != v1alpha1.PhaseSuspended && run.Phase != v1alpha1.PhasePaused {
		return nil, false
	}
	t := m.begin(run, now)
	if run.UpdatedAt != nil {
		since := run.StartedAt
		if run.ResumedAt != nil {
			since = run.ResumedAt
		}
		if since != nil && run.UpdatedAt.After(since.Time) {
			run.AccumulatedMs = addMs(run.AccumulatedMs, run.UpdatedAt.Sub(since.Time).Milliseconds())
		}
	}
	resumed := LoopResumeEvent{Loop: m.name, FromState: run.CurrentState, Iteration: run.Iteration}
	if run.TerminatedBy == v1alpha1.TerminatedHandoff && run.Message != "" {
		resumed.FromHandoff, resumed.ContinuationPrompt = true, run.Message
	}
	ts := metav1.NewTime(now)
	run.ResumedAt = &ts
	run.CapSummary = "" // as little-loops: a resumed run may summarise again
	run.Routed, run.RoutedFromLoop = false, false
	if run.Phase != v1alpha1.PhasePaused { // the budget check says when a paused run goes on
		run.Phase = v1alpha1.PhaseRunning
	}
	run.TerminatedBy = ""
	run.Message = ""
	t.emit(EventLoopResume, resumed.Data())
	if a := run.Action; a.IsAction() {
		t.emit(EventActionRestarted, RestartedEvent{State: a.State, Iteration: a.Iteration, Action: a.Command}.Data())
		a.StartedAt = &ts
	}
	return t.done(), true
}

// Interrupt stops the run where it is (Ctrl-C, a stop request). The action in
// flight stays recorded, so Resume runs it again.
func (m *Machine) Interrupt(run *v1alpha1.RunState, now time.Time, reason string) []Event {
	t := m.begin(run, now)
	t.finish(v1alpha1.TerminatedStopped, reason)
	return t.done()
}

// Elapsed is the run's running time: time before the last resume plus time since.
func Elapsed(run *v1alpha1.RunState, now time.Time) time.Duration {
	since := run.StartedAt
	if run.ResumedAt != nil {
		since = run.ResumedAt
	}
	d := msDuration(run.AccumulatedMs)
	if since != nil {
		d = addDuration(d, now.Sub(since.Time))
	}
	return d
}

// maxDuration is the longest time.Duration, some 292 years.
const maxDuration = time.Duration(math.MaxInt64)

// msDuration is ms milliseconds, saturated at maxDuration: an
// accumulated_ms near the int64 bound (a state file, an import) is a very
// long time, never a negative one that would disable the loop's timeout.
func msDuration(ms int64) time.Duration {
	if ms > int64(maxDuration/time.Millisecond) {
		return maxDuration
	}
	return time.Duration(ms) * time.Millisecond
}

// addDuration is a+b for a >= 0, saturated at maxDuration.
func addDuration(a, b time.Duration) time.Duration {
	if b > 0 && a > maxDuration-b {
		return maxDuration
	}
	return a + b
}

// addMs is a+b milliseconds for b >= 0, saturated at the int64 bound.
func addMs(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// vars builds the template variables for the current state.
func (t *turn) vars() *interpolate.Vars {
	v := &interpolate.Vars{
		Context:   t.m.context,
		Captured:  t.run.Captured,
		Prev:      t.run.PrevResult,
		StateName: t.run.CurrentState,
		Iteration: t.run.Iteration,
		LoopName:  t.m.name,
		RunID:     t.run.RunID,
		Elapsed:   Elapsed(t.run, t.now),
		Env:       t.m.opts.Env,
		Messages:  t.run.Messages,
	}
	if t.run.StartedAt != nil {
		v.StartedAt = t.run.StartedAt.Time
	}
	if st, ok := t.m.spec.States[t.run.CurrentState]; ok && len(st.FragmentParams) > 0 {
		// Bindings expand against the rest; one that cannot is left out,
		// and a template reading it says so.
		params := make(map[string]any, len(st.FragmentParams))
		for k, raw := range st.FragmentParams {
			if one, err := expandWith(map[string]apiextensionsJSON{k: raw}, v); err == nil {
				params[k] = one[k]
			}
		}
		v.Param = params
	}
	return v
}

// Little-loops' names for a run stopped by its step cap and its pass cap.
const (
	stepCapLittleLoops = "max_steps"
	passCapLittleLoops = "max_iterations_reached"
)

// TerminationName is how events and messages name a termination reason:
// for a loop from a little-loops file, the step cap is max_steps and the
// pass cap max_iterations_reached.
func TerminationName(by v1alpha1.TerminationReason, littleLoops bool) string {
	switch {
	case littleLoops && by == v1alpha1.TerminatedMaxIterations:
		return stepCapLittleLoops
	case littleLoops && by == v1alpha1.TerminatedMaxPasses:
		return passCapLittleLoops
	}
	return string(by)
}

// finish ends the run.
func (t *turn) finish(by v1alpha1.TerminationReason, message string) {
	run := t.run
	failureTerminal := false
	switch by {
	case v1alpha1.TerminatedTerminal:
		st := t.m.spec.States[run.CurrentState]
		failureTerminal = st.IsFailure(run.CurrentState)
		run.Phase = v1alpha1.PhaseCompleted
		if failureTerminal {
			run.Phase = v1alpha1.PhaseFailed
		}
	case v1alpha1.TerminatedMaxIterations, v1alpha1.TerminatedMaxPasses, v1alpha1.TerminatedStopped,
		v1alpha1.TerminatedInterrupted, v1alpha1.TerminatedHandoff:
		run.Phase = v1alpha1.PhaseInterrupted
	default:
		run.Phase = v1alpha1.PhaseFailed
	}
	if by != v1alpha1.TerminatedStopped {
		run.Action = nil
	}
	run.TerminatedBy = by
	run.Message = message
	run.NextStepAt = nil
	if run.Transient != nil {
		run.Transient.Waiting = ""
	}
	t.emit(EventLoopComplete, LoopCompleteEvent{FinalState: run.CurrentState, Iterations: run.Iteration,
		TerminatedBy: TerminationName(by, t.m.opts.LittleLoops), FailureTerminal: failureTerminal, Error: message}.Data())
}

// IsFailureTerminal reports whether a finished run ended in a failure terminal state.
func IsFailureTerminal(run *v1alpha1.RunState) bool {
	return run.TerminatedBy == v1alpha1.TerminatedTerminal && run.Phase == v1alpha1.PhaseFailed
}

// RestartAction says that the action in flight is started again because the
// process that ran it is gone (an operator restart lost a local action).
func (m *Machine) RestartAction(run *v1alpha1.RunState, now time.Time) []Event {
	a := run.Action
	if a == nil {
		return nil
	}
	t := m.begin(run, now)
	ts := metav1.NewTime(now)
	a.StartedAt = &ts
	t.emit(EventActionRestarted, RestartedEvent{State: a.State, Iteration: a.Iteration, Action: a.Command}.Data())
	return t.done()
}

// Record appends an event of the driver's own (a spec change, a note) to the
// run's numbered events.
func (m *Machine) Record(run *v1alpha1.RunState, now time.Time, typ string, data map[string]any) []Event {
	t := m.begin(run, now)
	t.emit(typ, data)
	return t.done()
}

// Restore puts run back to a checkpoint's state (from): where it was, its
// iteration, captured results, last result and counters. The run's own
// identity, start time and event numbering stay; it is running again, with
// nothing in flight. typ (EventLoopFork or EventLoopRewind) and data say
// where the state came from.
func (m *Machine) Restore(run *v1alpha1.RunState, from *v1alpha1.RunState, now time.Time, typ string, data map[string]any) []Event {
	t := m.begin(run, now)
	prevIteration, prevState := run.Iteration, run.CurrentState
	run.CurrentState = from.CurrentState
	run.Iteration = from.Iteration
	run.Passes = from.Passes
	run.Captured = from.Captured
	run.Messages = from.Messages
	run.PrevResult = from.PrevResult
	run.LastResult = from.LastResult
	run.EdgeRevisits = from.EdgeRevisits
	run.RetryCounts = from.RetryCounts
	run.Retries = 0
	run.Transient = nil
	run.Action = nil
	run.NextStepAt = nil
	run.Phase = v1alpha1.PhaseRunning
	run.TerminatedBy = ""
	run.Message = ""
	if typ == EventLoopRewind {
		data = LoopRewindEvent{State: from.CurrentState, Iteration: from.Iteration, FromState: prevState, FromIteration: prevIteration}.Data()
	} else {
		data = LoopForkEvent{Source: str(data, "source"), State: from.CurrentState, Iteration: from.Iteration}.Data()
	}
	t.emit(typ, data)
	return t.done()
}

// RewoundRunID names the run after a rewind: the run's id with a rewind
// count (-w1, -w2, ...), so the actions of repeated iterations get names of
// their own.
func RewoundRunID(id string) string {
	base, n := id, 0
	if i := strings.LastIndex(id, "-w"); i > 0 {
		if k, err := strconv.Atoi(id[i+2:]); err == nil && k > 0 {
			base, n = id[:i], k
		}
	}
	return fmt.Sprintf("%s-w%d", base, n+1)
}

// RunDir is the run's context.run_dir when it is a directory name.
func (m *Machine) RunDir() string {
	d, _ := m.context["run_dir"].(string)
	return d
}
