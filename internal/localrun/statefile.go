// Package localrun runs a loop on this machine: it drives the executor,
// runs actions with the local runner, and keeps the run in
// .loops/.running/<name>.state.json and <name>.events.jsonl, in the format
// little-loops writes.
package localrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/safefile"
)

// StateFile is the JSON of <name>.state.json. The first fields are
// little-loops' own; the rest are what looprun needs to resume exactly.
type StateFile struct {
	LoopName      string                  `json:"loop_name"`
	CurrentState  string                  `json:"current_state"`
	Iteration     int32                   `json:"iteration"`
	Captured      map[string]CapturedFile `json:"captured"`
	PrevResult    *PrevFile               `json:"prev_result"`
	LastResult    *LastResultFile         `json:"last_result"`
	StartedAt     string                  `json:"started_at"`
	UpdatedAt     string                  `json:"updated_at"`
	Status        string                  `json:"status"`
	AccumulatedMs int64                   `json:"accumulated_ms"`
	// ContinuationPrompt is the text of the CONTEXT_HANDOFF: that paused
	// the run (status awaiting_continuation).
	ContinuationPrompt string `json:"continuation_prompt,omitempty"`
	// Messages is the run's messages log (append_to_messages).
	Messages []string `json:"messages,omitempty"`

	RunID             string               `json:"run_id,omitempty"`
	TerminatedBy      string               `json:"terminated_by,omitempty"`
	Error             string               `json:"error,omitempty"`
	IterationCount    int32                `json:"iteration_count,omitempty"`
	CapSummary        string               `json:"cap_summary,omitempty"`
	Routed            bool                 `json:"routed,omitempty"`
	RoutedFromLoop    bool                 `json:"routed_from_loop,omitempty"`
	EdgeRevisitCounts map[string]int32     `json:"edge_revisit_counts,omitempty"`
	RetryCounts       map[string]int32     `json:"retry_counts,omitempty"`
	ActionRetries     int32                `json:"action_retries,omitempty"`
	Stalls            map[string]StallFile `json:"stalls,omitempty"`
	ActiveAction      *ActionFile          `json:"active_action,omitempty"`
	NextStepAt        string               `json:"next_step_at,omitempty"`
	ResumedAt         string               `json:"resumed_at,omitempty"`
	LastSeq           int64                `json:"last_seq"`
	LoopFile          string               `json:"loop_file,omitempty"`
	Context           map[string]any       `json:"context,omitempty"`
	// Usage is what the run's agent actions used (looprun's own key).
	Usage *UsageFile `json:"usage,omitempty"`
	// Budget is where the run stands against its budget (looprun's own key).
	Budget *BudgetFile `json:"budget,omitempty"`
	// RateLimitRetries and ConsecutiveRateLimitExhaustions are the
	// rate-limit tries, as little-loops keeps them; TransientRetries the
	// other tries of a failure of a known cause (looprun's own key).
	RateLimitRetries                map[string]RateLimitFile `json:"rate_limit_retries,omitempty"`
	ConsecutiveRateLimitExhaustions int32                    `json:"consecutive_rate_limit_exhaustions,omitempty"`
	TransientRetries                *TransientFile           `json:"transient_retries,omitempty"`
	// ExitHook is what spec.onExit did at the run's end (looprun's own key).
	ExitHook *ExitHookFile `json:"exit_hook,omitempty"`
	// Git is what spec.runner.workspace.git did (looprun's own key).
	Git *GitFile `json:"git,omitempty"`
	// Trace is the run's place in a trace (looprun's own key).
	Trace *TraceFile `json:"trace,omitempty"`

	// FormatVersion is the state file's format: absent (1) in files
	// little-loops and early looprun wrote, FormatVersion now.
	FormatVersion int `json:"format_version,omitempty"`
}

// FormatVersion is the state file format this build writes. Version 1 (no
// format_version) is little-loops' own file; version 2 adds the format
// version itself and a run id, and is what looprun writes.
const FormatVersion = 2

