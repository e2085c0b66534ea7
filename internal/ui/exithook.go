package ui

import (
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// ExitHook is the run's exit hook (spec.onExit): its command, and what it
// did at the run's end (status.exitHook, a local run's exit_hook).
type ExitHook struct {
	// Action is the hook's command (or an agent's prompt) as the loop
	// writes it; Kind is shell or agent.
	Action string `json:"action,omitempty"`
	Kind   string `json:"kind,omitempty"`
	// Phase is Running, Succeeded or Failed; empty while it has not run.
	Phase     string `json:"phase,omitempty"`
	Iteration int32  `json:"iteration,omitempty"`
	ExitCode  *int32 `json:"exitCode,omitempty"`
	// Message says why it failed (the end of its stderr).
	Message string `json:"message,omitempty"`
	// Pod ran it (in a cluster).
	Pod        string    `json:"pod,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Earlier marks what the hook did at an earlier end of the run: the
	// run went on since (resumed, rewound), and it runs again at its end.
	Earlier bool `json:"earlier,omitempty"`
}

// exitHookOf is the run's exit hook, nil when it has none.
func exitHookOf(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) *ExitHook {
	if spec.OnExit == nil && run.ExitHook == nil {
		return nil
	}
	out := &ExitHook{}
	if hook := spec.OnExit; hook != nil {
		out.Action, out.Kind = firstLines(hook.Action, 2048), "shell"
		if hook.AsState().IsAgent() {
			out.Kind = "agent"
		}
	}
	h := run.ExitHook
	if h == nil {
		return out
	}
	out.Phase, out.Iteration, out.ExitCode, out.Message, out.Pod = string(h.Phase), h.Iteration, h.ExitCode, h.Message, h.Pod
	if h.StartedAt != nil {
		out.StartedAt = h.StartedAt.Time
	}
	if h.FinishedAt != nil {
		out.FinishedAt = h.FinishedAt.Time
	}
	out.Earlier = !run.Phase.IsFinished() || h.Iteration != run.Iteration
	return out
}
