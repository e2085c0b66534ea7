package executor

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

// An agent action's environment names its automation profile (the
// state's over the loop's), or sets both variables empty; a shell action
// gets nothing.
func TestAgentEnv(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Agent: &v1alpha1.AgentSpec{AutomationProfile: "lean"}}
	agent := &v1alpha1.State{Action: "/fix"}
	if got := agentEnv(spec, agent); !slices.Equal(got, []string{"LL_AUTOMATION=1", "LL_AUTOMATION_PROFILE=lean"}) {
		t.Errorf("loop's: %q", got)
	}
	off := &v1alpha1.State{Action: "/fix", AutomationProfile: ptr.To("")}
	if got := agentEnv(spec, off); !slices.Equal(got, []string{"LL_AUTOMATION=", "LL_AUTOMATION_PROFILE="}) {
		t.Errorf("state's none: %q", got)
	}
	if got := agentEnv(&v1alpha1.LoopSpec{}, &v1alpha1.State{Action: "echo"}); got != nil {
		t.Errorf("shell: %q", got)
	}
}
