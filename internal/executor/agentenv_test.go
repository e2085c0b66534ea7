package executor

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

// An agent action's environment (and a learning gate's, for the agent it
// runs) says it runs unattended and names its automation profile (the
// state's over the loop's), or sets both variables empty; a shell action
// gets nothing.
func TestAgentEnv(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Agent: &v1alpha1.AgentSpec{AutomationProfile: "lean"}}
	agent := &v1alpha1.State{Action: "/fix"}
	unattended := []string{"LL_NON_INTERACTIVE=1", "CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR=1", "DANGEROUSLY_SKIP_PERMISSIONS=1",
		"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS="}
	if got := agentEnv(spec, agent); !slices.Equal(got, append(slices.Clone(unattended), "LL_AUTOMATION=1", "LL_AUTOMATION_PROFILE=lean")) {
		t.Errorf("loop's: %q", got)
	}
	off := &v1alpha1.State{Action: "/fix", AutomationProfile: ptr.To("")}
	if got := agentEnv(spec, off); !slices.Equal(got, append(slices.Clone(unattended), "LL_AUTOMATION=", "LL_AUTOMATION_PROFILE=")) {
		t.Errorf("state's none: %q", got)
	}
	gate := &v1alpha1.State{Learning: &v1alpha1.LearningSpec{Targets: []string{"x"}}}
	if got := agentEnv(spec, gate); !slices.Equal(got, append(slices.Clone(unattended), "LL_AUTOMATION=1", "LL_AUTOMATION_PROFILE=lean")) {
		t.Errorf("learning gate: %q", got)
	}
	if got := agentEnv(&v1alpha1.LoopSpec{}, &v1alpha1.State{Action: "echo"}); got != nil {
		t.Errorf("shell: %q", got)
	}
}
