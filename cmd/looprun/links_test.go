package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// entries lists a directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Links planted in .loops/.running (or as .running) pointing outside are
// refused by looprun run, naming them; the files outside keep their bytes.
func TestRunRefusesPlantedLinks(t *testing.T) {
	for _, planted := range []string{".running/fixer.stdout.log", ".running/fixer.stderr.log", ".running/fixer.action", ".running/fixer.lock", ".running", "runs"} {
		t.Run(planted, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			write(t, dir, "fix.yaml", fixLoop)
			target := write(t, outside, "victim", "precious\n")
			if !strings.Contains(planted, "/") {
				target = outside
			}
			link := filepath.Join(".loops", planted) // as the run names it, from its directory
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
			r := looprun(t, dir, "run", "fix.yaml")
			if r.code != 1 || !strings.Contains(r.stderr, link+" is a symbolic link") {
				t.Errorf("exit %d, stderr %q: want the link refused by name", r.code, r.stderr)
			}
			if got := entries(t, outside); !slices.Equal(got, []string{"victim"}) {
				t.Errorf("the directory outside holds %v", got)
			}
			if b := readFile(outside, "victim"); b != "precious\n" {
				t.Errorf("the file outside holds %q", b)
			}
			if _, err := os.Stat(filepath.Join(dir, "fixed")); err == nil {
				t.Error("the run ran an action")
			}
		})
	}
}
