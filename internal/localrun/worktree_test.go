package localrun

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.email=loop@example.com", "-c", "user.name=loop", "commit", "-q", "--allow-empty", "-m", "init"}, {"branch", "feature"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return dir
}

// A worktree is made once (a resumed run finds it), removed with its
// branch kept; a branch name is never taken for an option.
func TestWorktree(t *testing.T) {
	repo := gitRepo(t)
	t.Chdir(repo)
	path, err := worktreePath("parent-work-1234abcd", "feat/ure x")
	if err != nil || filepath.Base(path) != "parent-work-1234abcd-subloop-feat-ure-x" || filepath.Dir(path) != filepath.Join(repo, WorktreeBase) {
		t.Fatalf("path %s %v", path, err)
	}
	path = filepath.Join(repo, WorktreeBase, "w")
	for range 2 {
		if err := attachWorktree(context.Background(), path, "feature"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(path, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := detachWorktree(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the worktree is still there: %v", err)
	}
	out, _ := exec.Command("git", "branch", "--list", "feature").Output()
	if !strings.Contains(string(out), "feature") {
		t.Error("the branch went with its worktree")
	}
	err = attachWorktree(context.Background(), filepath.Join(repo, WorktreeBase, "x"), "--upload-pack=touch pwned")
	if err == nil || !strings.Contains(err.Error(), "invalid reference") {
		t.Errorf("an option as a branch: %v", err)
	}
}
