package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/test/fixture"
	"github.com/looprun/looprun/test/proc"
)

// countLoop counts in a captured result, so all of a run's progress is in
// its run state: start, then inc until the count is 5 (iteration 6).
const countLoop = `name: count
initial: start
states:
  start:
    action: echo 0
    capture: total
    next: inc
  inc:
    action: echo $(( ${captured.total.output} + 1 ))
    capture: total
    evaluate:
      type: output_numeric
      operator: ge
      target: 5
    on_yes: done
    on_no: inc
  done:
    terminal: true
`

func completedAt6(t *testing.T, l *v1alpha1.Loop) {
	t.Helper()
	if l.Status.Phase != v1alpha1.PhaseCompleted || l.Status.Iteration != 6 || l.Status.Captured["total"].Output != "5" {
		t.Fatalf("loop %s: phase %s, iteration %d, total=%q; want Completed at iteration 6 with total=5",
			l.Name, l.Status.Phase, l.Status.Iteration, l.Status.Captured["total"].Output)
	}
}

// TestClusterCommands drives one Loop through the cluster commands and
// compares each command's output with its golden file.
func TestClusterCommands(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "count.yaml", countLoop)

	golden(t, "apply", ns, f.ok(t, dir, ns, "apply", "-f", "count.yaml"))
	golden(t, "apply-again", ns, f.ok(t, dir, ns, "apply", "-f", "count.yaml"))
	loop := f.waitFor(t, ns, "count", "it finished", finished)
	completedAt6(t, loop)

	golden(t, "get", ns, f.ok(t, dir, ns, "get"))
	golden(t, "get-one", ns, f.ok(t, dir, ns, "get", "loop/count"))
	golden(t, "describe", ns, f.ok(t, dir, ns, "describe", "count"))
	golden(t, "history-routes", ns, f.ok(t, dir, ns, "history", "loop/count", "--type", "route"))
	golden(t, "history-state", ns, f.ok(t, dir, ns, "history", "loop/count", "--state", "start", "--type", "state_enter,action_complete"))
	golden(t, "checkpoints", ns, f.ok(t, dir, ns, "checkpoints", "count"))
	golden(t, "logs", ns, f.ok(t, dir, ns, "logs", "count"))

	// fork from iteration 3: the fork reaches the same end; the source stays.
	golden(t, "fork", ns, f.ok(t, dir, ns, "fork", "count", "count-fork", "--iteration", "3"))
	fork := f.waitFor(t, ns, "count-fork", "it finished", finished)
	completedAt6(t, fork)
	if src := f.loop(t, ns, "count"); src.Status.LastSeq != loop.Status.LastSeq {
		t.Errorf("the fork changed its source: lastSeq %d -> %d", loop.Status.LastSeq, src.Status.LastSeq)
	}

	// rewind to iteration 2: the loop runs on from there to the same end.
	golden(t, "rewind", ns, f.ok(t, dir, ns, "rewind", "count", "--iteration", "2"))
	rewound := f.waitFor(t, ns, "count", "it finished again", func(l *v1alpha1.Loop) bool {
		return finished(l) && l.Status.LastSeq > loop.Status.LastSeq
	})
	completedAt6(t, rewound)
	if !strings.HasSuffix(rewound.Status.RunID, "-w1") {
		t.Errorf("run id after a rewind: %q", rewound.Status.RunID)
	}
	golden(t, "history-rewind", ns, f.ok(t, dir, ns, "history", "loop/count", "--type", "loop_rewind"))

	// A wrong checkpoint is refused before anything is asked of the operator.
	r := f.run(t, dir, ns, "rewind", "count", "--iteration", "40")
	golden(t, "rewind-missing", ns, fmt.Sprintf("exit %d\n%s", r.code, r.stderr))
	r = f.run(t, dir, ns, "describe", "nothing")
	golden(t, "describe-missing", ns, fmt.Sprintf("exit %d\n%s", r.code, r.stderr))
}

