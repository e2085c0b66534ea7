package executor

import (
	"fmt"
	"maps"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// EventMessagesAppend is the event of a state appending to the run's
// messages log (message, state).
const EventMessagesAppend = "messages_append"

// appendMessage adds the state's appendToMessages to the run's messages
// log once its action ran, as little-loops does: after the capture and
// before the verdict, so the template reads this state's capture while
// ${prev.*} is still the state before. A template that cannot be expanded
// goes to onError, or ends the run, the action's capture kept (without a
// verdict: none was reached), as little-loops keeps it. It reports false
// when the run ended or moved on.
func (t *turn) appendMessage(st *v1alpha1.State, res *ActionResult) bool {
	if st.AppendToMessages == "" || res == nil {
		return true
	}
	vars := t.vars()
	if st.Capture != "" {
		c := maps.Clone(vars.Captured)
		if c == nil {
			c = map[string]v1alpha1.CapturedResult{}
		}
		c[st.Capture] = v1alpha1.CapturedResult{
			Output: Tail(trimOutput(res.Output), t.m.opts.MaxCaptureBytes), Stderr: Tail(res.Stderr, t.m.opts.MaxCaptureBytes),
			ExitCode: exitCode32(res.ExitCode), DurationMs: res.Duration.Milliseconds(),
		}
		vars.Captured = c
	}
	msg, err := interpolate.Expand(st.AppendToMessages, vars)
	if err != nil {
		t.capture(st, res, "")
		t.actionError(st, fmt.Errorf("state %q: appendToMessages: %w", t.run.CurrentState, err))
		return false
	}
	t.run.Messages = append(t.run.Messages, msg)
	t.keepMessagesWithinBudget()
	t.emit(EventMessagesAppend, MessagesAppendEvent{State: t.run.CurrentState, Message: msg}.Data())
	return true
}

// keepMessagesWithinBudget drops the oldest messages once together they
// hold more than the run's bound for captures (Options.MaxCapturedBytes);
// a single message past it keeps its tail.
func (t *turn) keepMessagesWithinBudget() {
	limit := t.m.opts.MaxCapturedBytes
	total := 0
	for _, m := range t.run.Messages {
		total += len(m)
	}
	for total > limit && len(t.run.Messages) > 1 {
		total -= len(t.run.Messages[0])
		t.run.Messages = t.run.Messages[1:]
	}
	if len(t.run.Messages) == 1 && total > limit {
		t.run.Messages[0] = Tail(t.run.Messages[0], limit)
	}
}
