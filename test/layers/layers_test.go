// Package layers checks looprun's layering (docs/decisions.md, "Layers"):
// every package imports only packages of its own layer or the layers below.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/looprun/looprun/"

// The layers, lowest first. A package is in the layer of the longest
// prefix below that names it (a prefix names the package and those under
// it). Leaves are pure helpers any package may use; within the engine the
// template language comes before the evaluators, the evaluators before the
// action types, and those before the executor that plans with them.
var layers = []struct {
	name     string
	prefixes []string
}{
	{"leaf", []string{"api/v1alpha1", "internal/pycompat", "internal/baseurl", "internal/safefile", "internal/gitws",
		"internal/agentstream", "internal/pricing", "internal/approval", "internal/version"}},
	{"interpolate", []string{"internal/executor/interpolate"}},
	{"evaluate", []string{"internal/executor/evaluate"}},
	{"action", []string{"internal/action"}},
	{"executor", []string{"internal/executor"}},
	{"runner/eventlog", []string{"internal/runner", "internal/eventlog", "internal/history", "internal/llm",
		"internal/tracing", "internal/loopfile", "internal/cloudevents", "internal/gateway"}},
	{"controllers/localrun", []string{"controllers", "internal/localrun", "internal/transfer", "internal/ui"}},
	{"cmd", []string{"cmd", "bench", "test", "hack"}},
}

// layerOf is the index of pkg's layer in layers, -1 when none names it.
func layerOf(pkg string) int {
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return -1
	}
	best, bestLen := -1, 0
	for i, l := range layers {
		for _, p := range l.prefixes {
			if (rel == p || strings.HasPrefix(rel, p+"/")) && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := fields[0]
		from := layerOf(pkg)
		if from < 0 {
			t.Errorf("%s is in no layer: add it to layers", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if to := layerOf(imp); to > from {
				t.Errorf("%s (%s) imports %s (%s), a layer above it", pkg, layers[from].name, imp, layers[to].name)
			}
		}
	}
	if seen < 30 {
		t.Fatalf("only %d packages listed:\n%s", seen, out)
	}
}

// The layers mean what they say.
func TestLayerOf(t *testing.T) {
	for pkg, want := range map[string]string{
		module + "internal/executor":            "executor",
		module + "internal/executor/evaluate":   "evaluate",
		module + "internal/runner/pod":          "runner/eventlog",
		module + "internal/eventlog/configmaps": "runner/eventlog",
		module + "internal/pycompat":            "leaf",
		module + "cmd/entrypoint":               "cmd",
		module + "controllers":                  "controllers/localrun",
		module + "internal/executorlike":        "",
		"k8s.io/client-go/kubernetes":           "",
	} {
		got := ""
		if i := layerOf(pkg); i >= 0 {
			got = layers[i].name
		}
		if got != want {
			t.Errorf("layerOf(%s) = %q, want %q", pkg, got, want)
		}
	}
}