// TestClusterSuspendResumeStopWatch covers suspend, resume, watch and stop.
func TestClusterSuspendResumeStopWatch(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "little.yaml", countLoop)
	manifest := f.ok(t, dir, ns, "convert", "little.yaml")
	write(t, dir, "count.yaml", strings.Replace(manifest, "spec:\n", "spec:\n  suspend: true\n", 1))
	f.ok(t, dir, ns, "apply", "-f", "count.yaml")
	f.waitFor(t, ns, "count", "it is suspended", func(l *v1alpha1.Loop) bool { return l.Status.Phase == v1alpha1.PhaseSuspended })

	watch := exec.Command(binary, "--kubeconfig", f.kubeconfig, "-n", ns, "watch", "count")
	out := &fixture.SyncBuffer{}
	watch.Stdout = out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	// Once it printed the Loop as it read it, the watch goes on from that
	// version: nothing after it is missed.
	waitUntil(t, "watch printed the suspended Loop", func() bool { return out.String() != "" })
	golden(t, "resume", ns, f.ok(t, dir, ns, "resume", "loop/count"))
	if err := watch.Wait(); err != nil {
		t.Fatalf("watch: %v\n%s", err, out.String())
	}
	// What the conditions said between events depends on when the watch
	// looked; the events are the run's.
	var stream []string
	for _, l := range strings.SplitAfter(out.String(), "\n") {
		if !strings.HasPrefix(l, "       · ") {
			stream = append(stream, l)
		}
	}
	golden(t, "watch", ns, durations.ReplaceAllString(strings.Join(stream, ""), "T"))

	write(t, dir, "slow.yaml", "name: slow\ninitial: wait\nstates:\n  wait:\n    action: sleep 60\n    next: done\n  done:\n    terminal: true\n")
	f.ok(t, dir, ns, "apply", "-f", "slow.yaml")
	f.waitFor(t, ns, "slow", "its action runs", func(l *v1alpha1.Loop) bool { return l.Status.Action != nil && l.Status.Action.Pod != "" })
	golden(t, "suspend", ns, f.ok(t, dir, ns, "suspend", "slow"))
	golden(t, "stop", ns, f.ok(t, dir, ns, "stop", "slow"))
	start := time.Now()
	stopped := f.waitFor(t, ns, "slow", "it stopped", finished)
	if stopped.Status.Phase != v1alpha1.PhaseInterrupted || stopped.Status.TerminatedBy != v1alpha1.TerminatedStopped {
		t.Errorf("after stop: phase %s, terminatedBy %s", stopped.Status.Phase, stopped.Status.TerminatedBy)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("stop took %s", time.Since(start))
	}
	r := f.run(t, dir, ns, "watch", "slow")
	if r.code != 1 || !strings.Contains(r.stdout, "ended: stopped") {
		t.Errorf("watch of a stopped loop: exit %d, %q", r.code, r.stdout)
	}
	// Resuming an ended Loop says it cannot, and how to go on.
	r = f.run(t, dir, ns, "resume", "loop/slow")
	if r.code == 0 || !strings.Contains(r.stderr, "has ended (phase Interrupted") || !strings.Contains(r.stderr, "looprun rewind slow") {
		t.Errorf("resume of a stopped loop: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestClusterExportImport moves a run between namespaces, and between this
// machine and the cluster, both ways; each continues where it was.
func TestClusterExportImport(t *testing.T) {
	f := startCluster(t)
	src, dst := f.namespace(t), f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "count.yaml", countLoop)

	// Cluster to cluster: a stopped run, exported and imported elsewhere, completes there.
	f.ok(t, dir, src, "apply", "-f", "count.yaml")
	f.waitFor(t, src, "count", "iteration 3", func(l *v1alpha1.Loop) bool { return l.Status.Iteration >= 3 })
	f.ok(t, dir, src, "stop", "count")
	stopped := f.waitFor(t, src, "count", "it stopped", finished)
	doc := filepath.Join(dir, "count.json")
	f.ok(t, dir, src, "export", "loop/count", "-o", doc)
	out := f.ok(t, dir, dst, "import", doc)
	if want := fmt.Sprintf("loop/count imported into namespace %s at iteration %d", dst, stopped.Status.Iteration); !strings.HasPrefix(out, want) {
		t.Errorf("import said %q, want %q...", out, want)
	}
	moved := f.waitFor(t, dst, "count", "it finished", finished)
	if stopped.Status.Phase == v1alpha1.PhaseInterrupted {
		completedAt6(t, moved)
	}
	// watch shows the step the stop cut off run again once, however
	// many times the log says it was restarted.
	if w := f.run(t, dir, dst, "watch", "count"); strings.Count(w.stdout, "(again: it was cut off)") != 1 {
		t.Errorf("watch of the moved run:\n%s", w.stdout)
	}
	evs, err := configmaps.Read(t.Context(), f.c, moved)
	if err != nil {
		t.Fatal(err)
	}
	restarted := 0
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("imported event log: event %d has seq %d", i, e.Seq)
		}
		if e.Type == executor.EventActionRestarted {
			restarted++
		}
	}
	if restarted > 1 {
		t.Errorf("the cut-off action is said restarted %d times", restarted)
	}
	if moved.Status.Checkpoints == nil || stopped.Status.Checkpoints == nil || moved.Status.Checkpoints.Count() < stopped.Status.Checkpoints.Count() {
		t.Errorf("checkpoints: %+v imported, %+v exported", moved.Status.Checkpoints, stopped.Status.Checkpoints)
	}

	// A changed byte is caught on import.
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	write(t, dir, "bad.json", strings.Replace(string(data), `"currentState": "`, `"currentState": "x`, 1))
	if r := f.run(t, dir, dst, "import", bad, "--name", "bad"); r.code != 1 || !strings.Contains(r.stderr, "checkpoint corrupt") {
		t.Errorf("import of an altered export: exit %d, %s", r.code, r.stderr)
	}

	// Laptop to cluster: a local run cut at iteration 3 continues in the
	// cluster from iteration 3.
	if r := looprun(t, dir, "run", "count.yaml", "--max-steps", "3", "-q"); r.code != 1 {
		t.Fatalf("local run: exit %d %s", r.code, r.stderr)
	}
	local := filepath.Join(dir, "local.json")
	if r := looprun(t, dir, "export", "--local", "count", "-o", local); r.code != 0 {
		t.Fatalf("export --local: %s", r.stderr)
	}
	out = f.ok(t, dir, dst, "import", local, "--name", "from-laptop")
	if !strings.Contains(out, "at iteration 3") {
		t.Errorf("import of the local run: %q", out)
	}
	landed := f.waitFor(t, dst, "from-laptop", "it finished", finished)
	completedAt6(t, landed)
	evs, err = configmaps.Read(t.Context(), f.c, landed)
	if err != nil {
		t.Fatal(err)
	}
	var resumed *executor.Event
	enters := 0
	for i := range evs {
		switch evs[i].Type {
		case executor.EventLoopResume:
			resumed = &evs[i]
		case executor.EventStateEnter:
			enters++
		}
	}
	if resumed == nil || executor.LoopResumeOf(*resumed).Iteration != 3 {
		t.Errorf("no loop_resume at iteration 3 in the moved run: %v", resumed)
	}
	if enters != 6 {
		t.Errorf("state_enter events: %d, want 6 (3 on the laptop, 3 in the cluster)", enters)
	}
	// watch shows the moved run's steps, each once.
	w := f.run(t, dir, dst, "watch", "from-laptop")
	for n := 1; n <= 6; n++ {
		if c := strings.Count(w.stdout, fmt.Sprintf("[%d/", n)); c != 1 {
			t.Errorf("watch shows step %d %d times:\n%s", n, c, w.stdout)
		}
	}

	// Cluster to laptop: export the cluster run, import it here, resume it.
	f.ok(t, dir, src, "export", "count", "-o", doc)
	if r := looprun(t, dir, "import", "--local", doc, "--name", "back"); r.code != 0 || !strings.Contains(r.stdout, "looprun resume back") {
		t.Fatalf("import --local: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "resume", "back", "-q"); r.code != 0 {
		t.Fatalf("resume of the imported run: exit %d %s", r.code, r.stderr)
	}
	store, err := localrun.NewStore(filepath.Join(dir, ".loops"), "back")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := store.Load()
	if err != nil || sf.Status != localrun.StatusCompleted || sf.Iteration != 6 {
		t.Fatalf("the imported run ended %+v (%v)", sf, err)
	}
}

