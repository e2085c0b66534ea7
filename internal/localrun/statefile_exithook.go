package localrun

import (
	"fmt"

	"github.com/looprun/looprun/api/v1alpha1"
)

// ExitHookFile is what the run's exit hook (spec.onExit) did, under
// looprun's own key exit_hook.
type ExitHookFile struct {
	Iteration  int32  `json:"iteration"`
	Phase      string `json:"phase"`
	Pod        string `json:"pod,omitempty"`
	ExitCode   *int32 `json:"exit_code,omitempty"`
	Message    string `json:"message,omitempty"`
	StartedAt  string `json:"started_at,omitempty"`
	FinishedAt string `json:"finished_at,omitempty"`
}

func exitHookFile(h *v1alpha1.ExitHookStatus) *ExitHookFile {
	if h == nil {
		return nil
	}
	return &ExitHookFile{Iteration: h.Iteration, Phase: string(h.Phase), Pod: h.Pod, ExitCode: h.ExitCode, Message: h.Message,
		StartedAt: fmtTime(h.StartedAt), FinishedAt: fmtTime(h.FinishedAt)}
}

// Status is the hook's status as the API spells it (nil for none).
func (f *ExitHookFile) Status() (*v1alpha1.ExitHookStatus, error) {
	if f == nil {
		return nil, nil
	}
	started, err := parseTime(f.StartedAt)
	if err != nil {
		return nil, fmt.Errorf("exit_hook.started_at: %w", err)
	}
	finished, err := parseTime(f.FinishedAt)
	if err != nil {
		return nil, fmt.Errorf("exit_hook.finished_at: %w", err)
	}
	return &v1alpha1.ExitHookStatus{Iteration: f.Iteration, Phase: v1alpha1.ExitHookPhase(f.Phase), Pod: f.Pod, ExitCode: f.ExitCode, Message: f.Message,
		StartedAt: started, FinishedAt: finished}, nil
}
