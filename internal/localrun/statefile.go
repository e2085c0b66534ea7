// Package localrun runs a loop on this machine: it drives the executor,
// runs actions with the local runner, and keeps the run in
// .loops/.running/<name>.state.json and <name>.events.jsonl, in the format
// little-loops writes.
package localrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
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

	RunID             string           `json:"run_id,omitempty"`
	TerminatedBy      string           `json:"terminated_by,omitempty"`
	Error             string           `json:"error,omitempty"`
	IterationCount    int32            `json:"iteration_count,omitempty"`
	EdgeRevisitCounts map[string]int32 `json:"edge_revisit_counts,omitempty"`
	RetryCounts       map[string]int32 `json:"retry_counts,omitempty"`
	ActiveAction      *ActionFile      `json:"active_action,omitempty"`
	NextStepAt        string           `json:"next_step_at,omitempty"`
	ResumedAt         string           `json:"resumed_at,omitempty"`
	LastSeq           int64            `json:"last_seq"`
	LoopFile          string           `json:"loop_file,omitempty"`
	Context           map[string]any   `json:"context,omitempty"`
}

// CapturedFile is one captured result.
type CapturedFile struct {
	Output     string `json:"output"`
	Stderr     string `json:"stderr"`
	ExitCode   int32  `json:"exit_code"`
	DurationMs int64  `json:"duration_ms"`
	Verdict    string `json:"verdict,omitempty"`
}

// PrevFile is the previous state's result.
type PrevFile struct {
	Output   string `json:"output"`
	ExitCode int32  `json:"exit_code"`
	State    string `json:"state"`
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
}

// Status values of the state file.
const (
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
)

func phaseToStatus(p v1alpha1.Phase) string {
	switch p {
	case v1alpha1.PhaseCompleted:
		return StatusCompleted
	case v1alpha1.PhaseFailed:
		return StatusFailed
	case v1alpha1.PhaseInterrupted:
		return StatusInterrupted
	}
	return StatusRunning
}

func statusToPhase(s string) (v1alpha1.Phase, error) {
	switch s {
	case StatusRunning:
		return v1alpha1.PhaseRunning, nil
	case StatusCompleted:
		return v1alpha1.PhaseCompleted, nil
	case StatusFailed:
		return v1alpha1.PhaseFailed, nil
	case StatusInterrupted, "user_stopped", "awaiting_continuation":
		return v1alpha1.PhaseInterrupted, nil
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
		Status: phaseToStatus(run.Phase), AccumulatedMs: run.AccumulatedMs,
		RunID: run.RunID, TerminatedBy: string(run.TerminatedBy), Error: run.Message, IterationCount: run.Passes,
		EdgeRevisitCounts: run.EdgeRevisits, RetryCounts: run.RetryCounts, NextStepAt: fmtTime(run.NextStepAt),
		ResumedAt: fmtTime(run.ResumedAt), LastSeq: run.LastSeq, LoopFile: loopFile, Context: ctx,
	}
	for k, c := range run.Captured {
		f.Captured[k] = CapturedFile{Output: c.Output, Stderr: c.Stderr, ExitCode: c.ExitCode, DurationMs: c.DurationMs, Verdict: c.Verdict}
	}
	if p := run.PrevResult; p != nil {
		f.PrevResult = &PrevFile{Output: p.Output, ExitCode: p.ExitCode, State: p.State}
	}
	if l := run.LastResult; l != nil {
		f.LastResult = &LastResultFile{Verdict: l.Verdict, Details: json.RawMessage("{}")}
		if l.Details != nil {
			f.LastResult.Details = l.Details.Raw
		}
	}
	if a := run.Action; a != nil {
		f.ActiveAction = &ActionFile{State: a.State, Iteration: a.Iteration, Command: a.Command, Agent: a.Agent,
			TimeoutSeconds: a.TimeoutSeconds, StartedAt: fmtTime(a.StartedAt)}
	}
	return f
}

// RunState turns a state file back into a run state.
func (f *StateFile) RunState() (*v1alpha1.RunState, error) {
	phase, err := statusToPhase(f.Status)
	if err != nil {
		return nil, err
	}
	run := &v1alpha1.RunState{
		RunID: f.RunID, CurrentState: f.CurrentState, Iteration: f.Iteration, Passes: f.IterationCount,
		Phase: phase, TerminatedBy: v1alpha1.TerminationReason(f.TerminatedBy), Message: f.Error,
		EdgeRevisits: f.EdgeRevisitCounts, RetryCounts: f.RetryCounts, AccumulatedMs: f.AccumulatedMs, LastSeq: f.LastSeq,
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
			run.Captured[k] = v1alpha1.CapturedResult{Output: c.Output, Stderr: c.Stderr, ExitCode: c.ExitCode, DurationMs: c.DurationMs, Verdict: c.Verdict}
		}
	}
	if p := f.PrevResult; p != nil {
		run.PrevResult = &v1alpha1.PrevResult{Output: p.Output, ExitCode: p.ExitCode, State: p.State}
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
			TimeoutSeconds: a.TimeoutSeconds, StartedAt: started}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("state file times: %w", err)
	}
	return run, nil
}

// atomicFile replaces a file's content atomically: the new content goes into
// a new temporary file beside it, which is fsynced and then renamed over the
// file. A reader sees the old content or the new, never a mix, and a crash
// leaves one or the other.
type atomicFile struct {
	path string
	// dirDirty is set when a rename must still be made durable by fsyncing
	// the directory.
	dirDirty bool
}

func newAtomicFile(path string) *atomicFile {
	return &atomicFile{path: path}
}

// write replaces the file with data. before, when set, must succeed before
// the rename (the event log is synced by then).
func (a *atomicFile) write(data []byte, before func() error) error {
	f, err := os.CreateTemp(filepath.Dir(a.path), "."+filepath.Base(a.path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && before != nil {
		err = before()
	}
	if err == nil {
		err = os.Rename(f.Name(), a.path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	a.dirDirty = true
	return nil
}

// syncDir makes the renames durable. Saves during a run skip it: on the
// usual journaling filesystems the next fsync commits the rename anyway, and
// a state one step older is still a consistent state.
func (a *atomicFile) syncDir() error {
	if !a.dirDirty {
		return nil
	}
	d, err := os.Open(filepath.Dir(a.path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	a.dirDirty = false
	return nil
}

// ReadStateFile reads a state file.
func ReadStateFile(path string) (*StateFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f StateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s is not a readable state file: %w", path, err)
	}
	return &f, nil
}

// ListStates reads every state file under loopsDir/.running.
func ListStates(loopsDir string) ([]*StateFile, error) {
	paths, err := filepath.Glob(filepath.Join(loopsDir, ".running", "*.state.json"))
	if err != nil {
		return nil, err
	}
	var out []*StateFile
	for _, p := range paths {
		f, err := ReadStateFile(p)
		if err != nil {
			return nil, err
		}
		if f.LoopName == "" {
			f.LoopName = strings.TrimSuffix(filepath.Base(p), ".state.json")
		}
		out = append(out, f)
	}
	return out, nil
}

type apiextensionsJSON = apiextensionsv1.JSON
