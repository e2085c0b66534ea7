package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlGetLoopsColumns reads the Loop table as kubectl prints it from
// the API server: a REASON column says how a Loop ended, and -o wide adds
// the message, the run, the action's Pod and when the run last changed.
func TestKubectlGetLoopsColumns(t *testing.T) {
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl is built with the envtest binaries (hack/setup-envtest.sh): %v", err)
	}
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "broken.yaml", `name: broken
initial: check
states:
  check:
    action: exit 1
    on_success: done
    on_failure: failed
  done:
    terminal: true
  failed:
    terminal: true
    failure: true
`)
	f.ok(t, dir, ns, "apply", "-f", "broken.yaml")
	f.waitFor(t, ns, "broken", "it failed", finished)

	get := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", f.kubeconfig, "-n", ns, "get", "loops"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get loops %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	fields := func(line string) []string { return strings.Fields(line) }

	table := get()
	if want := []string{"NAME", "STATE", "ITERATION", "PHASE", "VERDICT", "REASON", "AGE"}; strings.Join(fields(table[0]), " ") != strings.Join(want, " ") {
		t.Fatalf("kubectl get loops header: %q, want %q", table[0], want)
	}
	if row := fields(table[1]); len(row) < 6 || row[0] != "broken" || row[3] != "Failed" || row[5] != "FailureState" {
		t.Errorf("kubectl get loops row of a Loop that ended in a failure state: %q", table[1])
	}

	wide := get("-o", "wide")
	for _, col := range []string{"REASON", "MESSAGE", "RUN", "POD", "UPDATED"} {
		if !strings.Contains(wide[0], col) {
			t.Errorf("kubectl get loops -o wide has no %s column: %q", col, wide[0])
		}
	}
	if !strings.Contains(wide[1], "failed") {
		t.Errorf("kubectl get loops -o wide: the message names no failure state: %q", wide[1])
	}
}
