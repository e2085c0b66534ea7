package pod

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/entrypoint"
)

// Failure reasons of action Pods, the reason of the step's error verdict.
const (
	// ReasonPodDeleted: the Pod was deleted (or evicted) before its action ended.
	ReasonPodDeleted = "PodDeleted"
	// ReasonImagePullFailed: an image of the Pod could not be pulled in time.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonPodNeverStarted: the Pod was not scheduled or its container not
	// created in time.
	ReasonPodNeverStarted = "PodNeverStarted"
	// ReasonPodFailed: the Pod failed without the action's result (evicted,
	// its init container failed, the node was lost).
	ReasonPodFailed = "PodFailed"
	// ReasonNoResult: the action container ended without writing a result
	// (killed for memory, or the wrapper could not run).
	ReasonNoResult = "NoResult"
)

// pullErrors are waiting reasons of a container whose image cannot be had.
var pullErrors = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
}

// hopeless are waiting reasons that no amount of waiting fixes.
var hopeless = map[string]bool{"InvalidImageName": true, "ErrImageNeverPull": true}

// Inspect reads an action Pod: its result once the action container ended,
// a failure when the Pod cannot or will not finish its action, else Running.
// giveUp says the Pod must be deleted, so it can never run the action late.
func Inspect(pod *corev1.Pod, now time.Time, startAllowance time.Duration) (out runner.Outcome, giveUp bool) {
	main := containerStatus(pod.Status.ContainerStatuses, ActionContainer)
	if res, ok := ended(pod, main); ok {
		return done(res), false
	}
	if !pod.DeletionTimestamp.IsZero() {
		return done(runner.TransientFailure(ReasonPodDeleted, "the Pod was deleted before its action ended")), false
	}
	if main != nil && main.State.Running != nil {
		return runner.Outcome{State: runner.Running}, false
	}
	return notStarted(pod, now, startAllowance)
}

// ended reads the result of a Pod whose action container or whole Pod ended.
func ended(pod *corev1.Pod, main *corev1.ContainerStatus) (executor.ActionResult, bool) {
	if pod.Status.Reason == "DeadlineExceeded" {
		// A timeout, as the wrapper's own would be: exit code 124.
		var res executor.ActionResult
		if main != nil && main.State.Terminated != nil {
			if r, err := entrypoint.Decode(main.State.Terminated.Message); err == nil {
				res = r
			}
		}
		res.ExitCode, res.Verdict = evaluate.ExitTimeout, nil
		res.Stderr += "\nthe Pod ran longer than its activeDeadlineSeconds"
		return res, true
	}
	if main != nil && main.State.Terminated != nil {
		t := main.State.Terminated
		if t.Message != "" {
			if res, err := entrypoint.Decode(t.Message); err == nil {
				return res, true
			}
		}
		res := runner.TransientFailure(ReasonNoResult, "the action container ended (%s, exit code %d) without a result", orUnknown(t.Reason), t.ExitCode)
		res.ExitCode = int(t.ExitCode)
		return res, true
	}
	if pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded {
		return executor.ActionResult{}, false
	}
	if pod.Status.Reason == "Evicted" {
		return runner.TransientFailure(ReasonPodDeleted, "the Pod was evicted: %s", pod.Status.Message), true
	}
	return runner.TransientFailure(ReasonPodFailed, "the Pod ended (%s) before its action: %s", orUnknown(pod.Status.Reason), describeWaiting(pod)), true
}

// notStarted waits for a Pod that has not started its action (for a node, an
// image, its init container) until the start allowance is used up.
func notStarted(pod *corev1.Pod, now time.Time, startAllowance time.Duration) (runner.Outcome, bool) {
	statuses := allStatuses(pod)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && hopeless[w.Reason] {
			return done(runner.Failure(ReasonImagePullFailed, "container %s: %s: %s", cs.Name, w.Reason, w.Message)), true
		}
	}
	age := now.Sub(pod.CreationTimestamp.Time)
	if age < startAllowance {
		return runner.Outcome{State: runner.Running, RecheckAfter: startAllowance - age}, false
	}
	reason := ReasonPodNeverStarted
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && pullErrors[w.Reason] {
			reason = ReasonImagePullFailed
		}
	}
	return done(runner.TransientFailure(reason, "the Pod did not start within %s: %s", startAllowance, describeWaiting(pod))), true
}

func done(res executor.ActionResult) runner.Outcome {
	return runner.Outcome{State: runner.Done, Result: res}
}

func containerStatus(list []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// allStatuses lists the Pod's init container statuses, then its containers'.
func allStatuses(pod *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
}

// describeWaiting says what a Pod that has not started waits for.
func describeWaiting(pod *corev1.Pod) string {
	for _, cs := range allStatuses(pod) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := fmt.Sprintf("container %s exited with code %d (%s)", cs.Name, t.ExitCode, orUnknown(t.Reason))
			if t.Message != "" {
				// The runtime's own words, e.g. why the container could not start.
				msg += ": " + strings.TrimSpace(t.Message)
			}
			return msg
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("not scheduled: %s: %s", c.Reason, c.Message)
		}
	}
	if pod.Spec.NodeName == "" {
		return "not scheduled"
	}
	return "no container started"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown reason"
	}
	return s
}
