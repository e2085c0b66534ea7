package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// quickLoop ends at once; the get tests list it.
const quickLoop = "name: NAME\ninitial: start\nstates:\n  start:\n    action: echo hi\n    next: done\n  done:\n    terminal: true\n"

// applyLabelled applies a Loop NAME with the labels given (k: v lines) in
// namespace ns and waits until it finished.
func (f *clusterFixture) applyLabelled(t *testing.T, dir, ns, name, labels string) {
	t.Helper()
	write(t, dir, name+".little.yaml", strings.ReplaceAll(quickLoop, "NAME", name))
	manifest := f.ok(t, dir, ns, "convert", name+".little.yaml")
	if labels != "" {
		manifest = strings.Replace(manifest, "metadata:\n", "metadata:\n  labels:\n    "+labels+"\n", 1)
	}
	write(t, dir, name+".yaml", manifest)
	f.ok(t, dir, ns, "apply", "-f", name+".yaml")
	f.waitFor(t, ns, name, "it finished", finished)
}

// rowsOf are the lines of a table whose first cell (or second, with -A)
// is one of names, as "cell cell ..." with single spaces.
func rowsOf(out string, col int, names ...string) []string {
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) > col && (f[col] == "NAME" || slices.Contains(names, f[col])) {
			rows = append(rows, strings.Join(f, " "))
		}
	}
	return rows
}

// TestGetListsAsKubectl: get's -A, -l, -o name, -o wide and -o jsonpath,
// and what it refuses.
func TestGetListsAsKubectl(t *testing.T) {
	f := startCluster(t)
	ns, other := f.namespace(t), f.namespace(t)
	dir := t.TempDir()
	f.applyLabelled(t, dir, ns, "blue-one", "team: blue")
	f.applyLabelled(t, dir, ns, "red-one", "team: red")
	f.applyLabelled(t, dir, other, "blue-two", "team: blue")

	// -A: a NAMESPACE column, the Loops of both namespaces.
	out := f.ok(t, dir, ns, "get", "-A")
	rows := rowsOf(out, 1, "blue-one", "red-one", "blue-two")
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "NAMESPACE NAME STATE ITERATION PHASE VERDICT REASON AGE") {
		t.Fatalf("get -A:\n%s", out)
	}
	for _, want := range []string{ns + " blue-one done", ns + " red-one done", other + " blue-two done"} {
		if !strings.Contains(strings.Join(rows, "\n"), want+" ") {
			t.Errorf("get -A has no row %q:\n%s", want, out)
		}
	}

	// -l: only the Loops the selector matches; with -A, in every namespace.
	if got := f.ok(t, dir, ns, "get", "-l", "team=blue", "-o", "name"); got != "loop.looprun.io/blue-one\n" {
		t.Errorf("get -l team=blue -o name: %q", got)
	}
	if got := rowsOf(f.ok(t, dir, ns, "get", "-A", "-l", "team=blue"), 1, "blue-one", "red-one", "blue-two"); len(got) != 3 {
		t.Errorf("get -A -l team=blue: %q", got)
	}
	if got := f.ok(t, dir, ns, "get", "-l", "team notin (blue)", "-o", "name"); got != "loop.looprun.io/red-one\n" {
		t.Errorf("get -l 'team notin (blue)' -o name: %q", got)
	}

	// -o name of all, in name order.
	if got := f.ok(t, dir, ns, "get", "-o", "name"); got != "loop.looprun.io/blue-one\nloop.looprun.io/red-one\n" {
		t.Errorf("get -o name: %q", got)
	}

	// -o wide: the priority-1 columns of kubectl get loops -o wide.
	wide := rowsOf(f.ok(t, dir, ns, "get", "blue-one", "-o", "wide"), 0, "blue-one")
	if len(wide) != 2 || !strings.HasSuffix(wide[0], "AGE MESSAGE RUN POD UPDATED") || !strings.Contains(wide[1], "completed in state done after") {
		t.Errorf("get -o wide: %q", wide)
	}
	loop := f.loop(t, ns, "blue-one")
	if !strings.Contains(wide[1], loop.Status.RunID) {
		t.Errorf("get -o wide shows no run %s: %q", loop.Status.RunID, wide[1])
	}

	// -o jsonpath over the List of all, and over the one Loop named.
	if got := f.ok(t, dir, ns, "get", "-o", "jsonpath={.items[*].metadata.name}"); got != "blue-one red-one" {
		t.Errorf("get -o jsonpath={.items[*].metadata.name}: %q", got)
	}
	if got := f.ok(t, dir, ns, "get", "loop/red-one", "-o", `jsonpath={.status.phase} {.metadata.labels.team}`); got != "Completed red" {
		t.Errorf("get loop/red-one -o jsonpath: %q", got)
	}

	// What kubectl refuses, looprun refuses.
	for _, args := range [][]string{
		{"get", "blue-one", "-A"},
		{"get", "blue-one", "-l", "team=blue"},
		{"get", "-o", "table"},
		{"get", "-o", "jsonpath={.items[*"},
		{"get", "-l", "team in (blue"},
	} {
		if r := f.run(t, dir, ns, args...); r.code != 1 || r.stdout != "" || r.stderr == "" {
			t.Errorf("looprun %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
}

// TestGetWatch: get -w prints the table, then a line each time a Loop
// changes, and ends on Ctrl-C with exit 0.
func TestGetWatch(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	f.applyLabelled(t, dir, ns, "first", "")

	watch := exec.Command(binary, "--kubeconfig", f.kubeconfig, "-n", ns, "get", "-w")
	out := &fixture.SyncBuffer{}
	watch.Stdout, watch.Stderr = out, os.Stderr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Process.Kill() }()
	waitUntil(t, "the table of first", func() bool { return strings.Contains(out.String(), "first ") })
	if lines := strings.Split(out.String(), "\n"); !strings.HasPrefix(lines[0], "NAME ") || !strings.HasPrefix(lines[1], "first ") {
		t.Fatalf("get -w began with:\n%s", out.String())
	}

	// A change to the Loop is a line; a new Loop is lines, with no header.
	loop := f.loop(t, ns, "first")
	patch := client.MergeFrom(loop.DeepCopy())
	loop.Labels = map[string]string{"seen": "yes"}
	if err := f.c.Patch(t.Context(), loop, patch); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a line for the change", func() bool { return strings.Count(out.String(), "first ") >= 2 })
	f.applyLabelled(t, dir, ns, "second", "")
	waitUntil(t, "a line for second, completed", func() bool {
		for _, l := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[0] == "second" && f[3] == string(v1alpha1.PhaseCompleted) {
				return true
			}
		}
		return false
	})
	if n := strings.Count(out.String(), "NAME "); n != 1 {
		t.Errorf("get -w printed its header %d times:\n%s", n, out.String())
	}

	if err := watch.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := watch.Wait(); err != nil {
		t.Errorf("get -w after Ctrl-C: %v\n%s", err, out.String())
	}
}
