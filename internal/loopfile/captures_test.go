package loopfile

import (
	"strings"
	"testing"
)

// A little-loops file that reads a sub-loop state's capture for more than
// its output and exit code is refused, as little-loops' validator refuses
// it (BUG-2812), naming the state and key; guarded references, the state's
// own name and capture_reachability_ok pass.
func TestSubLoopCaptureReferences(t *testing.T) {
	const head = "name: x\ninitial: run\n"
	const states = "states:\n  run:\n    loop: child\n    capture: events\n    on_yes: report\n    on_no: report\n" +
		"  report:\n    action: \"echo '%s'\"\n    next: done\n  done:\n    terminal: true\n"
	tests := []struct {
		name, ref, top string
		want           string // "" for none
	}{
		{"verdict", "${captured.events.verdict}", "", "line 10: states.report.action: ${captured.events.verdict}: events is the capture of sub-loop state run, " +
			"which holds only the child's event stream (output, exit_code), as little-loops reads it: the child's own captures are under the state's name " +
			"(${captured.run.NAME.output}), how it ended is ${captured.run.terminated_by}"},
		{"a child's capture", "${captured.events.fix.output}", "", "${captured.events.fix.output}: events is the capture of sub-loop state run"},
		{"output", "${captured.events.output}", "", ""},
		{"output, quoted", "${captured.events.output:shell}", "", ""},
		{"exit_code", "${captured.events.exit_code}", "", ""},
		{"guarded by a default", "${captured.events.verdict:default=no}", "", ""},
		{"guarded by ?", "${captured.events.verdict?}", "", ""},
		{"the state's own name", "${captured.run.terminated_by}", "", ""},
		{"the rule silenced", "${captured.events.verdict}", "capture_reachability_ok: true\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := head + tt.top + strings.Replace(states, "%s", tt.ref, 1)
			_, err := Parse([]byte(doc), t.TempDir(), Options{})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
