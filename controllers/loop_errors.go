package controllers

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
)

// ReasonStepRejected ends a step whose object (an action's Pod, a child
// Loop) the API server rejects as asked: asking again cannot help.
const ReasonStepRejected = "StepRejected"

// permanent reports whether an error of a step can never pass by asking
// again: the API server found the object invalid or too large, or a
// policy refused it (a LimitRange, Pod Security admission); or the operator's files cannot be used (a working directory
// that is not one). Such a step ends in error with the message; any other
// error is retried with backoff.
func permanent(err error) bool {
	switch {
	case err == nil:
		return false
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return true
	case apierrors.IsForbidden(err):
		return refusedByPolicy(err.Error())
	}
	return errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EROFS)
}

// refusedByPolicy reports whether a Forbidden answer comes from a policy
// that refuses the object as it is: a LimitRange, Pod Security admission.
// Other refusals may pass (a quota full, a service account not made yet in
// a new namespace) and are retried.
func refusedByPolicy(msg string) bool {
	for _, s := range []string{"violates PodSecurity", " per Container is ", " per Pod is ", " per PersistentVolumeClaim is ", "limit to request ratio"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// rejected is the result that ends a step whose object cannot be made.
func rejected(what string, err error) *executor.ActionResult {
	res := runner.Failure(ReasonStepRejected, "%s: %v", what, err)
	return &res
}

// tooLarge reports whether the API server refused a write for its size
// (the object over etcd's limit).
func tooLarge(err error) bool {
	return apierrors.IsRequestEntityTooLargeError(err) || err != nil && strings.Contains(err.Error(), "request is too large")
}

// retryMessage is what the Loop's conditions say while a step is retried.
func retryMessage(err error) string {
	return fmt.Sprintf("the step failed and is taken again with backoff: %v", err)
}