// migrate brings a state file of an older format to FormatVersion, step by
// step; a newer format is refused, since fields this build does not know
// would be lost on the next save.
func (f *StateFile) migrate(path string) error {
	if f.FormatVersion > FormatVersion {
		return fmt.Errorf("%s has state format %d; this looprun reads formats up to %d: use a newer looprun", path, f.FormatVersion, FormatVersion)
	}
	if f.FormatVersion <= 1 {
		// 1 -> 2: a run id (little-loops has none) so that actions and
		// exports can name the run.
		if f.RunID == "" {
			f.RunID = legacyRunID(f.LoopName, f.StartedAt)
		}
		f.FormatVersion = 2
	}
	return nil
}

// legacyRunID names a run little-loops started, which has no id: its loop
// and its start to the microsecond, as little-loops writes started_at, so
// that runs started in the same second get different ids (and different
// sub-loop children).
func legacyRunID(name, startedAt string) string {
	if t, err := time.Parse(time.RFC3339Nano, startedAt); err == nil {
		return name + "-" + t.Format("20060102T150405.000000")
	}
	return name + "-" + strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r == 'T' {
			return r
		}
		return -1
	}, startedAt)
}

// CapturedFile is one captured result. A sub-loop state's entry is as
// little-loops writes it: how the child ended (terminated_by, ...) beside
// the child's captures, each under its own name.
type CapturedFile struct {
	Output     string `json:"output"`
	Stderr     string `json:"stderr"`
	ExitCode   int32  `json:"exit_code"`
	DurationMs int64  `json:"duration_ms"`
	Verdict    string `json:"verdict,omitempty"`
	// FailureType and TimeoutKind say why an action failed and how it
	// timed out (empty: it did not).
	FailureType string `json:"failure_type,omitempty"`
	TimeoutKind string `json:"timeout_kind,omitempty"`
	// EventStream says Output is a sub-loop's event stream, written as
	// little-loops writes it: exit_code null, no stderr, no duration.
	EventStream bool `json:"-"`

	TerminatedBy    string                   `json:"terminated_by,omitempty"`
	FailureTerminal bool                     `json:"failure_terminal,omitempty"`
	Error           string                   `json:"error,omitempty"`
	Children        map[string]*CapturedFile `json:"-"`
}

// capturedFields is CapturedFile without its methods, for encoding/json.
type capturedFields CapturedFile

// subLoopEnding is how a sub-loop ended, as its state's entry writes it.
type subLoopEnding struct {
	TerminatedBy    string `json:"terminated_by,omitempty"`
	FailureTerminal bool   `json:"failure_terminal,omitempty"`
	Error           string `json:"error,omitempty"`
}

func (c CapturedFile) ending() subLoopEnding {
	return subLoopEnding{c.TerminatedBy, c.FailureTerminal, c.Error}
}

// MarshalJSON writes the fields, then each child capture under its name.
func (c CapturedFile) MarshalJSON() ([]byte, error) {
	var v any = capturedFields(c)
	switch {
	case c.EventStream:
		v = struct {
			Output   string `json:"output"`
			ExitCode *int32 `json:"exit_code"`
			Verdict  string `json:"verdict,omitempty"`
			subLoopEnding
		}{c.Output, nil, c.Verdict, c.ending()}
	case c.TerminatedBy != "" && c.Output == "" && c.Stderr == "" && c.ExitCode == 0 && c.DurationMs == 0:
		// A sub-loop state's entry: how the child ended, no output of
		// its own.
		v = struct {
			Verdict string `json:"verdict,omitempty"`
			subLoopEnding
		}{c.Verdict, c.ending()}
	}
	b, err := json.Marshal(v)
	if err != nil || len(c.Children) == 0 {
		return b, err
	}
	children, err := json.Marshal(c.Children)
	if err != nil {
		return nil, err
	}
	return append(append(b[:len(b)-1], ','), children[1:]...), nil
}