// TestKubectlPlugin runs the binary as kubectl-loop: bare names are Loops.
func TestKubectlPlugin(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	write(t, dir, "count.yaml", countLoop)
	plugin := filepath.Join(t.TempDir(), "kubectl-loop")
	if err := os.Symlink(binary, plugin); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(plugin, append([]string{"--kubeconfig", f.kubeconfig, "-n", ns}, args...)...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl-loop %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	run("apply", "-f", "count.yaml")
	f.waitFor(t, ns, "count", "it finished", finished)
	if out := run("history", "count", "--type", "loop_complete"); !strings.Contains(out, "loop_complete") {
		t.Errorf("kubectl loop history count: %q", out)
	}
	if out := run("--help"); !strings.Contains(out, "kubectl loop") {
		t.Errorf("help does not say kubectl loop:\n%s", out)
	}
	sc := bufio.NewScanner(strings.NewReader(run("get")))
	lines := 0
	for sc.Scan() {
		lines++
	}
	if lines != 2 {
		t.Errorf("kubectl loop get: %d lines", lines)
	}
}

// waitUntil waits, 30 s at most, until cond holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proc.Until(t, 30*time.Second, what, cond)
}

// apply applies server-side: a label or annotation edit in the file
// reaches the Loop, and what another manager set stays.
func TestClusterApplyLabels(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	manifest := "apiVersion: looprun.io/v1alpha1\nkind: Loop\nmetadata:\n  name: labelled\n  labels:\n    team: a\nspec:\n  initial: a\n  suspend: true\n  states:\n    a:\n      action: \"true\"\n      next: done\n    done:\n      terminal: true\n"
	write(t, dir, "l.yaml", manifest)
	if out := f.ok(t, dir, ns, "apply", "-f", "l.yaml"); !strings.Contains(out, "created") {
		t.Fatalf("apply: %q", out)
	}
	loop := &v1alpha1.Loop{}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "labelled"}, loop); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(loop.DeepCopy())
	loop.Annotations = map[string]string{"other.example/owner": "someone"}
	if err := f.c.Patch(t.Context(), loop, patch); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "l.yaml", strings.Replace(manifest, "team: a", "team: b\n    tier: gold", 1))
	if out := f.ok(t, dir, ns, "apply", "-f", "l.yaml"); !strings.Contains(out, "configured") {
		t.Fatalf("apply of new labels: %q", out)
	}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "labelled"}, loop); err != nil {
		t.Fatal(err)
	}
	if loop.Labels["team"] != "b" || loop.Labels["tier"] != "gold" || loop.Annotations["other.example/owner"] != "someone" {
		t.Errorf("labels %v, annotations %v", loop.Labels, loop.Annotations)
	}
	if out := f.ok(t, dir, ns, "apply", "-f", "l.yaml"); !strings.Contains(out, "unchanged") {
		t.Errorf("apply again: %q", out)
	}
}

