package executor

import (
	"encoding/json"
	"strconv"
)

// The events of a run's life, its actions and what they leave behind.
// Each has a struct whose Data is the payload the log keeps (little-loops'
// keys, an optional key only when set) and an accessor that reads it back,
// from the engine's own payload or from one read back from JSON.

// EventData is what every typed event is: its payload as the log keeps it.
type EventData interface {
	Data() map[string]any
}

// LoopStartEvent is a loop_start event: a run began.
type LoopStartEvent struct {
	Loop string
}

// Data is the event's payload as the log keeps it.
func (e LoopStartEvent) Data() map[string]any { return map[string]any{"loop": e.Loop} }

// LoopStartOf reads a loop_start event.
func LoopStartOf(e Event) LoopStartEvent { return LoopStartEvent{Loop: str(e.Data, "loop")} }

// LoopResumeEvent is a loop_resume event: a stopped run goes on.
type LoopResumeEvent struct {
	Loop, FromState string
	Iteration       int32
	// FromHandoff says the run stopped on a handoff, whose continuation
	// ContinuationPrompt is.
	FromHandoff        bool
	ContinuationPrompt string
}

// Data is the event's payload as the log keeps it.
func (e LoopResumeEvent) Data() map[string]any {
	data := map[string]any{"loop": e.Loop, "from_state": e.FromState, "iteration": e.Iteration}
	if e.FromHandoff {
		data["from_handoff"], data["continuation_prompt"] = true, e.ContinuationPrompt
	}
	return data
}

// LoopResumeOf reads a loop_resume event.
func LoopResumeOf(e Event) LoopResumeEvent {
	return LoopResumeEvent{Loop: str(e.Data, "loop"), FromState: str(e.Data, "from_state"), Iteration: num32(e.Data, "iteration"),
		FromHandoff: boolean(e.Data, "from_handoff"), ContinuationPrompt: str(e.Data, "continuation_prompt")}
}

// StateEnterEvent is a state_enter event: an iteration began in State.
type StateEnterEvent struct {
	State string
	// Iteration counts the run's state visits; IterationCount its full
	// passes (a maintain loop's restarts).
	Iteration, IterationCount int32
	// Flushed says the state's action runs once more before the run
	// ends by a cap (its verdict is not judged).
	Flushed bool
}

// Data is the event's payload as the log keeps it.
func (e StateEnterEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "iteration": e.Iteration, "iteration_count": e.IterationCount}
	if e.Flushed {
		data["flushed"] = true
	}
	return data
}

// StateEnterOf reads a state_enter event.
func StateEnterOf(e Event) StateEnterEvent {
	return StateEnterEvent{State: str(e.Data, "state"), Iteration: num32(e.Data, "iteration"),
		IterationCount: num32(e.Data, "iteration_count"), Flushed: boolean(e.Data, "flushed")}
}

// ActionStartEvent is an action_start event: the state's action (a
// command, or an agent's prompt) starts.
type ActionStartEvent struct {
	Action   string
	IsPrompt bool
	// Retry counts the tries before this one; 0 for the first.
	Retry int32
}

// Data is the event's payload as the log keeps it.
func (e ActionStartEvent) Data() map[string]any {
	data := map[string]any{"action": e.Action, "is_prompt": e.IsPrompt}
	if e.Retry > 0 {
		data["retry"] = e.Retry
	}
	return data
}

// ActionStartOf reads an action_start event.
func ActionStartOf(e Event) ActionStartEvent {
	return ActionStartEvent{Action: str(e.Data, "action"), IsPrompt: boolean(e.Data, "is_prompt"), Retry: num32(e.Data, "retry")}
}

// EventUsage is what one agent action or judge call used, as its event
// tells it.
type EventUsage struct {
	InputTokens, OutputTokens, CacheReadTokens, CacheCreationTokens int64
	// CostUSD is what the engine priced the call at, when Priced: the
	// price table knew its model (else the event has no cost_usd).
	CostUSD float64
	Priced  bool
}

// Data is the usage as its event keeps it.
func (u EventUsage) Data() map[string]any {
	data := map[string]any{}
	u.put(data)
	return data
}

