package executor

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/gitws"
)

// A run's life outside its states is the engine's too, in one order: the
// checkout before the first state (Options.Clone), and once the run ended
// its push (workspace.git.push), then its exit hook (spec.onExit), so that
// the hook reads ${loop.git.*}. Plan returns each as a StepAction whose
// action IsLifecycle; Complete records its result in status.git.clone,
// status.git.push or status.exitHook. A driver runs them through the path
// its actions take; Step.InFlight says one was begun before (a restart).

// IsLifecycle reports whether a is the run's clone, push or exit hook
// rather than the action of a state.
func IsLifecycle(a *Action) bool { return a != nil && (a.Exit || a.Git != nil) }

// CloneOf is the clone a Loop's spec.runner.workspace.git asks for before
// its first state; nil for none.
func CloneOf(spec *v1alpha1.LoopSpec) *gitws.Op {
	g := spec.GitWorkspace()
	if g == nil {
		return nil
	}
	return &gitws.Op{Op: gitws.OpClone, URL: g.URL, Revision: g.Revision, Depth: int(g.Depth)}
}

// cloneSource is what the run's checkout is cloned from: Options.Clone,
// else the Loop's workspace.git; nil for none.
func (m *Machine) cloneSource() *gitws.Op {
	if m.opts.Clone != nil {
		return m.opts.Clone
	}
	return CloneOf(m.spec)
}

// checkout is the step of the run's clone when it is still to be made (or
// in flight); ok is false when there is none to make.
func (t *turn) checkout() (Step, bool) {
	run := t.run
	if t.m.opts.Clone == nil || run.Phase == "" || run.Phase == v1alpha1.PhasePending || run.Phase.IsFinished() {
		return Step{}, false
	}
	if g := run.Git; g != nil && g.Clone != nil && g.Clone.Phase != v1alpha1.ExitHookRunning {
		return Step{}, false // made (or failed, and the run ended)
	}
	st, started := GitOp(run, gitws.OpClone)
	if !started {
		st.StartedAt = ptrTime(t.now)
	}
	a, _ := t.m.GitAction(run, gitws.OpClone, t.now) // a clone's action always builds
	return Step{Kind: StepAction, Action: a, InFlight: started}, true
}

// AfterEnd reports whether the ended run has steps left after its end: its
// push, its exit hook. A Plan that ends the run returns StepDone; once the
// end is saved, the driver plans again while AfterEnd says so.
func (m *Machine) AfterEnd(run *v1alpha1.RunState) bool {
	if m.opts.Simulated {
		return NeedsPush(m.spec, run)
	}
	return AfterEnd(m.spec, run)
}

// AfterEnd reports whether an ended run of spec has its push or its exit
// hook still to run (for a driver that has no machine at hand).
func AfterEnd(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) bool {
	return NeedsPush(spec, run) || NeedsExitHook(spec, run)
}

// afterEnd is the step of an ended run: its push, then its exit hook, each
// once per end; then StepDone. One that cannot be made (its templates do
// not expand) is recorded as failed and the next comes.
func (t *turn) afterEnd() Step {
	run, spec := t.run, t.m.spec
	if NeedsPush(spec, run) {
		st, started := GitOp(run, gitws.OpPush)
		a, err := t.m.GitAction(run, gitws.OpPush, t.now)
		if !started {
			st.StartedAt = ptrTime(t.now)
		}
		if err == nil {
			return Step{Kind: StepAction, Action: a, InFlight: started}
		}
		EndGitOp(st, ExitHookNotRun(err), t.now)
	}
	if t.m.opts.Simulated || !NeedsExitHook(spec, run) {
		return Step{Kind: StepDone}
	}
	started := ExitHookStarted(run)
	if !started {
		run.ExitHook = &v1alpha1.ExitHookStatus{Iteration: run.Iteration, Phase: v1alpha1.ExitHookRunning, StartedAt: ptrTime(t.now)}
	}
	a, err := t.m.ExitAction(run, t.now)
	if err != nil {
		EndExitHook(run.ExitHook, ExitHookNotRun(err), t.now)
		return Step{Kind: StepDone}
	}
	return Step{Kind: StepAction, Action: a, InFlight: started}
}