// UnmarshalJSON reads the fields; any other key holding an object is a
// child capture.
func (c *CapturedFile) UnmarshalJSON(data []byte) error {
	var f capturedFields
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	if code, ok := all["exit_code"]; ok && string(code) == "null" {
		f.EventStream = true
	}
	for k, raw := range all {
		if len(raw) == 0 || raw[0] != '{' {
			continue
		}
		var child CapturedFile
		if err := json.Unmarshal(raw, &child); err != nil {
			return fmt.Errorf("captured %s: %w", k, err)
		}
		if f.Children == nil {
			f.Children = map[string]*CapturedFile{}
		}
		f.Children[k] = &child
	}
	*c = CapturedFile(f)
	return nil
}

// capturedFile is a run state's capture as the state file keeps it: a
// sub-loop's captures nested as little-loops nests them (the capture at
// inner.greeting inside inner's entry).
func capturedFile(c v1alpha1.CapturedResult) CapturedFile {
	f := CapturedFile{Output: c.Output, Stderr: c.Stderr, ExitCode: c.ExitCode, DurationMs: c.DurationMs, Verdict: c.Verdict,
		FailureType: c.FailureType, TimeoutKind: c.TimeoutKind, EventStream: c.EventStream}
	if l := c.Loop; l != nil {
		f.TerminatedBy, f.FailureTerminal, f.Error = l.TerminatedBy, l.FailureTerminal, l.Error
		for _, k := range slices.Sorted(maps.Keys(l.Captured)) {
			cc := l.Captured[k]
			at := &f
			path := strings.Split(k, ".")
			for _, p := range path {
				if at.Children == nil {
					at.Children = map[string]*CapturedFile{}
				}
				if at.Children[p] == nil {
					at.Children[p] = &CapturedFile{}
				}
				at = at.Children[p]
			}
			at.Output, at.Stderr, at.ExitCode, at.DurationMs, at.Verdict = cc.Output, cc.Stderr, cc.ExitCode, cc.DurationMs, cc.Verdict
			at.FailureType, at.TimeoutKind = cc.FailureType, cc.TimeoutKind
			at.TerminatedBy, at.FailureTerminal, at.Error = cc.TerminatedBy, cc.FailureTerminal, cc.Error
		}
	}
	return f
}

// capturedResult is a state file's capture in a run state.
func (f CapturedFile) capturedResult() v1alpha1.CapturedResult {
	c := v1alpha1.CapturedResult{Output: f.Output, Stderr: f.Stderr, ExitCode: f.ExitCode, DurationMs: f.DurationMs, Verdict: f.Verdict,
		FailureType: f.FailureType, TimeoutKind: f.TimeoutKind, EventStream: f.EventStream}
	if f.TerminatedBy != "" || len(f.Children) > 0 {
		c.Loop = &v1alpha1.SubLoopResult{TerminatedBy: f.TerminatedBy, FailureTerminal: f.FailureTerminal, Error: f.Error}
		c.Loop.Captured = map[string]v1alpha1.ChildCapture{}
		f.flattenChildren("", c.Loop.Captured)
	}
	return c
}

// flattenChildren puts f's child captures into into, each under its path
// (the names that lead to it, joined with dots).
func (f CapturedFile) flattenChildren(prefix string, into map[string]v1alpha1.ChildCapture) {
	for k, cc := range f.Children {
		into[prefix+k] = v1alpha1.ChildCapture{
			Output: cc.Output, Stderr: cc.Stderr, ExitCode: cc.ExitCode, DurationMs: cc.DurationMs, Verdict: cc.Verdict,
			FailureType: cc.FailureType, TimeoutKind: cc.TimeoutKind,
			TerminatedBy: cc.TerminatedBy, FailureTerminal: cc.FailureTerminal, Error: cc.Error,
		}
		cc.flattenChildren(prefix+k+".", into)
	}
}

// StallFile is a stall evaluator's counter (little-loops keeps these in
// .loops/tmp files).
type StallFile struct {
	Hash  string `json:"hash"`
	Count int32  `json:"count"`
}