// put writes u with little-loops' token keys.
func (u EventUsage) put(data map[string]any) {
	data["input_tokens"], data["output_tokens"] = u.InputTokens, u.OutputTokens
	data["cache_read_tokens"], data["cache_creation_tokens"] = u.CacheReadTokens, u.CacheCreationTokens
	if u.Priced {
		data["cost_usd"] = u.CostUSD
	}
}

// usageKeys are the keys put writes.
var usageKeys = []string{"input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "cost_usd"}

// usageOf reads what put wrote; nil when the event has no usage.
func usageOf(data map[string]any) *EventUsage {
	if _, ok := data["input_tokens"]; !ok {
		return nil
	}
	_, priced := data["cost_usd"]
	return &EventUsage{InputTokens: num(data, "input_tokens"), OutputTokens: num(data, "output_tokens"),
		CacheReadTokens: num(data, "cache_read_tokens"), CacheCreationTokens: num(data, "cache_creation_tokens"),
		CostUSD: flt(data, "cost_usd"), Priced: priced}
}

// ActionCompleteEvent is an action_complete event: what the action did.
type ActionCompleteEvent struct {
	ExitCode   int
	DurationMs int64
	// OutputPreview and StderrPreview are the ends of what the action
	// printed, white space stripped; "" is written as null.
	OutputPreview, StderrPreview string
	IsPrompt                     bool
	// Failure is why the action could not run or finish (its Reason and
	// Message); nil when it ran.
	Failure *ActionFailure
	// Effort is the agent's effort, when the state or the loop sets one.
	Effort string
	// Model and Usage are what the agent reported using; Usage is nil for
	// an action that reported none (Model is then left out; an agent that
	// named no model has "unknown", as little-loops writes it).
	Model string
	Usage *EventUsage
	// Metered: Usage is what looprun's model gateway counted the action's
	// calls used (metered: true); Reported is then what the agent printed
	// (reported_usage, nil for nothing), never trusted.
	Metered  bool
	Reported *EventUsage
}

// Data is the event's payload as the log keeps it.
func (e ActionCompleteEvent) Data() map[string]any {
	data := map[string]any{
		"exit_code":      e.ExitCode,
		"duration_ms":    e.DurationMs,
		"output_preview": orNull(e.OutputPreview),
		"stderr_preview": orNull(e.StderrPreview),
		"is_prompt":      e.IsPrompt,
	}
	if f := e.Failure; f != nil {
		data["failure"], data["failure_message"] = f.Reason, f.Message
	}
	if e.Effort != "" {
		data["effort"] = e.Effort
	}
	if e.Usage != nil {
		data["model"] = orNull(e.Model)
		e.Usage.put(data)
	}
	if e.Metered {
		data["metered"] = true
		if e.Reported != nil {
			data["reported_usage"] = e.Reported.Data()
		}
	}
	return data
}

// orNull is s, or null for "".
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ActionCompleteOf reads an action_complete event.
func ActionCompleteOf(e Event) ActionCompleteEvent {
	a := ActionCompleteEvent{ExitCode: int(num(e.Data, "exit_code")), DurationMs: num(e.Data, "duration_ms"),
		OutputPreview: str(e.Data, "output_preview"), StderrPreview: str(e.Data, "stderr_preview"),
		IsPrompt: boolean(e.Data, "is_prompt"), Effort: str(e.Data, "effort"), Model: str(e.Data, "model"), Usage: usageOf(e.Data),
		Metered: boolean(e.Data, "metered")}
	if r, ok := e.Data["reported_usage"].(map[string]any); ok {
		a.Reported = usageOf(r)
	}
	if _, ok := e.Data["failure"]; ok {
		a.Failure = &ActionFailure{Reason: str(e.Data, "failure"), Message: str(e.Data, "failure_message")}
	}
	return a
}

// ActionErrorEvent is an action_error event: the action could not be
// prepared, and the run goes to Route.
type ActionErrorEvent struct {
	State, Error, Route string
}

// Data is the event's payload as the log keeps it.
func (e ActionErrorEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "error": e.Error, "route": e.Route}
}

