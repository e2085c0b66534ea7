package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/runner"
)

// lifecycle starts or looks at the run's clone (before its first state),
// push or exit hook (after its end), each an action of its own: a Pod
// named from the run, made once, so that a restarted operator finds it
// instead of starting another. done is false while it runs; then
// s.recheck says when to look again. How it went goes into status.git or
// status.exitHook (the engine's Complete) and an Event.
func (s *step) lifecycle(ctx context.Context, step executor.Step) (res *executor.ActionResult, done bool, err error) {
	run := &s.loop.Status.RunState
	a := step.Action
	out, where, err := s.r.Actions.Hook(ctx, s.loop, *a, step.InFlight)
	if err != nil {
		if !step.InFlight {
			executor.ForgetLifecycle(run, a) // not begun: begun afresh next time
		}
		return nil, false, err
	}
	executor.LifecycleStarted(run, where)
	if !step.InFlight && a.Exit {
		s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonExitHookStarted, "Run", "the run ended (%s): its exit hook runs%s", run.Phase, inPod(where))
	}
	switch out.State {
	case runner.Running:
		s.recheck = out.RecheckAfter
		return nil, false, nil
	case runner.Done:
		return ptr.To(out.Result), true, nil
	}
	// Lost with the process that ran it.
	what := "exit hook"
	if a.Git != nil {
		what = a.Git.Op
	}
	return ptr.To(runner.Failure("ActionLost", "the process running the %s was lost", what)), true, nil
}

// lifecycleEnded emits the Event of the clone, push or exit hook a that
// the engine just recorded.
func (s *step) lifecycleEnded(a *executor.Action) {
	loop, run := s.loop, &s.loop.Status.RunState
	switch {
	case a.Exit && run.ExitHook != nil:
		h := run.ExitHook
		if h.Phase == v1alpha1.ExitHookSucceeded {
			s.r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonExitHookSucceeded, "Run", "the exit hook ended with exit 0%s", inPod(h.Pod))
		} else {
			s.r.event(loop, corev1.EventTypeWarning, v1alpha1.EventReasonExitHookFailed, "Run", "the exit hook failed (exit %d)%s: %s", ptr.Deref(h.ExitCode, -1), inPod(h.Pod), h.Message)
		}
	case a.Git == nil || run.Git == nil:
	case a.Git.Op == gitws.OpClone && run.Git.Clone != nil:
		st := run.Git.Clone
		if st.Phase == v1alpha1.ExitHookSucceeded {
			s.r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonCloned, "Clone", "%s%s", s.m.CloneMessage(run), inPod(st.Pod))
		} else {
			s.r.event(loop, corev1.EventTypeWarning, v1alpha1.EventReasonCloneFailed, "Clone", "the clone of %s failed%s: %s", gitws.Redact(a.Git.URL), inPod(st.Pod), st.Message)
		}
	case a.Git.Op == gitws.OpPush && run.Git.Push != nil:
		st, url := run.Git.Push, gitws.Redact(a.Git.URL)
		switch {
		case st.Phase != v1alpha1.ExitHookSucceeded:
			s.r.event(loop, corev1.EventTypeWarning, v1alpha1.EventReasonPushFailed, "Push", "the push to %s failed%s: %s", url, inPod(st.Pod), st.Message)
		case st.Pushed:
			s.r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonPushed, "Push", "pushed %s to branch %s of %s", st.Commit, st.Branch, url)
		default:
			s.r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonNothingToPush, "Push", "nothing changed since the clone (%s): branch %s not pushed", st.Commit, st.Branch)
		}
	}
}

func inPod(where string) string {
	if where == "" {
		return ""
	}
	return " in Pod " + where
}
