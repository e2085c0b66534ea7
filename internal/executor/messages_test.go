package executor

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A message that cannot be expanded (a capture not made yet) sends the
// state to onError, as little-loops does, and the state's own capture is
// kept: a later state reads it.
func TestAppendToMessagesFailureKeepsCapture(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "first", States: map[string]v1alpha1.State{
		"first": {Action: "echo kept", Capture: "out", AppendToMessages: "bad ${captured.late.output}",
			Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, OnSuccess: "later", OnError: "report"},
		"later":  {Action: "echo late", Capture: "late", Next: "report"},
		"report": {Action: "echo ${captured.out.output}", Next: "done"},
		"done":   {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{"echo kept": {{Output: "kept\n"}}}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.TerminatedBy != v1alpha1.TerminatedTerminal || len(r.ran) != 2 || r.ran[1] != "echo kept" {
		t.Fatalf("terminated by %q (%s), ran %q", r.run.TerminatedBy, r.run.Message, r.ran)
	}
	if c := r.run.Captured["out"]; c.Output != "kept" || c.Verdict != "" {
		t.Errorf("capture %+v", c)
	}
	if r.count(EventActionError) != 1 || r.count(EventMessagesAppend) != 0 || len(r.run.Messages) != 0 {
		t.Errorf("%d action_error, %d messages_append, messages %q", r.count(EventActionError), r.count(EventMessagesAppend), r.run.Messages)
	}
}