// apply of a loop that runs sub-loops uploads each loop it runs, however
// deep, as a LoopTemplate, then the Loop; convert prints them all.
func TestClusterApplySubLoops(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := subLoopDir(t)
	out := f.ok(t, dir, ns, "apply", "-f", "top.yaml")
	for _, want := range []string{"looptemplate/middle created", "looptemplate/leaf created", "loop/top created"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply printed %q; want %q", out, want)
		}
	}
	tpl := &v1alpha1.LoopTemplate{}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "middle"}, tpl); err != nil {
		t.Fatal(err)
	}
	if !tpl.Spec.Parameters["target"].Required || tpl.Spec.States["deeper"].Loop != "leaf" || !tpl.Spec.States["deeper"].ContextPassthrough {
		t.Errorf("template middle: %+v", tpl.Spec)
	}
	if out := f.ok(t, dir, ns, "apply", "-f", "top.yaml"); !strings.Contains(out, "looptemplate/leaf unchanged") {
		t.Errorf("apply again: %q", out)
	}
	r := looprun(t, dir, "convert", "top.yaml")
	docs := strings.Split(r.stdout, "\n---\n")
	if r.code != 0 || len(docs) != 3 || !strings.Contains(docs[0], "kind: LoopTemplate") || !strings.Contains(docs[2], "kind: Loop\n") {
		t.Fatalf("convert: exit %d, %d documents:\n%s", r.code, len(docs), r.stdout)
	}
}
