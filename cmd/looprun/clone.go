package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/localrun"
)

// A local run works in the current directory. With --clone it works in a
// checkout of its own, RUN_DIR/repo: a clone of spec.runner.workspace.git
// (its url, revision and depth) when the loop has one, else of the
// repository the current directory is in (its committed HEAD). The
// checkout is ${context.repo_dir}; a loop with workspace.git.push pushes
// its work from there when it ends, as in a cluster (to the url, or to the
// repository it was cloned from). Credentials are not read: a local clone
// is of what this user can reach with none (a local path, a public URL).

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

// cloneForRun makes the run's checkout under runDir and names it in the
// run's context (repo_dir); it returns the checkout and the cloned commit.
func cloneForRun(ctx context.Context, spec *v1alpha1.LoopSpec, runDir string, out io.Writer) (dir, commit string, err error) {
	op, err := cloneSource(spec)
	if err != nil {
		return "", "", err
	}
	op.Dir = filepath.Join(runDir, v1alpha1.CheckoutDir)
	res, err := gitws.Clone(ctx, op, io.Discard)
	if err != nil {
		return "", "", fmt.Errorf("--clone: %w", err)
	}
	spec.SetContext("repo_dir", op.Dir)
	// Kept without its password: the context is printed and saved in the
	// state file. A push goes to the loop's own URL (pushClone).
	spec.SetContext(clonedKey, gitws.Redact(op.URL)+"@"+res.Commit)
	fmt.Fprintf(out, "Cloned %s at %s into %s\n", gitws.Redact(op.URL), short(res.Commit), op.Dir)
	return op.Dir, res.Commit, nil
}

// clonedKey keeps in the run's context where its checkout came from
// (URL@COMMIT), so that a resumed run works there and pushes from it.
const clonedKey = "looprun_cloned"

// clonedRun is the checkout of a run made with --clone, from its saved
// context: its directory and the cloned commit; ok is false for a run in
// the current directory.
func clonedRun(values map[string]any) (dir, commit string, ok bool) {
	dir, _ = values["repo_dir"].(string)
	from, _ := values[clonedKey].(string)
	i := strings.LastIndexByte(from, '@')
	if dir == "" || i < 0 {
		return "", "", false
	}
	return dir, from[i+1:], true
}

// pushClone pushes the work of an ended run made with --clone, when its
// loop says so (workspace.git.push, at such an end), to the loop's URL.
func pushClone(ctx context.Context, d *localrun.Driver, run *v1alpha1.RunState, out io.Writer) error {
	dir, commit, ok := clonedRun(d.Context)
	spec := d.Machine.Spec()
	g := spec.GitWorkspace()
	if !ok || g == nil || g.Push == nil || !run.Phase.IsFinished() {
		return nil
	}
	if g.Push.When != v1alpha1.PushWhenAlways && run.Phase != v1alpha1.PhaseCompleted {
		fmt.Fprintf(out, "Not pushed: the run ended %s (workspace.git.push.when: Completed)\n", run.Phase)
		return nil
	}
	a, err := d.Machine.GitAction(run, gitws.OpPush, time.Now())
	if err != nil {
		return err
	}
	// The push goes to spec.runner.workspace.git.url, by URL (gitws.Push),
	// never where the context or the checkout's config say.
	op := *a.Git
	op.Dir, op.Base = dir, commit
	url := gitws.Redact(op.URL)
	res, err := gitws.Push(ctx, op, io.Discard)
	switch {
	case err != nil:
		return errors.New("the push failed: " + err.Error())
	case !res.Pushed:
		fmt.Fprintf(out, "Nothing to push: no change since %s\n", short(commit))
	default:
		fmt.Fprintf(out, "Pushed %s to branch %s of %s\n", short(res.Commit), res.Branch, gitws.Redact(url))
	}
	return nil
}

func short(commit string) string { return commit[:min(len(commit), 12)] }
