package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
)

const hookedLoop = `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: hooked}
spec:
  initial: work
  onExit: {action: 'echo "${loop.phase}"; echo told >&2; exit 7'}
  states:
    work: {action: "true", next: done}
    done: {terminal: true}
`

// A local run's page shows its exit hook: the command, how it ended (its
// exit code and why), and when it ran.
func TestALocalRunsExitHook(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hooked.yaml")
	if err := os.WriteFile(path, []byte(hookedLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, path, "work")
	srv := httptest.NewServer((&Server{LoopsDir: filepath.Join(dir, ".loops")}).Handler())
	defer srv.Close()
	var d Detail
	get(t, srv, "/api/loops/local/hooked", &d)
	h := d.ExitHook
	if h == nil || h.Action != `echo "${loop.phase}"; echo told >&2; exit 7` || h.Kind != "shell" || h.Phase != "Failed" ||
		h.ExitCode == nil || *h.ExitCode != 7 || h.Message != "told" || h.Iteration != d.Iteration || h.Earlier {
		t.Fatalf("exit hook %+v", h)
	}
	if h.StartedAt.IsZero() || h.FinishedAt.Before(h.StartedAt) {
		t.Fatalf("exit hook times %+v", h)
	}
	// The stream tells where the hook is (it ends after the run's last
	// event): the page draws it again when it moves.
	resp, err := http.Get(srv.URL + "/api/loops/local/hooked/stream")
	if err != nil {
		t.Fatal(err)
	}
	first := <-updatesOf(resp.Body)
	resp.Body.Close()
	if first["exitHook"] != "Failed" || first["lastSeq"] != float64(d.LastSeq) {
		t.Fatalf("the stream's update %v", first)
	}
	// A run without a hook has none on its page.
	_, _, plain := servedCountRun(t, &Server{})
	d = Detail{}
	get(t, plain, "/api/loops/local/count", &d)
	if d.ExitHook != nil {
		t.Fatalf("a run without a hook: %+v", d.ExitHook)
	}
}

// A cluster Loop's page shows its exit hook from its status (the Pod that
// ran it too), and one not run yet as such; a rewind the page reads after
// it followed the Loop leaves out what it abandoned.
func TestAClusterLoopsExitHookAndRewind(t *testing.T) {
	cfg, c, ns := cluster(t)
	ctx := context.Background()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hooked"}, Spec: v1alpha1.LoopSpec{Initial: "a",
		OnExit: &v1alpha1.ExitHook{Action: "notify ${loop.phase}"},
		States: map[string]v1alpha1.State{"a": {Action: "echo a", Next: "b"}, "b": {Action: "echo b", Next: "a"}, "done": {Terminal: true}}}}
	if err := c.Create(ctx, loop); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	var seq int64
	ev := func(typ string, data map[string]any) executor.Event {
		seq++
		return executor.Event{Seq: seq, Type: typ, Time: t0.Add(time.Duration(seq) * time.Second), Data: data}
	}
	visit := func(state, next string, it int) []executor.Event {
		return []executor.Event{ev(executor.EventStateEnter, map[string]any{"state": state, "iteration": it}),
			ev(executor.EventActionComplete, map[string]any{"exit_code": 0, "output_preview": state + " " + itoa(int64(it))}),
			ev(executor.EventRoute, map[string]any{"from": state, "to": next})}
	}
	var evs []executor.Event
	for it := 1; it <= 5; it++ {
		evs = append(evs, visit([]string{"a", "b"}[(it-1)%2], []string{"b", "a"}[(it-1)%2], it)...)
	}
	evs = append(evs, ev(executor.EventLoopComplete, map[string]any{"terminated_by": "max_iterations"}))
	log := &configmaps.Log{Client: c, Reader: c, Scheme: c.Scheme()}
	if err := log.Append(ctx, loop, evs, nil); err != nil {
		t.Fatal(err)
	}
	started, finished := metav1.NewTime(t0.Add(20*time.Second)), metav1.NewTime(t0.Add(23*time.Second))
	loop.Status.RunState = v1alpha1.RunState{RunID: "r1", Phase: v1alpha1.PhaseFailed, CurrentState: "a", Iteration: 5, LastSeq: seq,
		EdgeRevisits: map[string]int32{"a->b": 3, "b->a": 2},
		ExitHook: &v1alpha1.ExitHookStatus{Iteration: 5, Phase: v1alpha1.ExitHookSucceeded, Pod: "hooked-on-exit-5", ExitCode: ptr(int32(0)),
			StartedAt: &started, FinishedAt: &finished}}
	if err := c.Status().Update(ctx, loop); err != nil {
		t.Fatal(err)
	}
	srv := serveCluster(t, &Cluster{Client: viewerOf(t, cfg), Namespace: ns})
	base := "/api/loops/cluster/" + ns + "/hooked"
	var d Detail
	get(t, srv, base, &d)
	h := d.ExitHook
	if h == nil || h.Action != "notify ${loop.phase}" || h.Phase != "Succeeded" || h.ExitCode == nil || *h.ExitCode != 0 ||
		h.Pod != "hooked-on-exit-5" || !h.StartedAt.Equal(started.Time) || !h.FinishedAt.Equal(finished.Time) || h.Earlier {
		t.Fatalf("exit hook %+v", h)
	}
	if v := visitsOf(d); v["a"] != 3 || v["b"] != 2 {
		t.Fatalf("visits before the rewind %v", v)
	}

	// Rewound to the checkpoint of iteration 2 and run on one visit: a
	// (iteration 3) again; the hook of the earlier end is kept, and said to
	// be of it.
	evs = append([]executor.Event{ev(executor.EventLoopRewind, map[string]any{"state": "a", "iteration": 2, "from_state": "a", "from_iteration": 5})},
		visit("a", "b", 3)...)
	if err := log.Append(ctx, loop, evs, nil); err != nil {
		t.Fatal(err)
	}
	loop.Status.Phase, loop.Status.CurrentState, loop.Status.Iteration, loop.Status.LastSeq = v1alpha1.PhaseRunning, "b", 3, seq
	loop.Status.EdgeRevisits = map[string]int32{"a->b": 2, "b->a": 1}
	if err := c.Status().Update(ctx, loop); err != nil {
		t.Fatal(err)
	}
	d = Detail{}
	get(t, srv, base, &d)
	if v := visitsOf(d); v["a"] != 2 || v["b"] != 1 {
		t.Errorf("visits after the rewind %v", v)
	}
	if l := d.States["b"]; l.Output != "b 2" {
		t.Errorf("the last of b %+v", l)
	}
	if len(d.Rewinds) != 1 || d.Rewinds[0].Abandoned != 3 {
		t.Errorf("rewinds %+v", d.Rewinds)
	}
	if d.ExitHook == nil || !d.ExitHook.Earlier {
		t.Errorf("the hook of the earlier end %+v", d.ExitHook)
	}
	var p Page
	get(t, srv, base+"/timeline", &p)
	for _, row := range p.Visits {
		if row.Seq < d.Rewinds[0].Seq && row.Iteration > 2 {
			t.Errorf("a row of the abandoned timeline %+v", row)
		}
	}

	// A Loop whose hook has not run has it, to run.
	later := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}, Spec: v1alpha1.LoopSpec{Initial: "a", Suspend: true,
		OnExit: &v1alpha1.ExitHook{Action: "/summarize the run"}, States: map[string]v1alpha1.State{"a": {Terminal: true}}}}
	if err := c.Create(ctx, later); err != nil {
		t.Fatal(err)
	}
	d = Detail{}
	get(t, srv, "/api/loops/cluster/"+ns+"/later", &d)
	if h := d.ExitHook; h == nil || h.Phase != "" || h.Kind != "agent" || h.Action != "/summarize the run" {
		t.Fatalf("a hook not run %+v", h)
	}
}
