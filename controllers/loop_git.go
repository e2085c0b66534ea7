package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/runner"
)

// clone makes the run's checkout (spec.runner.workspace.git) before its
// first step, with an action of its own (a Pod named from the run, made
// once). done is false while it runs; a clone that fails ends the run
// with git's error.
func (s *step) clone(ctx context.Context) (done bool, err error) {
	run := &s.loop.Status.RunState
	res, where, running, err := s.r.gitOp(ctx, s.loop, s.m, gitws.OpClone, s.now)
	if err != nil || running {
		s.recheck = res.RequeueAfter
		return false, err
	}
	g, st := s.loop.Spec.GitWorkspace(), run.Git.Clone
	url := gitws.Redact(g.URL)
	if st.Phase == v1alpha1.ExitHookSucceeded {
		s.add(s.m.Cloned(run, s.now, g, st.Commit))
		s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonCloned, "Clone", "cloned %s%s at %s%s", url, atRevision(g.Revision), st.Commit, inPod(where))
		return true, nil
	}
	s.r.event(s.loop, corev1.EventTypeWarning, v1alpha1.EventReasonCloneFailed, "Clone", "the clone of %s failed%s: %s", url, inPod(where), st.Message)
	s.add(s.m.Fail(run, s.now, "the clone of "+url+" failed: "+st.Message))
	return true, nil
}

// push commits and pushes the ended run's checkout, once per end, with an
// action of its own; running is true while it runs. How the run ended
// does not change.
func (r *LoopReconciler) push(ctx context.Context, loop *v1alpha1.Loop) (res reconcile.Result, running bool, err error) {
	m, err := r.endMachine(loop)
	if err != nil {
		return reconcile.Result{}, false, nil // an invalid spec pushes nothing
	}
	res, where, running, err := r.gitOp(ctx, loop, m, gitws.OpPush, r.now())
	if err != nil || running {
		return res, running, err
	}
	g, st := loop.Spec.GitWorkspace(), loop.Status.Git.Push
	url := gitws.Redact(g.URL)
	switch {
	case st.Phase != v1alpha1.ExitHookSucceeded:
		r.event(loop, corev1.EventTypeWarning, v1alpha1.EventReasonPushFailed, "Push", "the push to %s failed%s: %s", url, inPod(where), st.Message)
	case st.Pushed:
		r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonPushed, "Push", "pushed %s to branch %s of %s", st.Commit, st.Branch, url)
	default:
		r.event(loop, corev1.EventTypeNormal, v1alpha1.EventReasonNothingToPush, "Push", "nothing changed since the clone (%s): branch %s not pushed", st.Commit, st.Branch)
	}
	return reconcile.Result{}, false, nil
}

// gitOp starts or looks at the run's clone or push (op) and records how it
// went in status.git; running is true while it runs, and res says when to
// look again.
func (r *LoopReconciler) gitOp(ctx context.Context, loop *v1alpha1.Loop, m *executor.Machine, op string, now time.Time) (res reconcile.Result, where string, running bool, err error) {
	run := &loop.Status.RunState
	st, started := executor.GitOp(run, op)
	a, err := m.GitAction(run, op, now)
	if err != nil {
		executor.EndGitOp(st, executor.ExitHookNotRun(err), now)
		return reconcile.Result{}, "", false, nil
	}
	out, where, err := r.Actions.Hook(ctx, loop, *a, started)
	if err != nil {
		if !started {
			executor.ForgetGitOp(run, op) // not begun: started afresh next time
		}
		return reconcile.Result{}, where, false, err
	}
	if !started {
		st.Pod, st.StartedAt = where, ptr.To(metav1.NewTime(now))
	}
	switch out.State {
	case runner.Running:
		return reconcile.Result{RequeueAfter: out.RecheckAfter}, where, true, nil
	case runner.Done:
		executor.EndGitOp(st, out.Result, now)
	default: // lost with the process that ran it
		executor.EndGitOp(st, runner.Failure("ActionLost", "the process running the %s was lost", op), now)
	}
	return reconcile.Result{}, where, false, nil
}

func atRevision(rev string) string {
	if rev == "" {
		return ""
	}
	return " (" + rev + ")"
}
