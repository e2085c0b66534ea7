package executor

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/gitws"
)

// The names a clone and a push go by where an action's state is named
// (their Pods' labels, their logs).
const (
	GitCloneState = "git-clone"
	GitPushState  = "git-push"
)

// EventGitClone is the event log's record of the run's checkout.
const EventGitClone = "git_clone"

// DefaultCommitMessage is the message of the commit a push makes.
const DefaultCommitMessage = "looprun: ${loop.name} run ${run.id}"

// NeedsClone reports whether the running run's checkout is still to be
// made (or looked at) before its next step.
func NeedsClone(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) bool {
	if spec.GitWorkspace() == nil || run.Phase.IsFinished() || run.Phase == "" || run.Phase == v1alpha1.PhasePending {
		return false
	}
	return run.Git == nil || run.Git.Clone == nil || run.Git.Clone.Phase == v1alpha1.ExitHookRunning
}

// NeedsPush reports whether the ended run's push is still to be made (or
// looked at): the spec pushes at such an end, the checkout was made, and
// no push of this end has finished.
func NeedsPush(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) bool {
	g := spec.GitWorkspace()
	if g == nil || g.Push == nil || !run.Phase.IsFinished() || run.Git == nil || run.Git.Clone == nil ||
		run.Git.Clone.Phase != v1alpha1.ExitHookSucceeded {
		return false
	}
	if g.Push.When != v1alpha1.PushWhenAlways && run.Phase != v1alpha1.PhaseCompleted {
		return false
	}
	p := run.Git.Push
	return p == nil || p.Iteration != run.Iteration || p.Phase == v1alpha1.ExitHookRunning
}

// GitOp returns the status of the run's clone or push, made when missing
// (or left from an earlier end) and started says it is not.
func GitOp(run *v1alpha1.RunState, op string) (st *v1alpha1.GitOpStatus, started bool) {
	if run.Git == nil {
		run.Git = &v1alpha1.GitStatus{}
	}
	slot := &run.Git.Clone
	if op == gitws.OpPush {
		slot = &run.Git.Push
	}
	if *slot != nil && (*slot).Iteration == run.Iteration && (*slot).Phase == v1alpha1.ExitHookRunning {
		return *slot, true
	}
	*slot = &v1alpha1.GitOpStatus{Iteration: run.Iteration, Phase: v1alpha1.ExitHookRunning}
	return *slot, false
}

// ForgetGitOp drops the status of a clone or push that could not be
// begun, so that it is begun afresh.
func ForgetGitOp(run *v1alpha1.RunState, op string) {
	if run.Git == nil {
		return
	}
	if op == gitws.OpPush {
		run.Git.Push = nil
	} else {
		run.Git.Clone = nil
	}
	if run.Git.Clone == nil && run.Git.Push == nil {
		run.Git = nil
	}
}

// GitAction is the action of the run's clone or push (op), the push's
// branch and commit message expanded over the run.
func (m *Machine) GitAction(run *v1alpha1.RunState, op string, now time.Time) (*Action, error) {
	g := m.spec.GitWorkspace()
	a := &Action{Iteration: run.Iteration, Timeout: v1alpha1.DefaultGitTimeoutSeconds * time.Second}
	if op == gitws.OpClone {
		src := m.cloneSource()
		if src == nil {
			return nil, fmt.Errorf("the Loop has no spec.runner.workspace.git")
		}
		clone := *src
		clone.Op = gitws.OpClone
		a.State, a.Git = GitCloneState, &clone
		return a, nil
	}
	if g == nil || g.Push == nil {
		return nil, fmt.Errorf("the Loop has no spec.runner.workspace.git.push")
	}
	a.State = GitPushState
	a.Git = &gitws.Op{Op: op, URL: g.URL, Revision: g.Revision, Depth: int(g.Depth)}
	p := g.Push
	t := m.begin(run, now)
	vars := t.vars()
	vars.Exit = ExitVars(run)
	var err error
	if a.Git.Branch, err = expandGit(p.Branch, vars, "branch"); err != nil {
		return nil, err
	}
	if err := gitws.CheckBranch(a.Git.Branch); err != nil {
		return nil, fmt.Errorf("spec.runner.workspace.git.push.branch: %w", err)
	}
	msg := p.CommitMessage
	if msg == "" {
		msg = DefaultCommitMessage
	}
	if a.Git.Message, err = expandGit(msg, vars, "commitMessage"); err != nil {
		return nil, err
	}
	if p.Author != nil {
		a.Git.AuthorName, a.Git.AuthorEmail = p.Author.Name, p.Author.Email
	}
	if run.Git != nil && run.Git.Clone != nil {
		a.Git.Base = run.Git.Clone.Commit
	}
	return a, nil
}

func expandGit(tmpl string, vars *interpolate.Vars, field string) (string, error) {
	s, err := interpolate.Expand(tmpl, vars)
	if err != nil {
		return "", fmt.Errorf("spec.runner.workspace.git.push.%s: %w", field, err)
	}
	return s, nil
}

// EndGitOp records in st how the clone or push ended at now: Succeeded
// with what it did, or Failed with git's error.
func EndGitOp(st *v1alpha1.GitOpStatus, res ActionResult, now time.Time) {
	end := metav1.NewTime(now)
	st.FinishedAt = &end
	if res.ExitCode == 0 && res.Failure == nil {
		out, err := gitws.ParseResult(res.Output)
		if err == nil {
			st.Phase, st.Message = v1alpha1.ExitHookSucceeded, ""
			st.Commit, st.Branch, st.Pushed = out.Commit, out.Branch, out.Pushed
			return
		}
		res.Stderr = err.Error()
	}
	st.Phase, st.Message = v1alpha1.ExitHookFailed, ExitHookMessage(res)
	// What `entrypoint git` says of its error, without the progress
	// printed before it.
	for _, op := range []string{gitws.OpClone, gitws.OpPush} {
		if i := strings.LastIndex(st.Message, "git "+op+": "); i >= 0 {
			st.Message = strings.TrimSpace(st.Message[i:])
			break
		}
	}
}

// Fail ends the run with an error before its next step (its checkout
// could not be made).
func (m *Machine) Fail(run *v1alpha1.RunState, now time.Time, message string) []Event {
	t := m.begin(run, now)
	t.finish(v1alpha1.TerminatedError, message)
	return t.done()
}