// PrevFile is the previous state's result.
type PrevFile struct {
	Output      string `json:"output"`
	ExitCode    int32  `json:"exit_code"`
	State       string `json:"state"`
	TimeoutKind string `json:"timeout_kind,omitempty"`
}

// LastResultFile is the last evaluation.
type LastResultFile struct {
	Verdict string          `json:"verdict"`
	Details json.RawMessage `json:"details"`
}

// ActionFile is the action in flight.
type ActionFile struct {
	State          string `json:"state"`
	Iteration      int32  `json:"iteration"`
	Command        string `json:"command"`
	Agent          bool   `json:"agent,omitempty"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty"`
	StartedAt      string `json:"started_at,omitempty"`
	// Loop and Child: the sub-loop in flight and its run's name.
	Loop  string `json:"loop,omitempty"`
	Child string `json:"child,omitempty"`
	// ChildUID: the child Loop's uid, for a run that came from a cluster.
	ChildUID string `json:"child_uid,omitempty"`
	// Flush: run once before the loop's timeout ends it.
	Flush bool `json:"flush,omitempty"`
	// Approval: the question of an approval state waiting for a person.
	Approval *ApprovalFile `json:"approval,omitempty"`
	// Verdict: a state without an action waiting for its verdict.
	Verdict bool `json:"verdict,omitempty"`
}

// ApprovalFile is an approval state's question while it waits.
type ApprovalFile struct {
	Message  string `json:"message,omitempty"`
	Deadline string `json:"deadline,omitempty"`
}

// Status values of the state file.
const (
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
	// StatusTimedOut: the loop's timeout ended the run.
	StatusTimedOut = "timed_out"
	// StatusAwaitingContinuation: an action's CONTEXT_HANDOFF: paused the run.
	StatusAwaitingContinuation = "awaiting_continuation"
	// StatusPaused: the run's budget is spent (looprun's own).
	StatusPaused = "paused"
)

// runStatus is the status a state file gives the run: as phaseToStatus,
// but timed_out for a run its timeout ended, as little-loops writes it.
func runStatus(run *v1alpha1.RunState) string {
	if run.Phase == v1alpha1.PhaseFailed && run.TerminatedBy == v1alpha1.TerminatedTimeout {
		return StatusTimedOut
	}
	if run.Phase == v1alpha1.PhaseInterrupted && run.TerminatedBy == v1alpha1.TerminatedHandoff {
		return StatusAwaitingContinuation
	}
	return phaseToStatus(run.Phase)
}

func phaseToStatus(p v1alpha1.Phase) string {
	switch p {
	case v1alpha1.PhaseCompleted:
		return StatusCompleted
	case v1alpha1.PhaseFailed:
		return StatusFailed
	case v1alpha1.PhaseInterrupted:
		return StatusInterrupted
	case v1alpha1.PhasePaused:
		return StatusPaused
	}
	return StatusRunning
}

func statusToPhase(s string) (v1alpha1.Phase, error) {
	switch s {
	case StatusRunning:
		return v1alpha1.PhaseRunning, nil
	case StatusCompleted:
		return v1alpha1.PhaseCompleted, nil
	case StatusFailed, StatusTimedOut:
		return v1alpha1.PhaseFailed, nil
	case StatusInterrupted, "user_stopped", StatusAwaitingContinuation:
		return v1alpha1.PhaseInterrupted, nil
	case StatusPaused:
		return v1alpha1.PhasePaused, nil
	}
	return "", fmt.Errorf("unknown status %q", s)
}

func fmtTime(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(s string) (*metav1.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, err
	}
	mt := metav1.NewTime(t)
	return &mt, nil
}

