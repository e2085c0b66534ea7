package gitws

import (
	"context"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// server serves the bare repositories under root over git's smart HTTP
// (git http-backend), asking for user:password.
func server(t *testing.T, root, user, password string) string {
	t.Helper()
	backend := &cgi.Handler{
		Path: gitExecPath(t) + "/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=" + user},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func gitExecPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("the tests need git (the server side): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// git runs the git command in dir and returns its output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// repo makes ROOT/project.git with two commits on main (a tag v1 on the
// first) and a branch dev, and returns ROOT.
func repo(t *testing.T) string {
	t.Helper()
	root, work := t.TempDir(), t.TempDir()
	gitIn(t, work, "init", "-q", "-b", "main")
	must(t, os.WriteFile(filepath.Join(work, "a.txt"), []byte("one\n"), 0o644))
	gitIn(t, work, "add", ".")
	gitIn(t, work, "commit", "-q", "-m", "first")
	gitIn(t, work, "tag", "v1")
	must(t, os.WriteFile(filepath.Join(work, "a.txt"), []byte("two\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(work, "gone.txt"), []byte("x\n"), 0o644))
	gitIn(t, work, "add", ".")
	gitIn(t, work, "commit", "-q", "-m", "second")
	gitIn(t, work, "branch", "dev", "HEAD~1")
	gitIn(t, root, "clone", "-q", "--bare", work, "project.git")
	gitIn(t, filepath.Join(root, "project.git"), "config", "http.receivepack", "true")
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func authDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range files {
		must(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600))
	}
	return dir
}

func TestCloneEditPush(t *testing.T) {
	root := repo(t)
	url := server(t, root, "loop", "s3cret") + "/project.git"
	auth := authDir(t, map[string]string{"username": "loop\n", "password": "s3cret\n"})
	dir := filepath.Join(t.TempDir(), "repo")
	must(t, os.MkdirAll(filepath.Join(dir, "stale"), 0o755)) // an earlier run's checkout goes

	ctx := context.Background()
	var log strings.Builder
	cloned, err := Clone(ctx, Op{Op: OpClone, URL: url, Depth: 1, Dir: dir, AuthDir: auth}, &log)
	if err != nil {
		t.Fatalf("clone: %v\n%s", err, log.String())
	}
	bare := filepath.Join(root, "project.git")
	if want := gitIn(t, bare, "rev-parse", "main"); cloned.Commit != want {
		t.Fatalf("cloned %s, main is %s", cloned.Commit, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "stale")); !os.IsNotExist(err) {
		t.Fatalf("the old content stayed: %v", err)
	}

	// The actions change, add and delete files and keep a run directory.
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("fixed\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new\n"), 0o644))
	must(t, os.Remove(filepath.Join(dir, "gone.txt")))
	must(t, os.MkdirAll(filepath.Join(dir, ".loops", "runs", "r1"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, ".loops", "runs", "r1", "usage.jsonl"), []byte("{}\n"), 0o644))
	if st := gitIn(t, dir, "status", "--porcelain"); strings.Contains(st, ".loops") {
		t.Fatalf("git status shows the run directory:\n%s", st)
	}

	pushed, err := Push(ctx, Op{Op: OpPush, URL: url, Dir: dir, AuthDir: auth, Branch: "looprun/fix-1", Base: cloned.Commit,
		Message: "fix a", AuthorName: "Loop Bot", AuthorEmail: "bot@example.com"}, &log)
	if err != nil {
		t.Fatalf("push: %v\n%s", err, log.String())
	}
	if !pushed.Pushed || !pushed.Committed || pushed.Commit == cloned.Commit {
		t.Fatalf("push result %+v", pushed)
	}
	if got := gitIn(t, bare, "rev-parse", "looprun/fix-1"); got != pushed.Commit {
		t.Fatalf("the server's branch is at %s, pushed %s", got, pushed.Commit)
	}
	if got := gitIn(t, bare, "show", "looprun/fix-1:a.txt"); got != "fixed" {
		t.Fatalf("a.txt on the branch: %q", got)
	}
	files := gitIn(t, bare, "ls-tree", "-r", "--name-only", "looprun/fix-1")
	if files != "a.txt\nnew.txt" {
		t.Fatalf("files on the branch:\n%s", files)
	}
	if got := gitIn(t, bare, "log", "-1", "--format=%an <%ae> %s", "looprun/fix-1"); got != "Loop Bot <bot@example.com> fix a" {
		t.Fatalf("commit: %s", got)
	}
	if got := gitIn(t, bare, "rev-parse", "looprun/fix-1~1"); got != cloned.Commit {
		t.Fatalf("the commit's parent is %s, want the cloned %s", got, cloned.Commit)
	}

	// Nothing new: nothing pushed.
	again, err := Push(ctx, Op{Op: OpPush, URL: url, Dir: dir, AuthDir: auth, Branch: "looprun/other", Base: pushed.Commit}, &log)
	if err != nil || again.Pushed || again.Commit != pushed.Commit {
		t.Fatalf("push with nothing new: %+v, %v", again, err)
	}
}

func TestPushNeverForces(t *testing.T) {
	root := repo(t)
	url := server(t, root, "loop", "pw") + "/project.git"
	auth := authDir(t, map[string]string{"username": "loop", "password": "pw"})
	dir := filepath.Join(t.TempDir(), "repo")
	ctx := context.Background()
	cloned, err := Clone(ctx, Op{URL: url, Revision: "dev", Dir: dir, AuthDir: auth}, io.Discard)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("mine\n"), 0o644))
	// main moved on from dev: a commit on dev does not fast-forward it.
	bare := filepath.Join(root, "project.git")
	main := gitIn(t, bare, "rev-parse", "main")
	_, err = Push(ctx, Op{URL: url, Dir: dir, AuthDir: auth, Branch: "main", Base: cloned.Commit}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "non-fast-forward") {
		t.Fatalf("push over a moved branch: %v", err)
	}
	if got := gitIn(t, bare, "rev-parse", "main"); got != main {
		t.Fatalf("main was overwritten: %s", got)
	}
}

func TestCloneRevisions(t *testing.T) {
	root := repo(t)
	url := server(t, root, "u", "p") + "/project.git"
	auth := authDir(t, map[string]string{"token": "p", "username": "u"})
	bare := filepath.Join(root, "project.git")
	first := gitIn(t, bare, "rev-parse", "v1^{commit}")
	for _, rev := range []string{"dev", "v1", "refs/tags/v1", first, first[:10]} {
		t.Run(rev, func(t *testing.T) {
			res, err := Clone(context.Background(), Op{URL: url, Revision: rev, Depth: 1, Dir: filepath.Join(t.TempDir(), "r"), AuthDir: auth}, io.Discard)
			if err != nil || res.Commit != first {
				t.Fatalf("clone %s: %+v, %v (want %s)", rev, res, err, first)
			}
		})
	}
	_, err := Clone(context.Background(), Op{URL: url, Revision: "nope", Dir: filepath.Join(t.TempDir(), "r"), AuthDir: auth}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("clone of a missing branch: %v", err)
	}
}

func TestWrongCredentials(t *testing.T) {
	root := repo(t)
	url := server(t, root, "loop", "right") + "/project.git"
	for name, files := range map[string]map[string]string{
		"wrong password": {"username": "loop", "password": "wrong"},
		"none":           nil,
	} {
		t.Run(name, func(t *testing.T) {
			auth := ""
			if files != nil {
				auth = authDir(t, files)
			}
			_, err := Clone(context.Background(), Op{URL: url, Dir: filepath.Join(t.TempDir(), "r"), AuthDir: auth}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "authentication") {
				t.Fatalf("clone: %v", err)
			}
		})
	}
}

func TestAuthRefusesWhatItCannotCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"ssh key without known_hosts": {map[string]string{"ssh-privatekey": "KEY"}, "no known_hosts"},
		"no usable key":               {map[string]string{"username": "u"}, "none of the keys"},
		"a key that is not one":       {map[string]string{"identity": "KEY", "known_hosts": "h ssh-ed25519 AAAA\n"}, "SSH key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Auth(authDir(t, tc.files), "ssh://git@example.com/x.git")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Auth: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseResult(t *testing.T) {
	res, err := ParseResult("noise\n{\"commit\":\"abc1234\",\"branch\":\"b\",\"pushed\":true}\n")
	if err != nil || res.Commit != "abc1234" || !res.Pushed || res.Branch != "b" {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := ParseResult("{\"commit\":\"\"}"); err == nil {
		t.Fatal("a result without a commit was taken")
	}
}

// A URL's password never reaches a message.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://bot:t0ken@git.example.com/r.git": "https://bot:xxxxx@git.example.com/r.git",
		"https://git.example.com/r.git":           "https://git.example.com/r.git",
		"ssh://git@git.example.com/r.git":         "ssh://git@git.example.com/r.git",
		"git@git.example.com:r.git":               "git@git.example.com:r.git",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%s) = %s, want %s", in, got, want)
		}
	}
	root := repo(t)
	url := server(t, root, "loop", "right")
	bad := strings.Replace(url, "http://", "http://loop:wrong@", 1) + "/project.git"
	_, err := Clone(context.Background(), Op{URL: bad, Dir: filepath.Join(t.TempDir(), "r")}, io.Discard)
	if err == nil || strings.Contains(err.Error(), "wrong") || !strings.Contains(err.Error(), "xxxxx") {
		t.Fatalf("clone error: %v", err)
	}
}

