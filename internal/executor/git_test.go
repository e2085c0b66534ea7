package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/gitws"
)

func gitSpec() *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "true", Next: "done"}, "done": {Terminal: true}},
		Runner: &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "ws", Git: &v1alpha1.GitWorkspace{
			URL: "https://h/r.git", Revision: "main", Depth: 1,
			Push: &v1alpha1.GitPush{Branch: "looprun/${loop.name}-${run.id}", CommitMessage: "${loop.name} ended ${loop.phase} in ${loop.final_state}"}}}}}
}

func TestGitActionsAndTheirEnds(t *testing.T) {
	spec := gitSpec()
	m, err := New("fix", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	run := &v1alpha1.RunState{}
	m.Start(run, "r1", now)
	if !NeedsClone(spec, run) || NeedsPush(spec, run) {
		t.Fatal("a started run needs its clone, not its push")
	}
	a, err := m.GitAction(run, gitws.OpClone, now)
	if err != nil || a.State != GitCloneState || a.Git.URL != "https://h/r.git" || a.Git.Revision != "main" || a.Git.Depth != 1 {
		t.Fatalf("clone action %+v %v", a, err)
	}
	st, started := GitOp(run, gitws.OpClone)
	if started {
		t.Fatal("a new clone counted as started")
	}
	if _, again := GitOp(run, gitws.OpClone); !again {
		t.Fatal("a running clone was not found again")
	}
	EndGitOp(st, ActionResult{Output: `{"commit":"abc1234"}` + "\n"}, now)
	if st.Phase != v1alpha1.ExitHookSucceeded || st.Commit != "abc1234" || NeedsClone(spec, run) {
		t.Fatalf("clone status %+v", st)
	}

	run.Phase, run.CurrentState, run.Iteration = v1alpha1.PhaseFailed, "a", 3
	if NeedsPush(spec, run) {
		t.Fatal("a failed run pushes only with when: Always")
	}
	spec.Runner.Workspace.Git.Push.When = v1alpha1.PushWhenAlways
	if !NeedsPush(spec, run) {
		t.Fatal("when: Always does not push a failed run")
	}
	p, err := m.GitAction(run, gitws.OpPush, now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Git.Branch != "looprun/fix-r1" || p.Git.Message != "fix ended Failed in a" || p.Git.Base != "abc1234" || p.State != GitPushState {
		t.Fatalf("push action %+v", p.Git)
	}
	push, _ := GitOp(run, gitws.OpPush)
	EndGitOp(push, ActionResult{ExitCode: 1, Stderr: "Counting objects: 100%\rdone\ngit push: push looprun/fix-r1 to https://h/r.git: non-fast-forward update\n"}, now)
	if push.Phase != v1alpha1.ExitHookFailed || push.Message != "git push: push looprun/fix-r1 to https://h/r.git: non-fast-forward update" {
		t.Fatalf("push status %+v", push)
	}
	if NeedsPush(spec, run) {
		t.Fatal("an end pushes once")
	}
	if vars := ExitVars(run)["git"].(map[string]any); vars["cloned"] != "abc1234" || vars["pushed"] != false {
		t.Fatalf("${loop.git}: %v", vars)
	}
	// A run that fails before its clone ends there.
	fresh := &v1alpha1.RunState{}
	m.Start(fresh, "r2", now)
	evs := m.Fail(fresh, now, "the clone failed")
	if fresh.Phase != v1alpha1.PhaseFailed || fresh.TerminatedBy != v1alpha1.TerminatedError || len(evs) != 1 || evs[0].Type != EventLoopComplete {
		t.Fatalf("failed run %+v %v", fresh, evs)
	}
}

// A branch that only its expansion makes bad (a context value, an
// agent's capture) is refused when the push is planned, never pushed.
func TestGitPushBranchExpandedToABadName(t *testing.T) {
	for _, b := range []string{"-delete", "HEAD", "x..y"} {
		spec := gitSpec()
		spec.Runner.Workspace.Git.Push.Branch = "${context.b}"
		spec.SetContext("b", b)
		m, err := New("fix", spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		run := &v1alpha1.RunState{}
		m.Start(run, "r1", time.Now())
		run.Phase = v1alpha1.PhaseCompleted
		if _, err := m.GitAction(run, gitws.OpPush, time.Now()); err == nil || !strings.Contains(err.Error(), "spec.runner.workspace.git.push.branch") {
			t.Fatalf("branch %q: %v", b, err)
		}
	}
}