// encodeState writes a run state as a state file.
func encodeState(name, loopFile string, ctx map[string]any, run *v1alpha1.RunState) StateFile {
	f := StateFile{
		LoopName: name, CurrentState: run.CurrentState, Iteration: run.Iteration,
		Captured: map[string]CapturedFile{}, StartedAt: fmtTime(run.StartedAt), UpdatedAt: fmtTime(run.UpdatedAt),
		Status: runStatus(run), AccumulatedMs: run.AccumulatedMs,
		Messages: run.Messages,
		RunID:    run.RunID, TerminatedBy: string(run.TerminatedBy), Error: run.Message, IterationCount: run.Passes, CapSummary: string(run.CapSummary), Routed: run.Routed, RoutedFromLoop: run.RoutedFromLoop,
		EdgeRevisitCounts: run.EdgeRevisits, RetryCounts: run.RetryCounts, ActionRetries: run.Retries, NextStepAt: fmtTime(run.NextStepAt),
		ResumedAt: fmtTime(run.ResumedAt), LastSeq: run.LastSeq, LoopFile: loopFile, Context: ctx,
		FormatVersion: FormatVersion, Usage: usageFile(run.Usage), Budget: budgetFile(run.Budget),
		ExitHook: exitHookFile(run.ExitHook), Git: gitFile(run.Git), Trace: traceFile(run.Trace),
	}
	encodeTransient(&f, run.Transient)
	if run.TerminatedBy == v1alpha1.TerminatedHandoff {
		f.ContinuationPrompt = run.Message
	}
	for k, c := range run.Captured {
		f.Captured[k] = capturedFile(c)
	}
	for k, c := range run.Stalls {
		if f.Stalls == nil {
			f.Stalls = map[string]StallFile{}
		}
		f.Stalls[k] = StallFile{Hash: c.Hash, Count: c.Count}
	}
	if p := run.PrevResult; p != nil {
		f.PrevResult = &PrevFile{Output: p.Output, ExitCode: p.ExitCode, State: p.State, TimeoutKind: p.TimeoutKind}
	}
	if l := run.LastResult; l != nil {
		f.LastResult = &LastResultFile{Verdict: l.Verdict, Details: json.RawMessage("{}")}
		if l.Details != nil {
			f.LastResult.Details = l.Details.Raw
		}
	}
	if a := run.Action; a != nil {
		f.ActiveAction = &ActionFile{State: a.State, Iteration: a.Iteration, Command: a.Command, Agent: a.Agent,
			TimeoutSeconds: a.TimeoutSeconds, StartedAt: fmtTime(a.StartedAt), Loop: a.Loop, Child: a.Child, ChildUID: a.ChildUID, Flush: a.Flush, Verdict: a.Verdict}
		if w := a.Approval; w != nil {
			f.ActiveAction.Approval = &ApprovalFile{Message: w.Message, Deadline: fmtTime(w.Deadline)}
		}
	}
	return f
}

// UsageTotalsFile is v1alpha1.UsageTotals as the state file writes it.
type UsageTotalsFile struct {
	Calls               int64  `json:"calls,omitempty"`
	InputTokens         int64  `json:"input_tokens,omitempty"`
	OutputTokens        int64  `json:"output_tokens,omitempty"`
	CacheReadTokens     int64  `json:"cache_read_tokens,omitempty"`
	CacheCreationTokens int64  `json:"cache_creation_tokens,omitempty"`
	CostMicroUSD        int64  `json:"cost_micro_usd,omitempty"`
	UnpricedCalls       int64  `json:"unpriced_calls,omitempty"`
	CLICostMicroUSD     int64  `json:"cli_cost_micro_usd,omitempty"`
	Model               string `json:"model,omitempty"`
}

// BudgetFile is v1alpha1.BudgetStatus as the state file writes it.
type BudgetFile struct {
	RunMaxCostMicroUSD *int64 `json:"run_max_cost_micro_usd,omitempty"`
	Warned             string `json:"warned,omitempty"`
	Exceeded           string `json:"exceeded,omitempty"`
}

func budgetFile(b *v1alpha1.BudgetStatus) *BudgetFile {
	if b == nil {
		return nil
	}
	f := BudgetFile(*b)
	return &f
}

