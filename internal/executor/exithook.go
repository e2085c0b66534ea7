package executor

import (
	"fmt"
	"math"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pricing"
)

// ExitState names the exit hook (spec.onExit) where an action's state is
// named: its Pod's label, its log.
const ExitState = "on-exit"

// NeedsExitHook reports whether the ended run's exit hook is still to run
// (or to be looked at): the spec has one, the run ended, and no hook of
// this end has finished.
func NeedsExitHook(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) bool {
	if spec.OnExit == nil || !run.Phase.IsFinished() {
		return false
	}
	h := run.ExitHook
	return h == nil || h.Iteration != run.Iteration || ExitHookStarted(run)
}

// ExitHookStarted reports whether the hook of the run's present end is
// recorded as running (started before, its result still to be read).
func ExitHookStarted(run *v1alpha1.RunState) bool {
	h := run.ExitHook
	return h != nil && h.Iteration == run.Iteration && h.Phase == v1alpha1.ExitHookRunning
}

// ExitHookNotRun is the result of a hook that could not be made: its
// action's templates did not expand, or the spec is not valid.
func ExitHookNotRun(err error) ActionResult {
	return ActionResult{ExitCode: -1, Failure: &ActionFailure{Reason: "InvalidExitHook", Message: err.Error()}}
}

// ExitAction is the action of the ended run's exit hook: spec.onExit with
// its templates expanded over the run's context and how it ended. nil
// when the loop has no hook.
func (m *Machine) ExitAction(run *v1alpha1.RunState, now time.Time) (*Action, error) {
	hook := m.spec.OnExit
	if hook == nil {
		return nil, nil
	}
	t := m.begin(run, now)
	vars := t.vars()
	vars.Exit = ExitVars(run)
	st := hook.AsState()
	command, err := expandAction(m.spec, st, vars)
	if err != nil {
		return nil, fmt.Errorf("spec.onExit.action: %w", err)
	}
	return &Action{
		State: ExitState, Iteration: run.Iteration, Command: command, Agent: st.IsAgent(), Exit: true,
		RunDir: m.RunDir(), AgentCommand: t.agentCommand(st), Timeout: st.GetTimeout(),
		AgentStream: st.IsAgent() && m.spec.AgentStreams(),
	}, nil
}

// ExitVars is what ${loop.*} adds for an exit hook: how the run ended,
// what it used and, with workspace.git, the commits cloned and pushed
// (${loop.git.cloned}, ${loop.git.commit}, ${loop.git.branch}).
func ExitVars(run *v1alpha1.RunState) map[string]any {
	usage := map[string]any{"calls": int64(0), "input_tokens": int64(0), "output_tokens": int64(0), "cost_usd": 0.0}
	if u := run.Usage; u != nil {
		usage = map[string]any{"calls": u.Calls, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
			"cost_usd": pricing.MicroToUSD(u.CostMicroUSD)}
	}
	vars := map[string]any{
		"phase":         string(run.Phase),
		"terminated_by": string(run.TerminatedBy),
		"final_state":   run.CurrentState,
		"message":       run.Message,
		"iterations":    run.Iteration,
		"usage":         usage,
	}
	if g := run.Git; g != nil {
		git := map[string]any{"cloned": "", "commit": "", "branch": "", "pushed": false}
		if g.Clone != nil {
			git["cloned"] = g.Clone.Commit
		}
		if p := g.Push; p != nil && p.Iteration == run.Iteration && p.Phase == v1alpha1.ExitHookSucceeded {
			git["commit"], git["branch"], git["pushed"] = p.Commit, p.Branch, p.Pushed
		}
		vars["git"] = git
	}
	return vars
}

// ExitHookMessage says why a hook failed: why it could not run, else the
// end of its stderr (else of its output).
func ExitHookMessage(res ActionResult) string {
	s := strings.TrimSpace(res.Stderr)
	if res.Failure != nil {
		s = res.Failure.Message
	} else if s == "" {
		s = strings.TrimSpace(res.Output)
	}
	if len(s) > 1024 {
		s = "…" + strings.ToValidUTF8(s[len(s)-1024:], "")
	}
	return s
}

// EndExitHook records in h how the hook ended at now: Succeeded on exit 0,
// else Failed with why.
func EndExitHook(h *v1alpha1.ExitHookStatus, res ActionResult, now time.Time) {
	end := metav1.NewTime(now)
	code := int32(max(min(res.ExitCode, math.MaxInt32), math.MinInt32))
	h.FinishedAt, h.ExitCode = &end, &code
	if res.ExitCode == 0 && res.Failure == nil {
		h.Phase, h.Message = v1alpha1.ExitHookSucceeded, ""
		return
	}
	h.Phase, h.Message = v1alpha1.ExitHookFailed, ExitHookMessage(res)
}
