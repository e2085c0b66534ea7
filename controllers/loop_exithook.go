package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
)

// exitHook runs the ended run's spec.onExit, once per end: a Pod of the
// Loop's namespace, named from the run and its last iteration, so that a
// restarted operator finds it instead of starting another. Its result goes
// into status.exitHook and an Event; how the run ended does not change.
// running is true while the hook runs.
func (r *LoopReconciler) exitHook(ctx context.Context, loop *v1alpha1.Loop) (res reconcile.Result, running bool, err error) {
	run := &loop.Status.RunState
	started := executor.ExitHookStarted(run)
	a, err := r.exitAction(loop)
	if err != nil {
		r.endExitHook(loop, started, executor.ExitHookNotRun(err), "")
		return reconcile.Result{}, false, nil
	}
	out, where, err := r.Actions.Hook(ctx, loop, *a, started)
	if err != nil {
		return reconcile.Result{}, false, err
	}
	if !started {
		run.ExitHook = &v1alpha1.ExitHookStatus{Iteration: run.Iteration, Phase: v1alpha1.ExitHookRunning, Pod: where, StartedAt: ptr.To(metav1.NewTime(r.now()))}
		r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonExitHookStarted, "Run", "the run ended (%s): its exit hook runs%s", run.Phase, inPod(where))
	}
	switch out.State {
	case runner.Running:
		return reconcile.Result{RequeueAfter: out.RecheckAfter}, true, nil
	case runner.Done:
		r.endExitHook(loop, true, out.Result, where)
	default: // lost with the process that ran it
		r.endExitHook(loop, true, runner.Failure("ActionLost", "the process running the exit hook was lost"), where)
	}
	return reconcile.Result{}, false, nil
}

// exitAction is the hook's action, its templates expanded.
func (r *LoopReconciler) exitAction(loop *v1alpha1.Loop) (*executor.Action, error) {
	m, err := r.endMachine(loop)
	if err != nil {
		return nil, err
	}
	return m.ExitAction(&loop.Status.RunState, r.now())
}

// endMachine is the machine of an ended run, which expands the templates
// of what runs after its end (the exit hook, the push).
func (r *LoopReconciler) endMachine(loop *v1alpha1.Loop) (*executor.Machine, error) {
	return executor.New(loop.Name, &loop.Spec, executor.Options{
		Env: func(string) (string, bool) { return "", false }, ContextDefaults: runContext(loop), Prices: r.Prices,
	})
}

// endExitHook records how the hook ended.
func (r *LoopReconciler) endExitHook(loop *v1alpha1.Loop, started bool, res executor.ActionResult, where string) {
	run := &loop.Status.RunState
	now := metav1.NewTime(r.now())
	h := &v1alpha1.ExitHookStatus{Iteration: run.Iteration, Pod: where, StartedAt: &now}
	if started && run.ExitHook != nil {
		h = run.ExitHook
	}
	executor.EndExitHook(h, res, now.Time)
	if h.Phase == v1alpha1.ExitHookSucceeded {
		r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonExitHookSucceeded, "Run", "the exit hook ended with exit 0%s", inPod(where))
	} else {
		r.event(loop, corev1.EventTypeWarning, v1alpha1.EventReasonExitHookFailed, "Run", "the exit hook failed (exit %d)%s: %s", *h.ExitCode, inPod(where), h.Message)
	}
	run.ExitHook = h
}

func inPod(where string) string {
	if where == "" {
		return ""
	}
	return " in Pod " + where
}
