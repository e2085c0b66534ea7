package executor

import (
	"cmp"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// Events of approval states (looprun's own).
const (
	EventApprovalRequested = "approval_requested"
	EventApprovalAnswered  = "approval_answered"
)

// ApprovalRequest is what an approval state asks a person.
type ApprovalRequest struct {
	// RunID, State and Iteration name the approval: an answer names them
	// and is taken only for this one.
	RunID     string
	State     string
	Iteration int32
	// Message is the question, its templates expanded.
	Message string
	// Deadline ends the wait (verdict timeout); zero: none.
	Deadline time.Time
}

// approval begins the wait of an approval state just entered: the
// question is expanded and recorded as the action in flight.
func (t *turn) approval(st *v1alpha1.State) Step {
	run := t.run
	msg, err := interpolate.Expand(st.Approval.Message, t.vars())
	if err != nil {
		if !t.actionError(st, fmt.Errorf("state %q: approval: %w", run.CurrentState, err)) {
			return Step{Kind: StepDone}
		}
		return Step{Kind: stepHop}
	}
	now := metav1.NewTime(t.now)
	wait := &v1alpha1.ApprovalWait{Message: Tail(msg, MaxDetailsBytes)}
	asked := ApprovalRequestedEvent{State: run.CurrentState, Message: wait.Message}
	if st.Approval.Timeout != nil {
		d := metav1.NewTime(t.now.Add(st.Approval.Timeout.Duration))
		wait.Deadline = &d
		asked.Deadline = d.UTC().Format(time.RFC3339)
	}
	run.Action = &v1alpha1.ActionStatus{State: run.CurrentState, Iteration: run.Iteration, StartedAt: &now, Approval: wait}
	t.emit(EventApprovalRequested, asked.Data())
	return t.awaiting()
}

// awaiting is the step of the approval in flight.
func (t *turn) awaiting() Step {
	a := t.run.Action
	req := &ApprovalRequest{RunID: t.run.RunID, State: a.State, Iteration: a.Iteration, Message: a.Approval.Message}
	if d := a.Approval.Deadline; d != nil {
		req.Deadline = d.Time
	}
	return Step{Kind: StepApproval, Approval: req}
}

// completeApproval routes an approval state on its answer, or on the
// timeout once the deadline passed; before that, with no answer, it changes
// nothing and returns the wait again.
func (t *turn) completeApproval(st *v1alpha1.State, res *ActionResult) Step {
	run := t.run
	var answer *ApprovalAnswer
	if res != nil {
		answer = res.Approval
	}
	if run.Action == nil || run.Action.Approval == nil {
		t.finish(v1alpha1.TerminatedError, fmt.Sprintf("state %q: no approval was asked for", run.CurrentState))
		return Step{Kind: StepNext}
	}
	deadline := run.Action.Approval.Deadline
	if answer == nil && (deadline == nil || t.now.Before(deadline.Time)) {
		return t.awaiting()
	}
	got := ApprovalAnsweredEvent{State: run.CurrentState, Verdict: v1alpha1.VerdictTimeout}
	if answer != nil {
		got.Verdict, got.By, got.Message = v1alpha1.VerdictRejected, answer.By, Tail(answer.Message, MaxDetailsBytes)
		if answer.Approved {
			got.Verdict = v1alpha1.VerdictApproved
		}
	}
	run.Action = nil
	t.emit(EventApprovalAnswered, got.Data())
	run.LastResult = &v1alpha1.EvaluationResult{Verdict: got.Verdict, Details: detailsJSON(got.details())}
	t.routeTo(st, approvalTarget(st, got.Verdict), got.Verdict, "no route for the approval's verdict %q", got.Verdict)
	return Step{Kind: StepNext}
}

// approvalTarget is where an approval's verdict goes: its own route key,
// then approved to onSuccess and the others to onFailure, then onError.
func approvalTarget(st *v1alpha1.State, verdict string) string {
	if target, ok := st.Route[verdict]; ok {
		return string(target)
	}
	if verdict == v1alpha1.VerdictApproved {
		return st.OnSuccess
	}
	return cmp.Or(st.OnFailure, st.OnError)
}
