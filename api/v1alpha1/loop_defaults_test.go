package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDefaults(t *testing.T) {
	var s LoopSpec
	if s.GetMaxIterations() != 50 || s.GetMaxEdgeRevisits() != 100 || s.GetTimeout() != 0 || s.GetBackoff() != 0 || !s.LLMEnabled() {
		t.Errorf("defaults of an empty spec are wrong: %+v", s)
	}
	if got := strings.Join(s.GetAgentCommand(), " "); got != "claude --dangerously-skip-permissions --verbose --output-format stream-json -p" {
		t.Errorf("agent command %v", got)
	}
	if !s.AgentStreams() {
		t.Error("agent actions of an empty spec are not read as stream-json")
	}
	s.Agent = &AgentSpec{Output: AgentOutputText}
	if s.AgentStreams() {
		t.Error("output: text is read as stream-json")
	}
	s.Agent = nil
	var l *LLMSpec
	if l.GetModel() != DefaultLLMModel || l.GetMaxTokens() != DefaultLLMMaxTokens || l.GetTimeout() != 2*time.Minute {
		t.Errorf("llm defaults %s %d %v", l.GetModel(), l.GetMaxTokens(), l.GetTimeout())
	}
	for alias, want := range map[string]string{"sonnet": DefaultLLMModel, "opus": "claude-opus-5-5", "haiku": "claude-haiku-5-5", "claude-x": "claude-x"} {
		if got := (&LLMSpec{Model: alias}).GetModel(); got != want {
			t.Errorf("model %q -> %q, want %q", alias, got, want)
		}
	}
	st := State{Action: "/review", Timeout: &metav1.Duration{Duration: time.Second}}
	if !st.IsAgent() || st.GetTimeout() != time.Second {
		t.Errorf("state %+v", st)
	}
	if (&State{Action: "/bin/true", ActionType: ActionShell}).IsAgent() {
		t.Error("an explicit shell action type wins over a leading slash")
	}
	if (&State{}).GetTimeout() != 120*time.Second {
		t.Error("default action timeout is 120s")
	}
	no := false
	for name, want := range map[string]bool{"failed": true, "error": true, "aborted": true, "finalize_aborted": true, "done": false} {
		if got := (&State{Terminal: true}).IsFailure(name); got != want {
			t.Errorf("IsFailure(%q) = %v", name, got)
		}
	}
	if (&State{Terminal: true, Failure: &no}).IsFailure("failed") {
		t.Error("an explicit failure: false wins")
	}
	if (&Evaluate{}).GetMinConfidence() != 0.5 {
		t.Error("default min confidence")
	}
}

func TestPhaseAndVerdicts(t *testing.T) {
	for p, want := range map[Phase]bool{PhaseRunning: false, PhasePending: false, PhaseSuspended: false, PhaseCompleted: true, PhaseFailed: true, PhaseInterrupted: true} {
		if p.IsFinished() != want {
			t.Errorf("%s.IsFinished() = %v", p, !want)
		}
	}
	for in, want := range map[string]string{"yes": "success", "no": "failure", "error": "error", "partial": "partial"} {
		if got := CanonicalVerdict(in); got != want {
			t.Errorf("CanonicalVerdict(%q) = %q", in, got)
		}
	}
	if !EvalConvergence.IsKnown() || EvaluatorType("comparator").IsKnown() {
		t.Error("IsKnown")
	}
}
