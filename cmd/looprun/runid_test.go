package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/localrun"
)

// A loop whose name is not a name is refused before anything is made: no
// run_dir lands outside .loops (it once did, before the refusal), and
// the refusal is a whole line.
func TestRunRefusesABadNameBeforeMakingAnything(t *testing.T) {
	for _, name := range []string{"../../escape", "../x", "a/../../../b", ".hidden", "sp ace"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			work := filepath.Join(root, "a", "work")
			write(t, work, "evil.yaml", fmt.Sprintf("name: %q\ninitial: s\nstates:\n  s:\n    action: touch ran\n    terminal: true\n", name))
			r := looprun(t, work, "run", "evil.yaml")
			if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("loop name %q", name)) || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("exit %d, stderr %q: want the name refused, on a line of its own", r.code, r.stderr)
			}
			if got := entries(t, work); !slices.Equal(got, []string{"evil.yaml"}) {
				t.Errorf("the work directory holds %v", got)
			}
			if got := entries(t, root); !slices.Equal(got, []string{"a"}) {
				t.Errorf("made %v beside the work directory", got)
			}
			if got := entries(t, filepath.Join(root, "a")); !slices.Equal(got, []string{"work"}) {
				t.Errorf("made %v beside the work directory", got)
			}
		})
	}
}

// Runs that start in the same second get different ids, each its own
// run_dir, made exclusively.
func TestReserveRunIDIsExclusive(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.Local)
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id, _, err := reserveRunID(dir, "fixer", now)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	slices.Sort(ids)
	want := []string{"fixer-20261125T100000"}
	for i := 2; i <= n; i++ {
		want = append(want, fmt.Sprintf("fixer-20261125T100000-%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	if got := entries(t, filepath.Join(dir, "runs")); !slices.Equal(got, want) {
		t.Errorf("run dirs %v, want %v", got, want)
	}
	// A run refused before it starts gives its directory back.
	id, release, err := reserveRunID(dir, "other", now)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := os.Stat(filepath.Join(dir, "runs", id)); !os.IsNotExist(err) {
		t.Errorf("released run dir still there: %v", err)
	}
	// runs/ as a link to elsewhere is refused.
	linked, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(linked, "runs")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reserveRunID(linked, "fixer", now); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("reserved through a link: %v", err)
	}
}

// Two runs of a loop in the same second do not share a run id: the second
// runs its sub-loop's child again (it once took the first run's finished
// child) in a run_dir of its own.
func TestRunsInTheSameSecondAreDistinct(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ".loops/kid.yaml", "name: kid\ninitial: a\nstates:\n  a:\n    action: echo kid >> trace; echo x > ${context.run_dir}kid-was-here\n    next: done\n  done:\n    terminal: true\n")
	write(t, dir, "mom.yaml", "name: mom\ninitial: a\nstates:\n  a:\n    loop: kid\n    context_passthrough: true\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n")
	var ids []string
	// Until two runs start in the same second (a run takes far less than
	// a second; two straddle a second's end at most once).
	for try := 0; try < 3 && !sameSecond(ids); try++ {
		if r := looprun(t, dir, "run", "-q", "mom.yaml"); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		sf, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/mom.state.json"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sf.RunID)
	}
	if !sameSecond(ids) {
		t.Fatalf("no two runs in one second: %v", ids)
	}
	a, b := ids[len(ids)-2], ids[len(ids)-1]
	if a == b || b != a+"-2" && !strings.HasPrefix(b, a[:len("mom-20060102T150405")]+"-") {
		t.Errorf("run ids %q then %q: want the second to differ", a, b)
	}
	if got := strings.Count(readFile(dir, "trace"), "kid\n"); got != len(ids) {
		t.Errorf("the child ran %d times in %d runs", got, len(ids))
	}
	for _, id := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(dir, ".loops/runs", id, "kid-was-here")); err != nil {
			t.Errorf("run %s has no run_dir of its own: %v", id, err)
		}
	}
}

// sameSecond reports whether the last two run ids carry the same second.
func sameSecond(ids []string) bool {
	if len(ids) < 2 {
		return false
	}
	sec := func(id string) string { return id[:min(len(id), len("mom-20060102T150405"))] }
	return sec(ids[len(ids)-2]) == sec(ids[len(ids)-1])
}
