// Package gitws is a Loop's git workspace: the clone before a run's first
// step and the commit and push after its end (spec.runner.workspace.git).
// It is plain Go (go-git), so the Pods that run it need no git binary in
// their image: the in-Pod wrapper runs it as `entrypoint git`, with the
// operation as JSON in $LOOPRUN_GIT, and prints what it did as one JSON line
// on stdout; everything else (progress, the remote's messages) goes to
// stderr, so that nothing a server says can pass for the result.
package gitws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// Env carries the operation to `entrypoint git`.
const Env = "LOOPRUN_GIT"

// The operations.
const (
	OpClone = "clone"
	OpPush  = "push"
)

// Excluded is what a commit of the run's work never takes: the run
// directories the engine keeps beside the actions' files.
const Excluded = ".loops/"

// Op is one clone or push.
type Op struct {
	// Op is OpClone or OpPush.
	Op string `json:"op"`
	// URL is the repository (https, http, ssh or a local path).
	URL string `json:"url"`
	// Revision is what a clone checks out: a branch, a tag, a full ref or
	// a commit; empty, the remote's default branch.
	Revision string `json:"revision,omitempty"`
	// Depth limits a clone's history to this many commits (0: all).
	Depth int `json:"depth,omitempty"`
	// Dir is the checkout.
	Dir string `json:"dir"`
	// AuthDir holds the credentials, one file per key of the Secret
	// (username and password, token, ssh-privatekey or identity with
	// known_hosts); empty for none.
	AuthDir string `json:"authDir,omitempty"`

	// Branch is where a push goes (refs/heads/Branch).
	Branch string `json:"branch,omitempty"`
	// Base is the commit the clone checked out: a push with nothing new
	// since pushes nothing.
	Base string `json:"base,omitempty"`
	// Message and the author make the commit of what was left uncommitted.
	Message     string `json:"message,omitempty"`
	AuthorName  string `json:"authorName,omitempty"`
	AuthorEmail string `json:"authorEmail,omitempty"`
}

// Result is what an operation did.
type Result struct {
	// Commit is the commit checked out (clone) or pushed (push), or the
	// checkout's HEAD when a push had nothing to push.
	Commit string `json:"commit"`
	// Branch is the branch pushed.
	Branch string `json:"branch,omitempty"`
	// Pushed is false when a push found nothing new since the clone.
	Pushed bool `json:"pushed,omitempty"`
	// Committed is true when the push committed what was left uncommitted.
	Committed bool `json:"committed,omitempty"`
}

// Run runs op, writing progress to log.
func Run(ctx context.Context, op Op, log io.Writer) (Result, error) {
	switch op.Op {
	case OpClone:
		return Clone(ctx, op, log)
	case OpPush:
		return Push(ctx, op, log)
	}
	return Result{}, fmt.Errorf("unknown git operation %q", op.Op)
}

// EnvMain is `entrypoint git`: Main with the operation in $LOOPRUN_GIT.
func EnvMain(ctx context.Context, stdout, stderr io.Writer) int {
	var op Op
	if err := json.Unmarshal([]byte(os.Getenv(Env)), &op); err != nil {
		fmt.Fprintf(stderr, "git: $%s: %v\n", Env, err)
		return 2
	}
	return Main(ctx, op, stdout, stderr)
}

