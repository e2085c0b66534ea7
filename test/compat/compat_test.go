package compat

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every loop of the corpus runs with looprun as it ran with ll-loop (the
// outcomes hack/compat recorded in NAME.golden.json).
func TestCorpusAgreesWithLittleLoops(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "looprun")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/looprun").CombinedOutput(); err != nil {
		t.Fatalf("build looprun: %v\n%s", err, out)
	}
	names, err := Names(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 40 {
		t.Errorf("the corpus has %d loops; it should have at least 40", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := ReadGolden(".", name)
			if os.IsNotExist(err) {
				t.Fatalf("no %s.golden.json: run hack/compat -update with little-loops at hand", name)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := RunLooprun(bin, ".", name)
			if err != nil {
				t.Fatal(err)
			}
			if d := Diff(want, got); len(d) > 0 {
				t.Errorf("looprun differs from ll-loop:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}
