package main

import (
	"strings"
	"testing"
)

// TestBareNameSaysWhereItLooked: a bare NAME is a local run for history,
// resume, approve and reject, and a Loop in the cluster for describe and
// the other cluster commands. When NAME is not where the command looked,
// the error says where that was and points at the other place's NAME.
func TestBareNameSaysWhereItLooked(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "count.yaml", countLoop)
	write(t, dir, "here.yaml", "name: here\ninitial: done\nstates:\n  done:\n    terminal: true\n")
	f.ok(t, dir, ns, "apply", "-f", "count.yaml")
	f.waitFor(t, ns, "count", "it finished", finished)
	f.ok(t, dir, ns, "run", "here.yaml")

	// A Loop only in the cluster, named bare to a local command.
	for _, args := range [][]string{{"history", "count"}, {"resume", "count"}, {"approve", "count"}, {"reject", "count"}} {
		r := f.run(t, dir, ns, args...)
		if r.code != 1 || !strings.Contains(r.stderr, `no local run "count" in .loops`) ||
			!strings.Contains(r.stderr, "the cluster has a Loop count in namespace "+ns+": name it loop/count") {
			t.Errorf("looprun %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	// Named nowhere: where a bare name is looked for, and how to name a Loop.
	if r := f.run(t, dir, ns, "history", "nowhere"); r.code != 1 ||
		!strings.Contains(r.stderr, `no local run "nowhere" in .loops (a bare NAME is a run on this machine; loop/nowhere is a Loop in the cluster)`) {
		t.Errorf("history of a name used nowhere: exit %d\n%s", r.code, r.stderr)
	}
	// A local run only, named bare to a cluster command.
	for _, args := range [][]string{{"describe", "here"}, {"logs", "here"}, {"checkpoints", "here"}} {
		r := f.run(t, dir, ns, args...)
		if r.code != 1 || !strings.Contains(r.stderr, `loop "here" not found in namespace `+ns) ||
			!strings.Contains(r.stderr, `.loops has a local run "here" (looprun status here, looprun history here)`) {
			t.Errorf("looprun %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	// With no cluster at all, the same pointer to the local run.
	if r := looprun(t, dir, "--kubeconfig", dir+"/none", "describe", "here"); r.code == 0 ||
		!strings.Contains(r.stderr, `.loops has a local run "here"`) {
		t.Errorf("describe without a cluster: exit %d\n%s", r.code, r.stderr)
	}
}

// --local names the local run, as kubectl loop too (where a bare NAME is
// otherwise a Loop); loop/NAME is a Loop whatever the flag.
func TestLocalFlagNamesTheLocalRun(t *testing.T) {
	for _, tc := range []struct {
		plugin, local bool
		arg           string
		name          string
		cluster       bool
	}{
		{false, false, "fix", "fix", true},
		{false, true, "fix", "fix", false},
		{true, false, "fix", "fix", true},
		{true, true, "fix", "fix", false},
		{true, true, "loop/fix", "fix", true},
		{false, true, "loop/fix", "fix", true},
	} {
		k := &kube{plugin: tc.plugin}
		if name, cluster := k.localOrLoop(tc.arg, tc.local); name != tc.name || cluster != tc.cluster {
			t.Errorf("plugin %v, --local %v, %s: %s cluster %v, want %s cluster %v", tc.plugin, tc.local, tc.arg, name, cluster, tc.name, tc.cluster)
		}
	}
}
