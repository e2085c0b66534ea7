package localrun

import (
	"os/exec"
	"strings"
	"testing"
)

// The local side (a laptop's looprun run, the in-pod wrapper) links no
// cluster client: not directly (depguard in .golangci.yml says so) and not
// through anything it imports.
func TestLinksNoClusterClient(t *testing.T) {
	for _, pkg := range []string{".", "../loopfile", "../history", "../eventlog", "../runner/process", "../runner/entrypoint"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(dep, "k8s.io/client-go") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}