// Main runs op: its result as JSON on stdout, its progress and error on
// stderr. It returns the exit code.
func Main(ctx context.Context, op Op, stdout, stderr io.Writer) int {
	res, err := Run(ctx, op, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "git %s: %v\n", op.Op, err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// ParseResult reads what Main printed: its last line of output.
func ParseResult(stdout string) (Result, error) {
	s := strings.TrimSpace(stdout)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	var res Result
	if err := json.Unmarshal([]byte(s), &res); err != nil || res.Commit == "" {
		return Result{}, fmt.Errorf("no result in the output %q", s)
	}
	return res, nil
}

var commitRE = regexp.MustCompile(`^[0-9a-fA-F]{7,40}$`)

// Clone makes a fresh checkout of op.Revision at op.Dir: what a directory
// held before (an earlier run's checkout on a kept volume) goes.
func Clone(ctx context.Context, op Op, log io.Writer) (Result, error) {
	auth, err := Auth(op.AuthDir, op.URL)
	if err != nil {
		return Result{}, err
	}
	byCommit := commitRE.MatchString(op.Revision)
	var refs []plumbing.ReferenceName
	switch {
	case op.Revision == "" || byCommit:
		refs = []plumbing.ReferenceName{""}
	case strings.HasPrefix(op.Revision, "refs/"):
		refs = []plumbing.ReferenceName{plumbing.ReferenceName(op.Revision)}
	default:
		refs = []plumbing.ReferenceName{plumbing.NewBranchReferenceName(op.Revision), plumbing.NewTagReferenceName(op.Revision)}
	}
	var repo *git.Repository
	for _, ref := range refs {
		if err := os.RemoveAll(op.Dir); err != nil {
			return Result{}, fmt.Errorf("empty %s: %w", op.Dir, err)
		}
		opts := &git.CloneOptions{URL: op.URL, Auth: auth, ReferenceName: ref, SingleBranch: ref != "", Progress: log}
		if !byCommit {
			opts.Depth = op.Depth // a commit may be anywhere in the history
		}
		repo, err = git.PlainCloneContext(ctx, op.Dir, false, opts)
		if !errors.Is(err, plumbing.ErrReferenceNotFound) && !isNoMatchingRef(err) {
			break
		}
	}
	if err != nil {
		return Result{}, fmt.Errorf("clone %s: %s", Redact(op.URL), redactIn(err.Error(), op.URL))
	}
	if byCommit {
		if err := checkout(repo, op.Revision); err != nil {
			return Result{}, err
		}
	}
	head, err := repo.Head()
	if err != nil {
		return Result{}, fmt.Errorf("the checkout has no HEAD: %w", err)
	}
	if err := exclude(op.Dir); err != nil {
		return Result{}, err
	}
	return Result{Commit: head.Hash().String()}, nil
}

// isNoMatchingRef reports whether a clone failed because the remote has no
// such ref (go-git says so in words).
func isNoMatchingRef(err error) bool {
	return err != nil && strings.Contains(err.Error(), "couldn't find remote ref")
}

// checkout checks out a commit given by (a prefix of) its hash.
func checkout(repo *git.Repository, rev string) error {
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return fmt.Errorf("revision %s: %w", rev, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: *h, Force: true}); err != nil {
		return fmt.Errorf("check out %s: %w", rev, err)
	}
	return nil
}

// exclude keeps the run directories out of git's sight in the checkout,
// for the actions' own git commands as for the push.
func exclude(dir string) error {
	path := filepath.Join(dir, ".git", "info", "exclude")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# the run directories of looprun\n/%s\n", Excluded)
	return errors.Join(err, f.Close())
}

// Push commits what the actions left uncommitted in op.Dir and pushes the
// checkout's HEAD to op.Branch of op.URL (never where the checkout's
// config points). A push is never forced: a branch that moved
// elsewhere on the remote fails the push. Nothing new since op.Base pushes
// nothing.
func Push(ctx context.Context, op Op, log io.Writer) (Result, error) {
	if err := CheckBranch(op.Branch); err != nil {
		return Result{}, err
	}
	auth, err := Auth(op.AuthDir, op.URL)
	if err != nil {
		return Result{}, err
	}
	repo, err := git.PlainOpen(op.Dir)
	if err != nil {
		return Result{}, fmt.Errorf("open the checkout %s: %w", op.Dir, err)
	}
	committed, err := commitAll(repo, op)
	if err != nil {
		return Result{}, err
	}
	head, err := repo.Head()
	if err != nil {
		return Result{}, fmt.Errorf("the checkout has no HEAD: %w", err)
	}
	res := Result{Commit: head.Hash().String(), Branch: op.Branch, Committed: committed}
	if !committed && res.Commit == op.Base {
		return res, nil
	}
	ref := plumbing.NewBranchReferenceName(op.Branch)
	if err := repo.Storer.SetReference(plumbing.NewHashReference(ref, head.Hash())); err != nil {
		return Result{}, fmt.Errorf("branch %s: %w", op.Branch, err)
	}
	spec := config.RefSpec(ref.String() + ":" + ref.String()) // no '+': never forced
	// The push goes to op.URL by URL, through a remote made here: the
	// checkout's own config (its origin, a pushurl, url.insteadOf), which
	// the actions can rewrite, never chooses where the work and the
	// credentials go.
	remote := git.NewRemote(repo.Storer, &config.RemoteConfig{Name: "looprun", URLs: []string{op.URL}})
	err = remote.PushContext(ctx, &git.PushOptions{RemoteName: "looprun", RemoteURL: op.URL, RefSpecs: []config.RefSpec{spec}, Auth: auth, Progress: log})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return Result{}, fmt.Errorf("push %s to %s: %s", op.Branch, Redact(op.URL), redactIn(err.Error(), op.URL))
	}
	res.Pushed = true
	return res, nil
}