// ActionErrorOf reads an action_error event.
func ActionErrorOf(e Event) ActionErrorEvent {
	return ActionErrorEvent{State: str(e.Data, "state"), Error: str(e.Data, "error"), Route: str(e.Data, "route")}
}

// EvaluateEvent is an evaluate event: the state's verdict, from the
// evaluator of Type.
type EvaluateEvent struct {
	Type, Verdict string
	// Details are the evaluator's own (what it compared, an error, a
	// judge's model), each evaluator's keys.
	Details map[string]any
	// Usage is what an LLM judge's call used; nil for other evaluators.
	Usage *EventUsage
}

// Data is the event's payload as the log keeps it: the details, then the
// type and verdict over any detail of that name.
func (e EvaluateEvent) Data() map[string]any {
	data := make(map[string]any, len(e.Details)+2)
	for k, v := range e.Details {
		data[k] = v
	}
	data["type"] = e.Type
	data["verdict"] = e.Verdict
	if e.Usage != nil {
		e.Usage.put(data)
	}
	return data
}

// EvaluateOf reads an evaluate event.
func EvaluateOf(e Event) EvaluateEvent {
	ev := EvaluateEvent{Type: str(e.Data, "type"), Verdict: str(e.Data, "verdict"), Usage: usageOf(e.Data), Details: map[string]any{}}
	for k, v := range e.Data {
		switch {
		case k == "type" || k == "verdict" || k == depthKey:
		case ev.Usage != nil && isUsageKey(k):
		default:
			ev.Details[k] = v
		}
	}
	return ev
}

func isUsageKey(k string) bool {
	for _, u := range usageKeys {
		if k == u {
			return true
		}
	}
	return false
}

// LoopCompleteEvent is a loop_complete event: the run ended.
type LoopCompleteEvent struct {
	FinalState string
	Iterations int32
	// TerminatedBy is why, as the log names it (little-loops' names in
	// its mode).
	TerminatedBy    string
	FailureTerminal bool
	// Error is the run's message; "" for none.
	Error string
}

// Data is the event's payload as the log keeps it.
func (e LoopCompleteEvent) Data() map[string]any {
	data := map[string]any{
		"final_state":      e.FinalState,
		"iterations":       e.Iterations,
		"terminated_by":    e.TerminatedBy,
		"failure_terminal": e.FailureTerminal,
	}
	if e.Error != "" {
		data["error"] = e.Error
	}
	return data
}

// LoopCompleteOf reads a loop_complete event.
func LoopCompleteOf(e Event) LoopCompleteEvent {
	return LoopCompleteEvent{FinalState: str(e.Data, "final_state"), Iterations: num32(e.Data, "iterations"),
		TerminatedBy: str(e.Data, "terminated_by"), FailureTerminal: boolean(e.Data, "failure_terminal"), Error: str(e.Data, "error")}
}

// SpecChangedEvent is a spec_changed event: a new generation of the spec
// applies from the next state.
type SpecChangedEvent struct {
	Generation int64
}

// Data is the event's payload as the log keeps it.
func (e SpecChangedEvent) Data() map[string]any { return map[string]any{"generation": e.Generation} }

// SpecChangedOf reads a spec_changed event.
func SpecChangedOf(e Event) SpecChangedEvent {
	return SpecChangedEvent{Generation: num(e.Data, "generation")}
}

// LoopForkEvent is a loop_fork event: the run started from the checkpoint
// of loop Source ("" leaves it out), in State at Iteration.
type LoopForkEvent struct {
	Source, State string
	Iteration     int32
}

// Data is the event's payload as the log keeps it.
func (e LoopForkEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "iteration": e.Iteration}
	if e.Source != "" {
		data["source"] = e.Source
	}
	return data
}

// LoopForkOf reads a loop_fork event.
func LoopForkOf(e Event) LoopForkEvent {
	return LoopForkEvent{Source: str(e.Data, "source"), State: str(e.Data, "state"), Iteration: num32(e.Data, "iteration")}
}

// LoopRewindEvent is a loop_rewind event: the run went back from
// FromState at FromIteration to one of its checkpoints, State at
// Iteration.
type LoopRewindEvent struct {
	State, FromState         string
	Iteration, FromIteration int32
}