// Status is the budget as the run state holds it.
func (f *BudgetFile) Status() *v1alpha1.BudgetStatus {
	if f == nil {
		return nil
	}
	b := v1alpha1.BudgetStatus(*f)
	return &b
}

// UsageFile is v1alpha1.UsageStatus as the state file writes it.
type UsageFile struct {
	UsageTotalsFile
	States map[string]UsageTotalsFile `json:"states,omitempty"`
	// Reported is what agents printed beside a gateway's count (a run
	// brought from a cluster keeps it).
	Reported *UsageTotalsFile `json:"reported,omitempty"`
}

func usageFile(u *v1alpha1.UsageStatus) *UsageFile {
	if u == nil {
		return nil
	}
	f := &UsageFile{UsageTotalsFile: UsageTotalsFile(u.UsageTotals)}
	if r := u.Reported; r != nil {
		f.Reported = new(UsageTotalsFile(*r))
	}
	for k, t := range u.States {
		if f.States == nil {
			f.States = map[string]UsageTotalsFile{}
		}
		f.States[k] = UsageTotalsFile(t)
	}
	return f
}

// Status is the usage as the run state holds it.
func (f *UsageFile) Status() *v1alpha1.UsageStatus {
	if f == nil {
		return nil
	}
	u := &v1alpha1.UsageStatus{UsageTotals: v1alpha1.UsageTotals(f.UsageTotalsFile)}
	if r := f.Reported; r != nil {
		u.Reported = new(v1alpha1.UsageTotals(*r))
	}
	for k, t := range f.States {
		if u.States == nil {
			u.States = map[string]v1alpha1.UsageTotals{}
		}
		u.States[k] = v1alpha1.UsageTotals(t)
	}
	return u
}

