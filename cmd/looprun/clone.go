package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	git "github.com/go-git/go-git/v5"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
)

// A local run works in the current directory. With --clone it works in a
// checkout of its own, RUN_DIR/repo: a clone of spec.runner.workspace.git
// (its url, revision and depth) when the loop has one, else of the
// repository the current directory is in (its committed HEAD). The
// checkout is ${context.repo_dir}; a loop with workspace.git.push pushes
// its work from there when it ends, as in a cluster (to the url, or to the
// repository it was cloned from). Credentials are not read: a local clone
// is of what this user can reach with none (a local path, a public URL).
// The clone and the push are the run's own steps (the engine's, as in a
// cluster): the push, then the exit hook, once the run ended.

// cloneSource is what --clone clones: the loop's repository, or the one
// the current directory is in.
func cloneSource(spec *v1alpha1.LoopSpec) (gitws.Op, error) {
	if g := spec.GitWorkspace(); g != nil {
		return gitws.Op{Op: gitws.OpClone, URL: g.URL, Revision: g.Revision, Depth: int(g.Depth)}, nil
	}
	repo, err := git.PlainOpenWithOptions(".", &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return gitws.Op{}, fmt.Errorf("--clone: the current directory is in no git repository, and the loop names none (spec.runner.workspace.git): %w", err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return gitws.Op{}, fmt.Errorf("--clone: %w", err)
	}
	return gitws.Op{Op: gitws.OpClone, URL: wt.Filesystem.Root()}, nil
}

// clonedKey keeps in the run's context where its checkout is cloned from
// (the URL without its password), so that a resumed run works there.
// Older runs kept URL@COMMIT, the commit cloned.
const clonedKey = "looprun_cloned"

// markClone names in the run's context (repo_dir, clonedKey) the checkout
// a run made with --clone works in: dir, cloned from op by the run's
// first step.
func markClone(spec *v1alpha1.LoopSpec, op gitws.Op, dir string) {
	spec.SetContext("repo_dir", dir)
	spec.SetContext(clonedKey, gitws.Redact(op.URL))
}

// oldCloned matches the URL@COMMIT of a run that an older looprun cloned
// before it started.
var oldCloned = regexp.MustCompile(`@([0-9a-f]{40})$`)

// clonedRun is the checkout of a run made with --clone, from its saved
// context: its directory and what it is cloned from (the loop's
// workspace.git, else the repository named); ok is false for a run in
// the current directory. A run an older looprun cloned before it started
// gets its clone's status from the commit it kept.
func clonedRun(spec *v1alpha1.LoopSpec, values map[string]any, run *v1alpha1.RunState) (dir string, src *gitws.Op, ok bool) {
	dir, _ = values["repo_dir"].(string)
	from, _ := values[clonedKey].(string)
	if dir == "" || from == "" {
		return "", nil, false
	}
	if m := oldCloned.FindStringSubmatch(from); m != nil {
		from = strings.TrimSuffix(from, m[0])
		if run != nil && run.Git == nil {
			run.Git = &v1alpha1.GitStatus{Clone: &v1alpha1.GitOpStatus{Phase: v1alpha1.ExitHookSucceeded, Commit: m[1]}}
		}
	}
	if src = executor.CloneOf(spec); src == nil {
		src = &gitws.Op{Op: gitws.OpClone, URL: from}
	}
	return dir, src, true
}

// gitProgress prints how the run's clone or push went.
func gitProgress(out io.Writer, dir, url string) func(op string, st *v1alpha1.GitOpStatus) {
	return func(op string, st *v1alpha1.GitOpStatus) {
		switch {
		case st.Phase != v1alpha1.ExitHookSucceeded:
			fmt.Fprintf(out, "The %s failed: %s\n", op, st.Message)
		case op == gitws.OpClone:
			fmt.Fprintf(out, "Cloned %s at %s into %s\n", url, short(st.Commit), dir)
		case !st.Pushed:
			fmt.Fprintf(out, "Nothing to push: no change since the clone (%s)\n", short(st.Commit))
		default:
			fmt.Fprintf(out, "Pushed %s to branch %s of %s\n", short(st.Commit), st.Branch, url)
		}
	}
}

// pushOutcome says what became of an ended run's push: an error when it
// failed (the run's exit code says so), a note when the loop pushes only a
// completed run.
func pushOutcome(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState, out io.Writer) error {
	g := spec.GitWorkspace()
	if g == nil || g.Push == nil || !run.Phase.IsFinished() || run.Git == nil || run.Git.Clone == nil {
		return nil
	}
	if p := run.Git.Push; p != nil && p.Iteration == run.Iteration {
		if p.Phase == v1alpha1.ExitHookFailed {
			return errors.New("the push failed: " + p.Message)
		}
		return nil
	}
	if g.Push.When != v1alpha1.PushWhenAlways && run.Phase != v1alpha1.PhaseCompleted {
		fmt.Fprintf(out, "Not pushed: the run ended %s (workspace.git.push.when: Completed)\n", run.Phase)
	}
	return nil
}

func short(commit string) string { return commit[:min(len(commit), 12)] }