// Data is the event's payload as the log keeps it.
func (e LoopRewindEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "iteration": e.Iteration, "from_state": e.FromState, "from_iteration": e.FromIteration}
}

// LoopRewindOf reads a loop_rewind event.
func LoopRewindOf(e Event) LoopRewindEvent {
	return LoopRewindEvent{State: str(e.Data, "state"), Iteration: num32(e.Data, "iteration"),
		FromState: str(e.Data, "from_state"), FromIteration: num32(e.Data, "from_iteration")}
}

// CaptureTruncatedEvent is a capture_truncated event: capture Capture
// keeps KeptBytes, cut by Bound ("capture": its own bound; "run_state":
// the run state's budget for captures).
type CaptureTruncatedEvent struct {
	Capture   string
	KeptBytes int
	Bound     string
}

// Data is the event's payload as the log keeps it.
func (e CaptureTruncatedEvent) Data() map[string]any {
	return map[string]any{"capture": e.Capture, "kept_bytes": e.KeptBytes, "bound": e.Bound}
}

// CaptureTruncatedOf reads a capture_truncated event.
func CaptureTruncatedOf(e Event) CaptureTruncatedEvent {
	return CaptureTruncatedEvent{Capture: str(e.Data, "capture"), KeptBytes: int(num(e.Data, "kept_bytes")), Bound: str(e.Data, "bound")}
}

// HandoffDetectedEvent is a handoff_detected event: the action asked for a
// handoff, and the run pauses with Continuation.
type HandoffDetectedEvent struct {
	State        string
	Iteration    int32
	Continuation string
}

// Data is the event's payload as the log keeps it.
func (e HandoffDetectedEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "iteration": e.Iteration, "continuation": e.Continuation}
}

// HandoffDetectedOf reads a handoff_detected event.
func HandoffDetectedOf(e Event) HandoffDetectedEvent {
	return HandoffDetectedEvent{State: str(e.Data, "state"), Iteration: num32(e.Data, "iteration"), Continuation: str(e.Data, "continuation")}
}

// MessagesAppendEvent is a messages_append event: state State appended
// Message to the run's messages.
type MessagesAppendEvent struct {
	State, Message string
}

// Data is the event's payload as the log keeps it.
func (e MessagesAppendEvent) Data() map[string]any {
	return map[string]any{"message": e.Message, "state": e.State}
}

// MessagesAppendOf reads a messages_append event.
func MessagesAppendOf(e Event) MessagesAppendEvent {
	return MessagesAppendEvent{State: str(e.Data, "state"), Message: str(e.Data, "message")}
}

// GitCloneEvent is a git_clone event: the run's checkout of URL (its
// credentials removed) at Commit.
type GitCloneEvent struct {
	URL, Commit string
	// Revision is the revision asked for; "" for the default branch.
	Revision string
}

// Data is the event's payload as the log keeps it.
func (e GitCloneEvent) Data() map[string]any {
	data := map[string]any{"url": e.URL, "commit": e.Commit}
	if e.Revision != "" {
		data["revision"] = e.Revision
	}
	return data
}

// GitCloneOf reads a git_clone event.
func GitCloneOf(e Event) GitCloneEvent {
	return GitCloneEvent{URL: str(e.Data, "url"), Commit: str(e.Data, "commit"), Revision: str(e.Data, "revision")}
}

// MaxStepsSummaryEvent is a max_steps_summary event: the run reached its
// step cap at Iterations, and runs its summary state before it ends.
type MaxStepsSummaryEvent struct {
	Iterations   int32
	SummaryState string
}

// Data is the event's payload as the log keeps it.
func (e MaxStepsSummaryEvent) Data() map[string]any {
	return map[string]any{"iterations": e.Iterations, "summary_state": e.SummaryState}
}

// MaxStepsSummaryOf reads a max_steps_summary event.
func MaxStepsSummaryOf(e Event) MaxStepsSummaryEvent {
	return MaxStepsSummaryEvent{Iterations: num32(e.Data, "iterations"), SummaryState: str(e.Data, "summary_state")}
}

