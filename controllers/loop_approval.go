package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// approval is the answer to the approval the Loop waits for: a person's
// (an approve or reject request of this reconcile), or none once the
// deadline passed (the machine then times the wait out). nil while the
// wait goes on.
func (s *step) approval(req *executor.ApprovalRequest) *executor.ActionResult {
	switch {
	case s.approvalAnswer != nil:
		return &executor.ActionResult{Approval: s.approvalAnswer}
	case !req.Deadline.IsZero() && !s.now.Before(req.Deadline):
		return &executor.ActionResult{}
	}
	return nil
}

// awaitApproval holds no worker while a person is asked: an approve or
// reject request wakes the Loop (annotations start a reconcile), and so
// does the deadline.
func (s *step) awaitApproval(req *executor.ApprovalRequest) reconcile.Result {
	if req.Deadline.IsZero() {
		return reconcile.Result{}
	}
	return reconcile.Result{RequeueAfter: max(req.Deadline.Sub(s.now), time.Millisecond)}
}

// announceApproval emits the Kubernetes Event of an approval's question
// or answer.
func (s *step) announceApproval(e executor.Event) {
	if e.Type == executor.EventApprovalRequested {
		asked := executor.ApprovalRequestedOf(e)
		s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonApprovalRequested, "Wait", "state %s waits for approval: %s", asked.State, asked.Message)
		return
	}
	got := executor.ApprovalAnsweredOf(e)
	typ := corev1.EventTypeNormal
	if got.Verdict != v1alpha1.VerdictApproved {
		typ = corev1.EventTypeWarning
	}
	by := ""
	if got.By != "" {
		by = " by " + got.By
	}
	s.r.event(s.loop, typ, v1alpha1.EventReasonApproval, "Answer", "state %s: %s%s", got.State, got.Verdict, by)
}

// answerApproval carries out an approve or reject request: the answer to
// the approval the Loop waits for, when the request names that one (its
// run, state and iteration). A request with no approval waiting, or naming
// another (a stale page, a second approver, an answer meant for an earlier
// question), is refused with a Warning Event.
func (s *step) answerApproval(verb, req string) {
	waiting, ok := s.loop.Status.WaitingApproval()
	if !ok {
		s.requestWarning(v1alpha1.EventReasonNoApprovalWaiting, "%s: the Loop waits for no approval", verb)
		return
	}
	named, ok := v1alpha1.ParseApprovalTarget(req)
	switch {
	case !ok:
		s.requestWarning(v1alpha1.EventReasonApprovalRefused,
			"%s names no approval: an answer names the run, state and iteration it answers (%s), as looprun approve writes it; it waits in %s", verb, v1alpha1.ApprovalRequest(verb == v1alpha1.RequestApprove, waiting, "NONCE"), waiting)
		return
	case named != waiting:
		s.requestWarning(v1alpha1.EventReasonApprovalRefused,
			"%s answers %s, but the Loop waits in %s: not taken", verb, named, waiting)
		return
	}
	// Who answered is as the request names them: the chart's admission
	// policy admits the request only when that is the user the API server
	// authenticated, holding the verb approve (without the policy, it is
	// what the client wrote).
	s.approvalAnswer = &executor.ApprovalAnswer{
		Approved: verb == v1alpha1.RequestApprove,
		By:       s.loop.Annotations[v1alpha1.ApprovedByAnnotation],
		Message:  s.loop.Annotations[v1alpha1.ApprovalMessageAnnotation],
	}
}