// RunState turns a state file back into a run state.
func (f *StateFile) RunState() (*v1alpha1.RunState, error) {
	phase, err := statusToPhase(f.Status)
	if err != nil {
		return nil, err
	}
	run := &v1alpha1.RunState{
		RunID: f.RunID, CurrentState: f.CurrentState, Iteration: f.Iteration, Passes: f.IterationCount, CapSummary: v1alpha1.TerminationReason(f.CapSummary), Routed: f.Routed, RoutedFromLoop: f.RoutedFromLoop,
		Phase: phase, TerminatedBy: v1alpha1.TerminationReason(f.TerminatedBy), Message: f.Error,
		EdgeRevisits: f.EdgeRevisitCounts, RetryCounts: f.RetryCounts, Retries: f.ActionRetries, AccumulatedMs: f.AccumulatedMs, LastSeq: f.LastSeq,
		Messages: f.Messages, Usage: f.Usage.Status(), Budget: f.Budget.Status(),
	}
	tr, err := f.transientStatus()
	if err != nil {
		return nil, err
	}
	run.Transient = tr
	if run.ExitHook, err = f.ExitHook.Status(); err != nil {
		return nil, err
	}
	if run.Git, err = f.Git.Status(); err != nil {
		return nil, err
	}
	if run.Trace, err = f.Trace.Status(); err != nil {
		return nil, err
	}
	if f.Status == StatusAwaitingContinuation && f.TerminatedBy == "" { // little-loops' own file
		run.TerminatedBy, run.Message = v1alpha1.TerminatedHandoff, f.ContinuationPrompt
	}
	var errs []error
	for _, t := range []struct {
		s   string
		dst **metav1.Time
	}{{f.StartedAt, &run.StartedAt}, {f.UpdatedAt, &run.UpdatedAt}, {f.NextStepAt, &run.NextStepAt}, {f.ResumedAt, &run.ResumedAt}} {
		v, err := parseTime(t.s)
		errs = append(errs, err)
		*t.dst = v
	}
	if len(f.Captured) > 0 {
		run.Captured = map[string]v1alpha1.CapturedResult{}
		for k, c := range f.Captured {
			run.Captured[k] = c.capturedResult()
		}
	}
	for k, c := range f.Stalls {
		if run.Stalls == nil {
			run.Stalls = map[string]v1alpha1.StallCounter{}
		}
		run.Stalls[k] = v1alpha1.StallCounter{Hash: c.Hash, Count: c.Count}
	}
	if p := f.PrevResult; p != nil {
		run.PrevResult = &v1alpha1.PrevResult{Output: p.Output, ExitCode: p.ExitCode, State: p.State, TimeoutKind: p.TimeoutKind}
	}
	if l := f.LastResult; l != nil {
		run.LastResult = &v1alpha1.EvaluationResult{Verdict: l.Verdict}
		if len(l.Details) > 0 && string(l.Details) != "null" {
			run.LastResult.Details = &apiextensionsJSON{Raw: l.Details}
		}
	}
	if a := f.ActiveAction; a != nil {
		started, err := parseTime(a.StartedAt)
		errs = append(errs, err)
		run.Action = &v1alpha1.ActionStatus{State: a.State, Iteration: a.Iteration, Command: a.Command, Agent: a.Agent,
			TimeoutSeconds: a.TimeoutSeconds, StartedAt: started, Loop: a.Loop, Child: a.Child, ChildUID: a.ChildUID, Flush: a.Flush, Verdict: a.Verdict}
		if w := a.Approval; w != nil {
			deadline, err := parseTime(w.Deadline)
			errs = append(errs, err)
			run.Action.Approval = &v1alpha1.ApprovalWait{Message: w.Message, Deadline: deadline}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("state file times: %w", err)
	}
	return run, nil
}

// ReadStateFile reads a state file, even while a run is saving it: a read
// that raced a save (it read an old inode being rewritten) is read again.
// Older formats are migrated; a file that cannot be read is an
// *UnreadableError.
func ReadStateFile(path string) (*StateFile, error) {
	var lastErr error
	for range 5 {
		data, err := readLive(path)
		if err != nil {
			return nil, err
		}
		var f StateFile
		if lastErr = json.Unmarshal(data, &f); lastErr == nil {
			if err := f.migrate(path); err != nil {
				return nil, err
			}
			return &f, nil
		}
	}
	return nil, &UnreadableError{Path: path, Err: lastErr}
}

// UnreadableError is a state file that is not a state file any more
// (damaged, cut short, overwritten).
type UnreadableError struct {
	Path string
	Err  error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("%s is not a readable state file: %v", e.Path, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// ListStates reads every state file under loopsDir/.running. A file that
// cannot be read does not hide the others: it is reported in unreadable,
// an *UnreadableError each.
func ListStates(loopsDir string) (states []*StateFile, unreadable []*UnreadableError, err error) {
	paths, err := filepath.Glob(filepath.Join(loopsDir, ".running", "*.state.json"))
	if err != nil {
		return nil, nil, err
	}
	var out []*StateFile
	for _, p := range paths {
		f, err := ReadStateFile(p)
		if err != nil {
			var ue *UnreadableError
			if !errors.As(err, &ue) {
				ue = &UnreadableError{Path: p, Err: err}
			}
			unreadable = append(unreadable, ue)
			continue
		}
		if f.LoopName == "" {
			f.LoopName = strings.TrimSuffix(filepath.Base(p), ".state.json")
		}
		out = append(out, f)
	}
	return out, unreadable, nil
}

type apiextensionsJSON = apiextensionsv1.JSON

// errKeptChanging says a state file was saved again under every read.
var errKeptChanging = errors.New("kept changing while being read")

// readLive reads path and makes sure what it read was the live file: the
// inode read is still the one the path names afterwards, so no later save
// could have reused it while it was being read.
func readLive(path string) ([]byte, error) {
	for try := range 20 {
		if try > 0 {
			time.Sleep(time.Duration(try) * time.Millisecond) // a save in progress: let it land
		}
		f, err := safefile.Open(path)
		if err != nil {
			return nil, err
		}
		before, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		data, err := safefile.ReadAll(f, path, safefile.MaxStateFile)
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		after, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		if os.SameFile(before, after) {
			return data, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", path, errKeptChanging)
}
