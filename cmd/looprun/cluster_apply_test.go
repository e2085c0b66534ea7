package main

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A loop laid out as little-loops' bundled loops (loop: oracles/gate)
// applies and runs in a cluster: its sub-loops are the templates
// oracles-gate and oracles-leaf. --dry-run=server stores nothing; --set
// reaches the Loop's context.
func TestClusterApplyOraclesDryRunAndSet(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := bundleDir(t)
	out := f.ok(t, dir, ns, "apply", "-f", "bundle/outer.yaml", "--dry-run=server")
	for _, want := range []string{"looptemplate/oracles-gate created (server dry run)\n", "looptemplate/oracles-leaf created (server dry run)\n", "loop/outer created (server dry run)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("server dry run printed %q; want %q", out, want)
		}
	}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "outer"}, &v1alpha1.Loop{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a dry run, loop/outer: %v", err)
	}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "oracles-gate"}, &v1alpha1.LoopTemplate{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a dry run, looptemplate/oracles-gate: %v", err)
	}

	out = f.ok(t, dir, ns, "apply", "-f", "bundle/outer.yaml", "--set", "who=me")
	if !strings.Contains(out, "looptemplate/oracles-gate created\n") || !strings.Contains(out, "loop/outer created\n") {
		t.Errorf("apply printed %q", out)
	}
	loop := f.waitFor(t, ns, "outer", "it ends", finished)
	if loop.Status.Phase != v1alpha1.PhaseCompleted || string(loop.Spec.Context["who"].Raw) != `"me"` || loop.Spec.States["run"].Loop != "oracles-gate" {
		t.Errorf("loop/outer: phase %s (%s), context %v, loop: %q", loop.Status.Phase, loop.Status.Message, loop.Spec.Context, loop.Spec.States["run"].Loop)
	}

	// A dry run of a change says what would change and changes nothing.
	out = f.ok(t, dir, ns, "apply", "-f", "bundle/outer.yaml", "--set", "who=you", "--dry-run=server")
	if !strings.Contains(out, "looptemplate/oracles-gate unchanged (server dry run)\n") || !strings.Contains(out, "loop/outer configured (server dry run)\n") {
		t.Errorf("server dry run of a change printed %q", out)
	}
	if loop := f.loop(t, ns, "outer"); string(loop.Spec.Context["who"].Raw) != `"me"` {
		t.Errorf("a dry run changed the context: %v", loop.Spec.Context)
	}
}
