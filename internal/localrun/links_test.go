package localrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/safefile"
)

// victim is a file outside the loops directory that a planted link points
// to; unchanged reports whether it still holds its bytes.
func victim(t *testing.T) (path string, unchanged func() bool) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(path, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == "precious\n"
	}
}

// runAsTheCLIDoes locks the store, opens the output logs and starts (or,
// with run set, resumes) the run, as looprun run and resume do.
func runAsTheCLIDoes(ctx context.Context, d *Driver, dir string, run *v1alpha1.RunState) error {
	unlock, err := d.Store.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	out, errl, err := d.Store.OpenOutputs(run == nil)
	if err != nil {
		return err
	}
	defer out.Close()
	defer errl.Close()
	d.Runner = &local.Runner{Dir: dir, Stdout: out, Stderr: errl}
	if run == nil {
		_, err = d.Start(ctx, "r1")
		return err
	}
	return d.Resume(ctx, run)
}

// linkStates is a run that takes a checkpoint, saves several times and
// waits for an approval (so resume has something to continue).
func linkStates() *v1alpha1.LoopSpec {
	return spec(map[string]v1alpha1.State{
		"check": {Action: "echo out; echo err >&2", Capture: "c", Next: "more"},
		"more":  {Action: "true", Next: "last"},
		"last":  {Action: "echo started; test -f go-on || sleep 30", Next: "done"},
		"done":  {Terminal: true},
	})
}

// A link planted in place of any file a run writes in .loops/.running,
// pointing outside, is never written through: the run refuses it with an
// error naming it, or replaces it with a file of its own.
func TestRunNeverWritesThroughALink(t *testing.T) {
	files := map[string]func(s *Store) string{
		"stdout log":  (*Store).StdoutPath,
		"stderr log":  (*Store).StderrPath,
		"action note": (*Store).ActionPath,
		"lock":        (*Store).lockPath,
		"state file":  (*Store).StatePath,
		"events":      (*Store).EventsPath,
		"checkpoints": (*Store).CheckpointsPath,
		"state slot":  func(s *Store) string { return safefile.Slots(s.StatePath())[1] },
	}
	for _, resume := range []bool{false, true} {
		for what, path := range files {
			name := "run/" + what
			if resume {
				name = "resume/" + what
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				target, unchanged := victim(t)
				d := newDriver(t, dir, linkStates())
				var saved *v1alpha1.RunState
				if resume {
					saved = interruptedRun(t, d, dir)
					if err := os.Remove(path(d.Store)); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				p := path(d.Store)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
				err := runAsTheCLIDoes(t.Context(), newDriverLike(t, d, dir), dir, saved)
				if !unchanged() {
					t.Fatalf("the file outside was written through %s (run error: %v)", p, err)
				}
				if err != nil {
					if !safefile.IsLink(err) || !strings.Contains(err.Error(), p) {
						t.Errorf("error %q does not name the link %s", err, p)
					}
					return
				}
				if st, lerr := os.Lstat(p); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
					t.Errorf("the run succeeded and left the link %s in place", p)
				}
			})
		}
	}
}

// interruptedRun runs linkStates until it waits in "last", interrupted
// there, and returns its saved state.
func interruptedRun(t *testing.T, d *Driver, dir string) *v1alpha1.RunState {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	d.Runner = &interruptAt{ActionRunner: &local.Runner{Dir: dir}, state: "last", cancel: cancel}
	run, err := d.Start(ctx, "r1")
	if err != nil || run.Phase != v1alpha1.PhaseInterrupted {
		t.Fatalf("interrupting: phase %s, %v", run.Phase, err)
	}
	if good, _, _ := d.Store.Checkpoints(); len(good) == 0 {
		t.Fatal("no checkpoint to resume with")
	}
	return run
}

// newDriverLike is a fresh driver of d's loop and store (a new process).
func newDriverLike(t *testing.T, d *Driver, dir string) *Driver {
	t.Helper()
	m, err := executor.New("demo", d.Machine.Spec(), executor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &Driver{Machine: m, Runner: &local.Runner{Dir: dir}, Store: d.Store, LoopFile: d.LoopFile}
}

// .running or the loops directory as a link to elsewhere is refused,
// naming it, and nothing is made in the link's target.
func TestRunRefusesALinkedDirectory(t *testing.T) {
	for _, linked := range []string{".loops", ".loops/.running"} {
		t.Run(linked, func(t *testing.T) {
			dir, elsewhere := t.TempDir(), t.TempDir()
			l := filepath.Join(dir, linked)
			if err := os.MkdirAll(filepath.Dir(l), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, l); err != nil {
				t.Fatal(err)
			}
			d := newDriver(t, dir, linkStates())
			err := runAsTheCLIDoes(t.Context(), d, dir, nil)
			if !safefile.IsLink(err) || !strings.Contains(err.Error(), l+" is a symbolic link") {
				t.Errorf("error %v, want one naming %s", err, l)
			}
			if _, err := d.Start(t.Context(), "r2"); !safefile.IsLink(err) {
				t.Errorf("Start through the link: %v", err)
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("wrote %v into the link's target", ents)
			}
		})
	}
}

// An import replaces a link at the loop file's name; the file it pointed
// to keeps its bytes.
func TestImportReplacesALink(t *testing.T) {
	dir := t.TempDir()
	target, unchanged := victim(t)
	d := newDriver(t, dir, linkStates())
	d.Runner = &local.Runner{Dir: dir}
	run := &v1alpha1.RunState{}
	d.Machine.Start(run, "r1", time.Now())
	if err := os.MkdirAll(filepath.Dir(d.Store.LoopPath()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, d.Store.LoopPath()); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.Import([]byte("kind: Loop\n"), run, nil, []history.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(d.Store.LoopPath()); err != nil || string(b) != "kind: Loop\n" || !unchanged() {
		t.Errorf("loop file %q (%v); outside file unchanged: %v", b, err, unchanged())
	}
}
