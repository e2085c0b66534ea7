package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The in-pod wrapper runs an action and judges its output with the
// deterministic evaluators; it links neither the engine that plans actions
// nor pricing nor the LLM client. What it shares with the executor (the
// action and its result) lives in internal/action.
func TestLinksNoEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const module = "github.com/looprun/looprun/"
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"internal/executor", "internal/pricing", "internal/llm"} {
			if dep == module+heavy || strings.HasPrefix(dep, module+heavy+"/") && heavy != "internal/executor" {
				t.Errorf("the entrypoint links %s", dep)
			}
		}
	}
}
