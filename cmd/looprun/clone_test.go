package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := fixture.Git(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A run with --clone works in a checkout of its own and, as the loop's
// workspace.git.push says, pushes its work to a branch of the repository.
func TestCloneAndPushLocally(t *testing.T) {
	dir, src := t.TempDir(), t.TempDir()
	gitCmd(t, src, "init", "-q", "-b", "main")
	write(t, src, "a.txt", "broken\n")
	gitCmd(t, src, "add", ".")
	gitCmd(t, src, "commit", "-q", "-m", "first")
	bare := filepath.Join(t.TempDir(), "project.git")
	gitCmd(t, src, "clone", "-q", "--bare", src, bare)
	write(t, dir, "fix.yaml", `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: fix}
spec:
  initial: fix
  runner:
    workspace:
      claimName: ws
      git:
        url: `+bare+`
        push: {branch: 'looprun/${loop.name}-${run.id}', commitMessage: 'fix a.txt'}
  onExit: {action: 'echo "pushed=${loop.git.pushed} branch=${loop.git.branch} commit=${loop.git.commit}" > `+dir+`/hook.out'}
  states:
    fix: {action: 'test "$PWD" = "${context.repo_dir}" && echo fixed > a.txt', onSuccess: done, onFailure: failed}
    done: {terminal: true}
    failed: {terminal: true, failure: true}
`)
	r := looprun(t, dir, "run", "--clone", "fix.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the run worked in the current directory: %v", err)
	}
	if !strings.Contains(r.stderr, "Cloned "+bare) || !strings.Contains(r.stderr, "Pushed ") {
		t.Fatalf("stderr:\n%s", r.stderr)
	}
	branches := gitCmd(t, bare, "branch", "--list", "looprun/*", "--format=%(refname:short)")
	if !strings.HasPrefix(branches, "looprun/fix-") || strings.Contains(branches, "\n") {
		t.Fatalf("branches: %q", branches)
	}
	if got := gitCmd(t, bare, "show", branches+":a.txt"); got != "fixed" {
		t.Fatalf("a.txt on %s: %q", branches, got)
	}
	if got := gitCmd(t, bare, "log", "-1", "--format=%s", branches); got != "fix a.txt" {
		t.Fatalf("commit message %q", got)
	}
	if got := gitCmd(t, bare, "show", "main:a.txt"); got != "broken" {
		t.Fatalf("main changed: %q", got)
	}
	// The exit hook runs after the push, as in a cluster, and reads it.
	head := gitCmd(t, bare, "rev-parse", branches)
	hook, err := os.ReadFile(filepath.Join(dir, "hook.out"))
	if want := "pushed=True branch=" + branches + " commit=" + head + "\n"; err != nil || string(hook) != want {
		t.Fatalf("the exit hook wrote %q (%v), want %q", hook, err, want)
	}
}

// A little-loops file run with --clone works in a clone of the repository
// the current directory is in, and leaves the working copy alone.
func TestCloneTheCurrentRepository(t *testing.T) {
	dir := t.TempDir()
	gitCmd(t, dir, "init", "-q", "-b", "main")
	write(t, dir, "a.txt", "committed\n")
	write(t, dir, "edit.yaml", `name: edit
initial: edit
states:
  edit:
    action: 'cat a.txt > seen.txt && echo changed > a.txt && pwd > where.txt'
    next: done
  done: {terminal: true}
`)
	gitCmd(t, dir, "add", ".")
	gitCmd(t, dir, "commit", "-q", "-m", "first")
	write(t, dir, "a.txt", "uncommitted\n")
	r := looprun(t, dir, "run", "--clone", "edit.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "uncommitted\n" {
		t.Fatalf("the working copy changed: %q", b)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, ".loops", "runs", "*", "repo", "where.txt"))
	if len(matches) != 1 {
		t.Fatalf("no checkout under run_dir: %v\n%s", matches, r.stderr)
	}
	checkout := filepath.Dir(matches[0])
	if b, _ := os.ReadFile(filepath.Join(checkout, "seen.txt")); string(b) != "committed\n" {
		t.Fatalf("the clone is not of HEAD: %q", b)
	}
	if b, _ := os.ReadFile(matches[0]); strings.TrimSpace(string(b)) != checkout {
		t.Fatalf("the action ran in %q, not %s", b, checkout)
	}
}

func TestDescribeGitOp(t *testing.T) {
	for _, tc := range []struct {
		op   v1alpha1.GitOpStatus
		want string
	}{
		{v1alpha1.GitOpStatus{Phase: v1alpha1.ExitHookSucceeded, Commit: "7e419991172e6b7b260ee", Pod: "fix-r-clone"}, "Succeeded: 7e419991172e, Pod fix-r-clone"},
		{v1alpha1.GitOpStatus{Phase: v1alpha1.ExitHookSucceeded, Commit: "9a0c1d2f3e4b5a", Branch: "looprun/fix-r", Pushed: true}, "Succeeded: 9a0c1d2f3e4b to looprun/fix-r"},
		{v1alpha1.GitOpStatus{Phase: v1alpha1.ExitHookSucceeded, Commit: "7e419991172e6b", Branch: "looprun/fix-r"}, "Succeeded: nothing to push (7e419991172e)"},
		{v1alpha1.GitOpStatus{Phase: v1alpha1.ExitHookFailed, Pod: "p", Message: "progress\ngit clone: authentication required\n"}, "Failed, Pod p: git clone: authentication required"},
	} {
		if got := describeGitOp(&tc.op); got != tc.want {
			t.Errorf("describeGitOp(%+v) = %q, want %q", tc.op, got, tc.want)
		}
	}
}

// A run with --clone of a URL with a password: the password is never
// printed nor kept in the state file, and the push goes to that URL even
// when an action points the checkout's origin elsewhere.
func TestClonePushGoesToTheLoopsURLAndKeepsThePasswordHidden(t *testing.T) {
	srv, err := fixture.StartGitServer("loop", "s3cret-pw")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.NewRepo("project", map[string]string{"a.txt": "broken\n"}); err != nil {
		t.Fatal(err)
	}
	evil, err := fixture.StartGitServer("x", "y")
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	if _, err := evil.NewRepo("stolen", map[string]string{"x": "x"}); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(srv.URL, "http://", "http://loop:s3cret-pw@", 1) + "/project.git"
	dir := t.TempDir()
	write(t, dir, "fix.yaml", `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: fix}
spec:
  initial: fix
  runner:
    workspace:
      claimName: ws
      git:
        url: `+url+`
        push: {branch: 'looprun/fixed'}
  states:
    fix: {action: 'echo fixed > a.txt && git remote set-url origin `+evil.URL+`/stolen.git', onSuccess: done, onFailure: failed}
    done: {terminal: true}
    failed: {terminal: true, failure: true}
`)
	r := looprun(t, dir, "run", "--clone", "fix.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "s3cret-pw") {
		t.Fatalf("the password was printed:\n%s%s", r.stdout, r.stderr)
	}
	state, err := os.ReadFile(filepath.Join(dir, ".loops", ".running", "fix.state.json"))
	if err != nil || strings.Contains(string(state), "s3cret-pw") {
		t.Fatalf("the state file keeps the password (%v):\n%s", err, state)
	}
	if n := evil.Requests(); n != 0 {
		t.Fatalf("the push went where the checkout's origin pointed: %d requests", n)
	}
	if got := gitCmd(t, filepath.Join(srv.Root, "project.git"), "show", "looprun/fixed:a.txt"); got != "fixed" {
		t.Fatalf("a.txt on the pushed branch: %q", got)
	}
}
