package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/looprun/looprun/api/v1alpha1"
)

// InputHash is the input_hash a runner gives a run (and each sub-loop)
// whose context variable input is text, unless input_hash is set: the
// first 12 hex digits of the input's SHA-256, as little-loops derives it.
func InputHash(input any) (string, bool) {
	s, ok := input.(string)
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12], true
}

// RunContext is what a runner gives a run's context besides the loop's
// own (the operator and looprun run alike), each unless the loop sets it:
// run_dir, max_steps (and max_iterations, the cap on passes, when there is
// one), input_hash for a text input, and repo_dir for a run in a checkout.
type RunContext struct {
	// RunDir is the run's run_dir.
	RunDir string
	// RepoDir is the checkout the run works in; "" for none.
	RepoDir string
	// NoMaxSteps gives no max_steps (a simulated walk, as little-loops).
	NoMaxSteps bool
}

// Defaults are the variables c gives spec's context that it does not set.
func (c RunContext) Defaults(spec *v1alpha1.LoopSpec) map[string]any {
	out := map[string]any{}
	set := func(k string, v any) {
		if _, ok := spec.Context[k]; !ok {
			out[k] = v
		}
	}
	set("run_dir", c.RunDir)
	if !c.NoMaxSteps {
		set("max_steps", spec.GetMaxIterations())
		if spec.MaxPasses != nil { // little-loops' max_iterations, when the loop has one
			set("max_iterations", *spec.MaxPasses)
		}
	}
	if c.RepoDir != "" {
		set("repo_dir", c.RepoDir)
	}
	var input any
	if raw, ok := spec.Context["input"]; ok && json.Unmarshal(raw.Raw, &input) == nil {
		if h, ok := InputHash(input); ok {
			set("input_hash", h)
		}
	}
	return out
}
