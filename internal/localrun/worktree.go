package localrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// WorktreeBase is where the worktrees of sub-loops are made, in the
// directory looprun runs in (little-loops' default worktree base).
const WorktreeBase = ".worktrees"

// The events of a sub-loop's worktree, as little-loops writes them.
const (
	EventWorktreeAttached = "sub_loop_worktree_attached"
	EventWorktreeDetached = "sub_loop_worktree_detached"
	EventWorktreeError    = "sub_loop_worktree_error"
)

var unsafeBranchChars = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// worktreePath is where the child's worktree of branch goes: named by the
// child, so that a resumed run finds the one it made.
func worktreePath(child, branch string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, WorktreeBase, child+"-subloop-"+unsafeBranchChars.ReplaceAllString(branch, "-")), nil
}

// attachWorktree checks out branch (which must exist) in a worktree at
// path, unless a run killed before made it already.
func attachWorktree(ctx context.Context, path, branch string) error {
	if _, err := os.Stat(filepath.Join(path, ".git")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "git", "worktree", "add", "--", path, branch).CombinedOutput()
	if err != nil {
		return fmt.Errorf("git worktree add %s %s: %w: %s", path, branch, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// detachWorktree removes the worktree at path; its branch stays.
func detachWorktree(path string) error {
	out, err := exec.Command("git", "worktree", "remove", "--force", "--", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("git worktree remove %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inWorktree prepares the child of sub to run in its worktree: it is made
// (a sub_loop_worktree_attached event) and the child's actions run there.
// The returned detach removes it once the child ended; for a child that
// ended already (before a kill), only a worktree left behind is removed.
// A worktree that cannot be made is a failure result (a
// sub_loop_worktree_error event).
func (d *Driver) inWorktree(ctx context.Context, w recorder, run *v1alpha1.RunState, sub *executor.SubLoop, child *Driver, finished bool) (detach func() error, failure *executor.ActionResult, err error) {
	path, err := worktreePath(sub.Child, sub.Worktree)
	if err != nil {
		return nil, nil, err
	}
	detach = func() error {
		if err := detachWorktree(path); err != nil {
			return err
		}
		return d.record(w, run, EventWorktreeDetached, executor.WorktreeEvent{Branch: sub.Worktree, Path: path}.Data())
	}
	if finished {
		if _, err := os.Stat(path); err != nil {
			return nil, nil, nil
		}
		return detach, nil, nil
	}
	if err := attachWorktree(ctx, path, sub.Worktree); err != nil {
		if err := d.record(w, run, EventWorktreeError, executor.WorktreeEvent{Branch: sub.Worktree, Error: err.Error()}.Data()); err != nil {
			return nil, nil, err
		}
		return nil, &executor.ActionResult{Failure: &executor.ActionFailure{Reason: "WorktreeFailed", Message: err.Error()}}, nil
	}
	if d.SubLoops.InDir == nil {
		return nil, nil, fmt.Errorf("sub-loop %s: this runner cannot run actions in a worktree", sub.Loop)
	}
	child.Runner = d.SubLoops.InDir(child.Runner, path)
	if err := d.record(w, run, EventWorktreeAttached, executor.WorktreeEvent{Branch: sub.Worktree, Path: path}.Data()); err != nil {
		return nil, nil, err
	}
	return detach, nil, nil
}

// record writes one event of the run's own.
func (d *Driver) record(w recorder, run *v1alpha1.RunState, typ string, data map[string]any) error {
	evs := d.Machine.Record(run, d.now(), typ, data)
	d.notify(run, evs)
	return w.save(run, evs, nil)
}
