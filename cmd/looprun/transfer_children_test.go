package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
)

const parentLoop = `name: parent
initial: run
states:
  run:
    loop: slow
    on_yes: done
    on_no: failed
  done:
    terminal: true
  failed:
    terminal: true
`

const slowLoop = `name: slow
initial: wait
states:
  wait:
    action: sleep 2
    next: done
  done:
    terminal: true
`

// An export carries the children of its sub-loops: imported elsewhere, or
// under another name, the child in flight is there under the name its
// parent looks for, and the parent finishes with that one child.
func TestExportCarriesChildren(t *testing.T) {
	f := startCluster(t)
	src, dst := f.namespace(t), f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "parent.yaml", parentLoop)
	write(t, dir, ".loops/slow.yaml", slowLoop)

	f.ok(t, dir, src, "apply", "-f", "parent.yaml")
	waiting := f.waitFor(t, src, "parent", "its child runs", func(l *v1alpha1.Loop) bool { return l.Status.Action != nil && l.Status.Action.Child != "" })
	doc := filepath.Join(dir, "parent.json")
	f.ok(t, dir, src, "export", "parent", "-o", doc)
	var exported struct {
		Run struct {
			Children  []json.RawMessage `json:"children"`
			Templates []json.RawMessage `json:"templates"`
		} `json:"run"`
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exported); err != nil || len(exported.Run.Children) != 1 || len(exported.Run.Templates) != 1 {
		t.Fatalf("export: %d children, %d templates (%v)", len(exported.Run.Children), len(exported.Run.Templates), err)
	}

	for _, name := range []string{"parent", "moved"} {
		f.ok(t, dir, dst, "import", doc, "--name", name)
		done := f.waitFor(t, dst, name, "it finished", finished)
		if done.Status.Phase != v1alpha1.PhaseCompleted || done.Status.CurrentState != "done" {
			t.Fatalf("%s ended %s in %s: %s", name, done.Status.Phase, done.Status.CurrentState, done.Status.Message)
		}
		var children v1alpha1.LoopList
		if err := f.c.List(t.Context(), &children, client.InNamespace(dst), client.MatchingLabels{v1alpha1.LabelParent: name}); err != nil {
			t.Fatal(err)
		}
		want := executor.ChildName(name, waiting.Status.RunID, waiting.Status.Action.State, waiting.Status.Action.Iteration)
		if len(children.Items) != 1 || children.Items[0].Name != want {
			t.Fatalf("%s has children %v, want the one imported as %s", name, children.Items, want)
		}
		if c := children.Items[0]; c.Annotations[v1alpha1.ImportingAnnotation] != "" || !c.Status.Phase.IsFinished() {
			t.Errorf("child %s: %v %s", c.Name, c.Annotations, c.Status.Phase)
		}
	}

	// Locally: a finished run's child runs travel with it.
	if r := looprun(t, dir, "run", "parent.yaml", "-q"); r.code != 0 {
		t.Fatalf("local run: exit %d %s", r.code, r.stderr)
	}
	local := filepath.Join(dir, "local.json")
	if r := looprun(t, dir, "export", "--local", "parent", "-o", local); r.code != 0 {
		t.Fatalf("export --local: %s", r.stderr)
	}
	other := t.TempDir()
	if r := looprun(t, dir, "--loops-dir", filepath.Join(other, ".loops"), "import", "--local", local, "--name", "copy"); r.code != 0 {
		t.Fatalf("import --local: %s", r.stderr)
	}
	runs, _, err := localrun.ListStates(filepath.Join(other, ".loops"))
	if err != nil || len(runs) != 2 {
		t.Fatalf("imported runs: %d (%v)", len(runs), err)
	}
}