// completeLifecycle records the result of the run's clone, push or exit
// hook in flight (res nil: the process running it was lost); it reports
// false when none is in flight. A clone that failed ends the run.
func (t *turn) completeLifecycle(res *ActionResult) bool {
	run := t.run
	st := lifecycleInFlight(run)
	if st == lifecycleNone {
		return false
	}
	if res == nil {
		res = &ActionResult{ExitCode: -1, Failure: &ActionFailure{Reason: "ActionLost", Message: "the process running it was lost"}}
	}
	switch st {
	case lifecycleClone:
		c := run.Git.Clone
		EndGitOp(c, *res, t.now)
		src := t.m.cloneSource()
		url := ""
		if src != nil {
			url = gitws.Redact(src.URL)
		}
		if c.Phase != v1alpha1.ExitHookSucceeded {
			t.finish(v1alpha1.TerminatedError, "the clone of "+url+" failed: "+c.Message)
			return true
		}
		ev := GitCloneEvent{URL: url, Commit: c.Commit}
		if src != nil {
			ev.Revision = src.Revision
		}
		t.emit(EventGitClone, ev.Data())
	case lifecyclePush:
		EndGitOp(run.Git.Push, *res, t.now)
	case lifecycleExit:
		EndExitHook(run.ExitHook, *res, t.now)
	}
	return true
}

// lifecycleStep names the part of a run's life outside its states.
type lifecycleStep int

const (
	lifecycleNone lifecycleStep = iota
	lifecycleClone
	lifecyclePush
	lifecycleExit
)

// lifecycleInFlight is the clone, push or exit hook the run has begun and
// not yet recorded the end of.
func lifecycleInFlight(run *v1alpha1.RunState) lifecycleStep {
	g := run.Git
	switch {
	case !run.Phase.IsFinished():
		if g != nil && g.Clone != nil && g.Clone.Phase == v1alpha1.ExitHookRunning {
			return lifecycleClone
		}
	case g != nil && g.Push != nil && g.Push.Iteration == run.Iteration && g.Push.Phase == v1alpha1.ExitHookRunning:
		return lifecyclePush
	case ExitHookStarted(run):
		return lifecycleExit
	}
	return lifecycleNone
}

// ForgetLifecycle takes back the begun clone, push or exit hook of a that
// the driver could not start at all (the API refused its Pod): Plan
// begins it afresh.
func ForgetLifecycle(run *v1alpha1.RunState, a *Action) {
	switch {
	case a.Git != nil:
		ForgetGitOp(run, a.Git.Op)
	case a.Exit:
		run.ExitHook = nil
	}
}

// LifecycleStarted notes where the begun clone, push or exit hook runs
// (its Pod), once the driver started it.
func LifecycleStarted(run *v1alpha1.RunState, pod string) {
	switch lifecycleInFlight(run) {
	case lifecycleClone:
		run.Git.Clone.Pod = pod
	case lifecyclePush:
		run.Git.Push.Pod = pod
	case lifecycleExit:
		run.ExitHook.Pod = pod
	}
}

// CloneMessage says, for a person, what the run's clone made or why it failed.
func (m *Machine) CloneMessage(run *v1alpha1.RunState) string {
	src := m.cloneSource()
	if src == nil || run.Git == nil || run.Git.Clone == nil {
		return ""
	}
	c := run.Git.Clone
	url := gitws.Redact(src.URL)
	if c.Phase != v1alpha1.ExitHookSucceeded {
		return fmt.Sprintf("the clone of %s failed: %s", url, c.Message)
	}
	rev := ""
	if src.Revision != "" {
		rev = " (" + src.Revision + ")"
	}
	return fmt.Sprintf("cloned %s%s at %s", url, rev, c.Commit)
}

func ptrTime(t time.Time) *metav1.Time {
	ts := metav1.NewTime(t)
	return &ts
}