// An action (an agent) may rewrite the checkout's config: the origin's
// URL, a url.insteadOf, or drop the remote. The run's work and the
// Secret's credentials still go to the configured URL and nowhere else.
func TestPushGoesToTheConfiguredURLOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir, evil string)
	}{
		{"origin rewritten", func(t *testing.T, dir, evil string) {
			gitIn(t, dir, "remote", "set-url", "origin", evil)
		}},
		{"push URL of origin", func(t *testing.T, dir, evil string) {
			gitIn(t, dir, "remote", "set-url", "--push", "origin", evil)
		}},
		{"insteadOf", func(t *testing.T, dir, evil string) {
			gitIn(t, dir, "config", "url."+evil+".insteadOf", "http://")
		}},
		{"origin removed", func(t *testing.T, dir, evil string) {
			gitIn(t, dir, "remote", "remove", "origin")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := repo(t)
			url := server(t, root, "loop", "s3cret") + "/project.git"
			auth := authDir(t, map[string]string{"username": "loop", "password": "s3cret"})
			// The place an agent would rather send the work and the
			// credentials to: a server that records every request.
			var stolen []string
			evilSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u, p, _ := r.BasicAuth()
				stolen = append(stolen, r.URL.Path+" "+u+":"+p)
				http.Error(w, "no", http.StatusForbidden)
			}))
			t.Cleanup(evilSrv.Close)
			evil := evilSrv.URL + "/stolen.git"
			dir := filepath.Join(t.TempDir(), "repo")
			ctx := context.Background()
			cloned, err := Clone(ctx, Op{URL: url, Dir: dir, AuthDir: auth}, io.Discard)
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("work\n"), 0o644))
			tc.tamper(t, dir, evil)

			pushed, err := Push(ctx, Op{URL: url, Dir: dir, AuthDir: auth, Branch: "looprun/w", Base: cloned.Commit}, io.Discard)
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			if len(stolen) > 0 {
				t.Fatalf("the push reached the URL the checkout named: %q", stolen)
			}
			if got := gitIn(t, filepath.Join(root, "project.git"), "rev-parse", "looprun/w"); got != pushed.Commit {
				t.Fatalf("the configured repository's branch is at %s, pushed %s", got, pushed.Commit)
			}
		})
	}
}

func TestCheckBranch(t *testing.T) {
	for _, ok := range []string{"main", "looprun/fix-1", "feature/a.b", "x-HEAD"} {
		if err := CheckBranch(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "HEAD", "-delete", "--force", "a..b", "a b", "a~1", "x:y", "x@{1}", "a/", "/a", "a.lock", ".hidden", "a\\b", "a*", "a\x7f"} {
		if err := CheckBranch(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	// Push refuses it before it opens anything.
	if _, err := Push(context.Background(), Op{URL: "/nowhere", Dir: "/nowhere", Branch: "HEAD"}, io.Discard); err == nil || !strings.Contains(err.Error(), "not a branch name") {
		t.Fatalf("push to HEAD: %v", err)
	}
}
