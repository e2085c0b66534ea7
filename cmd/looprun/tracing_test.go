package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/test/fixture"
	"github.com/looprun/looprun/test/proc"
)

// With an OTLP endpoint, a local run is traced; interrupted and resumed,
// it is still one trace, its spans under one run span, and the state cut
// off by the interrupt one span from its entry to its end.
func TestTraceAcrossResume(t *testing.T) {
	recv := fixture.StartOTLPReceiver()
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	dir := t.TempDir()
	write(t, dir, "gate.yaml", "name: gate\ninitial: wait\nstates:\n  wait:\n    action: touch waiting; until [ -f go ]; do sleep 0.05; done\n    next: after\n  after:\n    action: echo after\n    next: done\n  done:\n    terminal: true\n")
	cmd := exec.Command(binary, "run", "-q", "gate.yaml")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proc.WaitFile(t, filepath.Join(dir, "waiting"))
	entered := time.Now() // the visit began before its action made the file
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	st, err := localrun.ReadStateFile(filepath.Join(dir, ".loops/.running/gate.state.json"))
	if err != nil || st.Trace == nil {
		t.Fatalf("the state file keeps no trace: %+v %v", st, err)
	}
	if got := recv.Spans(); len(got) != 0 {
		t.Fatalf("an interrupted run sent spans of unfinished work: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now() // the visit ends in the resumed run, after this
	if r := looprun(t, dir, "resume", "-q", "gate"); r.code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	spans := map[string]fixture.Span{}
	for _, s := range recv.Spans() {
		if _, dup := spans[s.Name]; dup {
			t.Fatalf("span %s sent twice", s.Name)
		}
		spans[s.Name] = s
	}
	run, ok := spans["RUN gate"]
	if !ok || run.ParentSpanID != "" || run.Service != "looprun" {
		t.Fatalf("no run span: %v", spans)
	}
	for _, name := range []string{"wait", "after", "action wait", "action after"} {
		s, ok := spans[name]
		if !ok || s.TraceID != run.TraceID {
			t.Fatalf("span %s: %+v (run in trace %s)", name, s, run.TraceID)
		}
	}
	wait := spans["wait"]
	if wait.ParentSpanID != run.SpanID || spans["action wait"].ParentSpanID != wait.SpanID {
		t.Fatalf("wait %+v, its action %+v", wait, spans["action wait"])
	}
	// From its entry in the interrupted run to its end in the resumed one
	// (how long that is depends on the machine, not on looprun).
	if wait.Start < run.Start || wait.Start > uint64(entered.UnixNano()) || wait.End < uint64(resumed.UnixNano()) {
		t.Fatalf("the cut-off state's span does not cover its visit: %+v", wait)
	}
}
