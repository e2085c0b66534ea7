package localrun

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// GitFile is what the run's workspace.git did, under looprun's own key git.
type GitFile struct {
	Clone *GitOpFile `json:"clone,omitempty"`
	Push  *GitOpFile `json:"push,omitempty"`
}

// GitOpFile is a clone or a push.
type GitOpFile struct {
	Iteration  int32  `json:"iteration"`
	Phase      string `json:"phase"`
	Pod        string `json:"pod,omitempty"`
	Commit     string `json:"commit,omitempty"`
	Branch     string `json:"branch,omitempty"`
	Pushed     bool   `json:"pushed,omitempty"`
	Message    string `json:"message,omitempty"`
	StartedAt  string `json:"started_at,omitempty"`
	FinishedAt string `json:"finished_at,omitempty"`
}

func gitFile(g *v1alpha1.GitStatus) *GitFile {
	if g == nil {
		return nil
	}
	return &GitFile{Clone: gitOpFile(g.Clone), Push: gitOpFile(g.Push)}
}

func gitOpFile(op *v1alpha1.GitOpStatus) *GitOpFile {
	if op == nil {
		return nil
	}
	return &GitOpFile{Iteration: op.Iteration, Phase: string(op.Phase), Pod: op.Pod, Commit: op.Commit, Branch: op.Branch,
		Pushed: op.Pushed, Message: op.Message, StartedAt: fmtTime(op.StartedAt), FinishedAt: fmtTime(op.FinishedAt)}
}

// Status is what the file says as the API spells it (nil for none).
func (f *GitFile) Status() (*v1alpha1.GitStatus, error) {
	if f == nil {
		return nil, nil
	}
	clone, err := f.Clone.status("git.clone")
	if err != nil {
		return nil, err
	}
	push, err := f.Push.status("git.push")
	if err != nil {
		return nil, err
	}
	return &v1alpha1.GitStatus{Clone: clone, Push: push}, nil
}

func (f *GitOpFile) status(key string) (*v1alpha1.GitOpStatus, error) {
	if f == nil {
		return nil, nil
	}
	started, err := parseTime(f.StartedAt)
	if err != nil {
		return nil, fmt.Errorf("%s.started_at: %w", key, err)
	}
	finished, err := parseTime(f.FinishedAt)
	if err != nil {
		return nil, fmt.Errorf("%s.finished_at: %w", key, err)
	}
	return &v1alpha1.GitOpStatus{Iteration: f.Iteration, Phase: v1alpha1.ExitHookPhase(f.Phase), Pod: f.Pod, Commit: f.Commit,
		Branch: f.Branch, Pushed: f.Pushed, Message: f.Message, StartedAt: started, FinishedAt: finished}, nil
}

// TraceFile is the run's place in a trace, under looprun's own key trace.
type TraceFile struct {
	TraceParent  string `json:"trace_parent"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	State        string `json:"state,omitempty"`
	Iteration    int32  `json:"iteration,omitempty"`
	EnteredAt    string `json:"entered_at,omitempty"`
}

func traceFile(t *v1alpha1.TraceState) *TraceFile {
	if t == nil {
		return nil
	}
	f := &TraceFile{TraceParent: t.TraceParent, ParentSpanID: t.ParentSpanID, State: t.State, Iteration: t.Iteration}
	if t.EnteredAt != nil {
		f.EnteredAt = t.EnteredAt.UTC().Format(time.RFC3339Nano)
	}
	return f
}

// Status is what the file says as the API spells it (nil for none).
func (f *TraceFile) Status() (*v1alpha1.TraceState, error) {
	if f == nil {
		return nil, nil
	}
	t := &v1alpha1.TraceState{TraceParent: f.TraceParent, ParentSpanID: f.ParentSpanID, State: f.State, Iteration: f.Iteration}
	if f.EnteredAt != "" {
		at, err := time.Parse(time.RFC3339Nano, f.EnteredAt)
		if err != nil {
			return nil, fmt.Errorf("trace.entered_at: %w", err)
		}
		t.EnteredAt = &metav1.MicroTime{Time: at}
	}
	return t, nil
}
