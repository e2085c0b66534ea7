package executor

import (
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

func TestUniversalNewlines(t *testing.T) {
	for in, want := range map[string]string{
		"one\r\ntwo\rthree\r\n": "one\ntwo\nthree\n",
		"\r\r\n":                "\n\n",
		"plain\n":               "plain\n",
		"":                      "",
	} {
		if got := universalNewlines(in); got != want {
			t.Errorf("universalNewlines(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFailureType(t *testing.T) {
	for _, c := range []struct {
		text       string
		code       int
		resultSeen bool
		want       string
	}{
		{"", 143, true, "infra_retry"},
		{"429 Too Many Requests", 1, false, "transient"},
		{"connection refused", 3, false, "transient"},
		{"401 but timed out", 1, false, "transient"},
		{"401 and the context window", 1, false, "non_recoverable"},
		{"API Error: overloaded", 1, false, "transient"},
		{"bash: foo: command not found", 127, false, "transient"},
		{"Killed", 137, false, "transient"},
		{"skilled at failing", 1, false, "real"},
		{"assertion failed", 1, false, "real"},
	} {
		if got := failureType(c.text, c.code, c.resultSeen); got != c.want {
			t.Errorf("failureType(%q, %d) = %q, want %q", c.text, c.code, got, c.want)
		}
	}
}

// A little-loops file's action stopped at its timeout says so in its
// stderr as ll-loop does, in the words of its kind of action.
func TestTimedOutStderr(t *testing.T) {
	for _, c := range []struct {
		name        string
		state       v1alpha1.State
		res         ActionResult
		out, stderr string
	}{
		{"shell", v1alpha1.State{Action: "sleep 9"}, ActionResult{Output: "so far\n", TimedOut: true}, "so far\n", "Action timed out"},
		{"shell idle", v1alpha1.State{Action: "sleep 9"}, ActionResult{TimedOut: true, IdledOut: true}, "", "Action idle-timed out"},
		{"shell with stderr", v1alpha1.State{Action: "sleep 9"}, ActionResult{Stderr: "oops\n", TimedOut: true}, "", "oops\n"},
		{"agent", v1alpha1.State{Action: "go", ActionType: v1alpha1.ActionAgent}, ActionResult{Output: "half", Stderr: "w\n", TimedOut: true}, "", "Action timed out"},
		{"mcp", v1alpha1.State{Action: "s/t", ActionType: v1alpha1.ActionMCP}, ActionResult{Output: "working\n", TimedOut: true}, "working\n", "MCP call timed out"},
		{"mcp idle", v1alpha1.State{Action: "s/t", ActionType: v1alpha1.ActionMCP}, ActionResult{TimedOut: true, IdledOut: true}, "", "MCP call idle-timed out"},
	} {
		m := &Machine{spec: &v1alpha1.LoopSpec{States: map[string]v1alpha1.State{"s": c.state}}, opts: Options{LittleLoops: true}}
		tr := &turn{m: m, run: &v1alpha1.RunState{CurrentState: "s"}}
		got := tr.asText(&c.res)
		if got.Output != c.out || got.Stderr != c.stderr {
			t.Errorf("%s: output %q, stderr %q; want %q, %q", c.name, got.Output, got.Stderr, c.out, c.stderr)
		}
	}
}