// CheckBranch refuses a name git would not take as a branch (git
// check-ref-format --branch): empty, HEAD, one that starts with '-' or
// holds '..', '@{', a space, a control character or ~^:?*[\.
func CheckBranch(name string) error {
	switch {
	case name == "":
		return errors.New("no branch to push to")
	case name == "HEAD" || strings.HasPrefix(name, "-"):
		return fmt.Errorf("%q is not a branch name git accepts", name)
	}
	if plumbing.NewBranchReferenceName(name).Validate() != nil {
		return fmt.Errorf("%q is not a branch name git accepts", name)
	}
	return nil
}

// commitAll commits every change of the worktree (new, changed and
// deleted files, but not the run directories), if there is any.
func commitAll(repo *git.Repository, op Op) (bool, error) {
	wt, err := repo.Worktree()
	if err != nil {
		return false, err
	}
	wt.Excludes = append(wt.Excludes, gitignore.ParsePattern("/"+Excluded, nil))
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return false, fmt.Errorf("add the changes: %w", err)
	}
	st, err := wt.Status()
	if err != nil {
		return false, fmt.Errorf("status: %w", err)
	}
	if st.IsClean() {
		return false, nil
	}
	who := &object.Signature{Name: op.AuthorName, Email: op.AuthorEmail, When: time.Now()}
	if who.Name == "" {
		who.Name = "looprun"
	}
	if who.Email == "" {
		who.Email = "looprun@localhost"
	}
	msg := op.Message
	if msg == "" {
		msg = "looprun: the run's changes"
	}
	if _, err := wt.Commit(msg, &git.CommitOptions{Author: who, Committer: who}); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}

// Redact is url without the password (or token) it may carry: what is
// said of a repository in messages, Events and logs.
func Redact(url string) string {
	u, err := neturl.Parse(url)
	if err != nil || u.User == nil {
		return url
	}
	if _, has := u.User.Password(); !has {
		return url
	}
	u.User = neturl.UserPassword(u.User.Username(), "xxxxx")
	return u.String()
}

// redactIn replaces url in msg with its redacted form.
func redactIn(msg, url string) string {
	if r := Redact(url); r != url {
		return strings.ReplaceAll(msg, url, r)
	}
	return msg
}

// Auth reads the credentials in dir (a Secret's keys as files): an SSH
// key (ssh-privatekey or identity, with known_hosts, which is required:
// an unknown host key is never trusted), a password (with username) or a
// token. An empty dir means none.
func Auth(dir, url string) (transport.AuthMethod, error) {
	if dir == "" {
		return nil, nil
	}
	read := func(name string) ([]byte, bool) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return b, err == nil && len(b) > 0
	}
	text := func(name string) string {
		b, _ := read(name)
		return strings.TrimRight(string(b), "\r\n")
	}
	user := text("username")
	key, ok := read("ssh-privatekey")
	if !ok {
		key, ok = read("identity")
	}
	if ok {
		if _, found := read("known_hosts"); !found {
			return nil, errors.New("the Secret has an SSH key but no known_hosts: the server's host key must be known")
		}
		if ep, err := transport.NewEndpoint(url); err == nil && ep.User != "" {
			user = ep.User
		}
		if user == "" {
			user = "git"
		}
		pk, err := gitssh.NewPublicKeys(user, key, text("passphrase"))
		if err != nil {
			return nil, fmt.Errorf("the Secret's SSH key: %w", err)
		}
		cb, err := gitssh.NewKnownHostsCallback(filepath.Join(dir, "known_hosts"))
		if err != nil {
			return nil, fmt.Errorf("the Secret's known_hosts: %w", err)
		}
		pk.HostKeyCallback = cb
		return pk, nil
	}
	secret := text("password")
	if secret == "" {
		secret = text("token")
	}
	if secret == "" {
		return nil, errors.New("the Secret has none of the keys password, token, ssh-privatekey or identity")
	}
	if user == "" {
		user = "git"
	}
	return &githttp.BasicAuth{Username: user, Password: secret}, nil
}