// MaxPassesSummaryEvent is a max_iterations_reached_summary event: a
// maintain loop reached its cap of passes at IterationCount, and runs its
// summary state before it ends.
type MaxPassesSummaryEvent struct {
	IterationCount int32
	SummaryState   string
}

// Data is the event's payload as the log keeps it.
func (e MaxPassesSummaryEvent) Data() map[string]any {
	return map[string]any{"iteration_count": e.IterationCount, "summary_state": e.SummaryState}
}

// MaxPassesSummaryOf reads a max_iterations_reached_summary event.
func MaxPassesSummaryOf(e Event) MaxPassesSummaryEvent {
	return MaxPassesSummaryEvent{IterationCount: num32(e.Data, "iteration_count"), SummaryState: str(e.Data, "summary_state")}
}

// WorktreeEvent is an event of a sub-loop's worktree, which the local
// driver writes (localrun.EventWorktreeAttached, ...Detached, ...Error):
// the worktree of Branch at Path was attached or detached, or could not be
// made, for Error.
type WorktreeEvent struct {
	Branch, Path, Error string
}

// Data is the event's payload as the log keeps it: the path, or the error.
func (e WorktreeEvent) Data() map[string]any {
	data := map[string]any{"branch": e.Branch}
	if e.Error != "" {
		data["error"] = e.Error
	} else {
		data["path"] = e.Path
	}
	return data
}

// WorktreeOf reads an event of a sub-loop's worktree.
func WorktreeOf(e Event) WorktreeEvent {
	return WorktreeEvent{Branch: str(e.Data, "branch"), Path: str(e.Data, "path"), Error: str(e.Data, "error")}
}

// summaryEvent is the event of a cap that sends the run to its summary
// state: its payload, naming that state.
type summaryEvent interface {
	withSummary(state string) map[string]any
}

func (e MaxStepsSummaryEvent) withSummary(state string) map[string]any {
	e.SummaryState = state
	return e.Data()
}

func (e MaxPassesSummaryEvent) withSummary(state string) map[string]any {
	e.SummaryState = state
	return e.Data()
}

// depthKey marks an event a sub-loop's run wrote, forwarded into its
// parent's log: how deep below the parent it ran.
const depthKey = "depth"

// DepthOf is how deep below the run a forwarded event's sub-loop ran; 0
// for the run's own events.
func DepthOf(e Event) int { return int(num(e.Data, depthKey)) }

// Forwarded reports whether e is a sub-loop's event forwarded into its
// parent's log (it has a depth, 0 or more).
func Forwarded(e Event) bool {
	_, ok := e.Data[depthKey]
	return ok
}

// StatesNamed are the states an event of any type names: the state it is
// about, or the two a route joins.
func StatesNamed(e Event) []string {
	var out []string
	for _, k := range []string{"state", "from", "to"} {
		if s := str(e.Data, k); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// boolean is the boolean under k; false when there is none.
func boolean(data map[string]any, k string) bool {
	b, _ := data[k].(bool)
	return b
}

// flt is the number under k, as the engine wrote it or as JSON read it
// back; 0 when there is none.
func flt(data map[string]any, k string) float64 {
	switch v := data[k].(type) {
	case float64:
		return v
	case float32:
		return float64(v)
	case int:
		return float64(v)
	case int32:
		return float64(v)
	case int64:
		return float64(v)
	case json.Number:
		f, _ := strconv.ParseFloat(string(v), 64)
		return f
	}
	return 0
}

// optFlt is the number under k; nil when there is none.
func optFlt(data map[string]any, k string) *float64 {
	if _, ok := data[k]; !ok {
		return nil
	}
	f := flt(data, k)
	return &f
}

// optNum is the integer under k; nil when there is none.
func optNum(data map[string]any, k string) *int64 {
	if _, ok := data[k]; !ok {
		return nil
	}
	n := num(data, k)
	return &n
}

// strs is the list of strings under k, as the engine wrote it or as JSON
// read it back; nil when there is none.
func strs(data map[string]any, k string) []string {
	switch v := data[k].(type) {
	case []string:
		return v
	case []any:
		out := make([]string, 0, len(v))
		for _, s := range v {
			if s, ok := s.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
