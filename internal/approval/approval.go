// Package approval answers the approval a Loop waits for, as the person
// whose credentials the client carries: an approve or reject request on the
// Loop that names its author, which the chart's admission policy admits
// only from holders of the verb approve. looprun approve and the web view
// of looprun ui both answer through it.
package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Verb is the RBAC verb on loops.looprun.io that answering an approval
// needs (the looprun-approver ClusterRole grants it, with patch).
const Verb = "approve"

// ErrNotWaiting is returned for a Loop that waits for no approval.
var ErrNotWaiting = errors.New("waits for no approval")

// Waiting is the approval loop waits for, or nil.
func Waiting(loop *v1alpha1.Loop) *v1alpha1.ActionStatus {
	a := loop.Status.Action
	if a == nil || a.Approval == nil || loop.Status.Phase.IsFinished() {
		return nil
	}
	return a
}

// WhoAmI is the user the API server authenticates c as (a
// SelfSubjectReview, as kubectl auth whoami asks): the name an answer must
// carry for the admission policy to admit it.
func WhoAmI(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("cannot learn who you are from the API server (SelfSubjectReview), which an approval names: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server did not say who you are (SelfSubjectReview): an approval must name its author")
	}
	return review.Status.UserInfo.Username, nil
}

// MayAnswer says whether c's user may answer the approvals of the Loop
// ns/name: the verb approve and patch on it (SelfSubjectAccessReviews).
func MayAnswer(ctx context.Context, c client.Client, ns, name string) (bool, error) {
	for _, verb := range []string{Verb, "patch"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: v1alpha1.GroupVersion.Group, Resource: "loops", Namespace: ns, Name: name, Verb: verb,
			},
		}}
		if err := c.Create(ctx, review); err != nil {
			return false, err
		}
		if !review.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// ErrAnswered is returned when the approval waiting has an answer the
// operator has not taken yet: a second answer would replace it unseen.
var ErrAnswered = errors.New("was answered already")

// ErrStale is returned for an answer to an approval the Loop no longer
// waits for.
var ErrStale = errors.New("no longer waits for that approval")

// Answer writes an approve or reject request, with message, on loop (read
// just before) and returns the approval it answers. With want, the answer
// is to that approval only (the one the person was shown): one the Loop no
// longer waits for is ErrStale. The request names the approval, and the
// operator takes it only while that one waits.
func Answer(ctx context.Context, c client.Client, loop *v1alpha1.Loop, approve bool, message string, want *v1alpha1.ApprovalTarget, now time.Time) (*v1alpha1.ActionStatus, error) {
	a := Waiting(loop)
	if a == nil {
		return nil, fmt.Errorf("loop/%s %w", loop.Name, ErrNotWaiting)
	}
	target, _ := loop.Status.WaitingApproval()
	if want != nil && *want != target {
		return nil, fmt.Errorf("loop/%s %w (%s): it waits in %s", loop.Name, ErrStale, *want, target)
	}
	if pending := loop.Annotations[v1alpha1.RequestAnnotation]; pending != "" && pending != loop.Status.LastRequest {
		if named, ok := v1alpha1.ParseApprovalTarget(pending); ok && named == target {
			verb, _, _ := v1alpha1.ParseRequest(pending)
			return nil, fmt.Errorf("loop/%s: %s %w (%s by %s), not yet taken by the operator", loop.Name, target, ErrAnswered,
				verb, loop.Annotations[v1alpha1.ApprovedByAnnotation])
		}
	}
	me, err := WhoAmI(ctx, c)
	if err != nil {
		return nil, err
	}
	// At the resourceVersion read: an answer written meanwhile makes this
	// one fail, not replace it unseen.
	patch := client.MergeFromWithOptions(loop.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[v1alpha1.ApprovalMessageAnnotation] = message
	loop.Annotations[v1alpha1.ApprovedByAnnotation] = me
	loop.Annotations[v1alpha1.RequestAnnotation] = v1alpha1.ApprovalRequest(approve, target, fmt.Sprint(now.UnixNano()))
	if err := c.Patch(ctx, loop, patch); err != nil {
		return nil, err
	}
	return a, nil
}
