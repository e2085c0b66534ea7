package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
)

// heldActions runs nothing: each action runs until the test ends it. Like
// the Pod runner, it knows an action by its key, so starting one again
// finds the one that runs.
type heldActions struct {
	started map[string]int
	ended   map[string]bool
	// neverStarted: an action this runner does not know was never
	// started (a Pod never made), rather than lost.
	neverStarted bool
}

func (h *heldActions) Start(_ context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	key := runner.ActionKey(loop, a.Iteration)
	if h.started[key] > 0 {
		return 0, nil
	}
	h.started[key]++
	return 0, nil
}

func (h *heldActions) Check(_ context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	key := runner.ActionKey(loop, loop.Status.Action.Iteration)
	switch {
	case h.ended[key]:
		return runner.Outcome{State: runner.Done, Result: executor.ActionResult{Output: "ok"}}, nil
	case h.started[key] > 0:
		return runner.Outcome{State: runner.Running}, nil
	case h.neverStarted:
		return runner.Outcome{State: runner.NotStarted}, nil
	}
	return runner.Outcome{State: runner.Lost}, nil
}

func (h *heldActions) Hook(context.Context, *v1alpha1.Loop, executor.Action, bool) (runner.Outcome, string, error) {
	return runner.Outcome{State: runner.Done}, "", nil
}
func (h *heldActions) Release(*v1alpha1.Loop, int32)                   {}
func (h *heldActions) Prune(context.Context, *v1alpha1.Loop) error     { return nil }
func (h *heldActions) Cancel(context.Context, *v1alpha1.Loop) error    { return nil }
func (h *heldActions) Workspace(context.Context, *v1alpha1.Loop) error { return nil }
func (h *heldActions) Forget(types.NamespacedName)                     {}
func (h *heldActions) Wakes() runner.Wake                              { return runner.Wake{} }
func newHeldActions() *heldActions {
	return &heldActions{started: map[string]int{}, ended: map[string]bool{}}
}

type startFixture struct {
	c       client.Client
	actions *heldActions
	clock   *clocktesting.FakeClock
	loop    *v1alpha1.Loop
}

func newStartFixture(t *testing.T) *startFixture {
	t.Helper()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "0123456789", Generation: 1}, Spec: v1alpha1.LoopSpec{
		Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "true", Next: "b"}, "b": {Action: "true", Next: "done"}, "done": {Terminal: true},
		},
	}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(loop).WithStatusSubresource(loop).Build()
	return &startFixture{c: c, actions: newHeldActions(), clock: clocktesting.NewFakeClock(time.Now()), loop: loop}
}

// key is the key of the Loop's action of this iteration in its run.
func (f *startFixture) key(iteration int32) string {
	l := f.loop.DeepCopy()
	l.Status.RunID = runID(l)
	return runner.ActionKey(l, iteration)
}

func (f *startFixture) end(iteration int32)         { f.actions.ended[f.key(iteration)] = true }
func (f *startFixture) started(iteration int32) int { return f.actions.started[f.key(iteration)] }

// reconciler is a new operator process's reconciler (nothing remembered).
func (f *startFixture) reconciler() *LoopReconciler {
	s := f.c.Scheme()
	return &LoopReconciler{Client: f.c, APIReader: f.c, Scheme: s, Clock: f.clock, Actions: f.actions,
		EventLog: &configmaps.Log{Client: f.c, Reader: f.c, Scheme: s}}
}

func (f *startFixture) reconcile(t *testing.T, r *LoopReconciler) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(f.loop)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// saved is the Loop as the API server holds it, and its event log.
func (f *startFixture) saved(t *testing.T) (*v1alpha1.Loop, []string) {
	t.Helper()
	got := &v1alpha1.Loop{}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(f.loop), got); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: configmaps.SegmentName("l", 1)}, cm)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(cm.Data[configmaps.EventsKey]), "\n") {
		if i := strings.Index(line, `"event":"`); i >= 0 {
			kind := line[i+len(`"event":"`):]
			kinds = append(kinds, kind[:strings.IndexByte(kind, '"')])
		}
	}
	return got, kinds
}

// A first action that ends within the grace: the start and the first
// transition are saved by one status write and one event-log write.
func TestStartSavedWithFirstTransition(t *testing.T) {
	f := newStartFixture(t)
	r := f.reconciler()
	res := f.reconcile(t, r)
	if res.RequeueAfter != DefaultStartGrace {
		t.Errorf("first reconcile requeues after %v, want the grace %v", res.RequeueAfter, DefaultStartGrace)
	}
	got, kinds := f.saved(t)
	if !neverSaved(got) || len(got.Status.Conditions) != 0 || len(kinds) != 0 {
		t.Fatalf("the start was written before its action ended: %+v, events %v", got.Status, kinds)
	}
	if n := f.started(1); n != 1 {
		t.Fatalf("first action started %d times", n)
	}
	rv := got.ResourceVersion

	f.clock.Step(100 * time.Millisecond)
	f.end(1)
	f.reconcile(t, r)
	got, kinds = f.saved(t)
	if got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Action == nil || got.Status.Action.State != "b" || got.Status.ObservedGeneration != 1 {
		t.Fatalf("status after the first transition: %+v", got.Status.RunState)
	}
	if got.ResourceVersion == rv {
		t.Fatal("status not written")
	}
	want := "loop_start state_enter action_start action_complete route state_enter action_start"
	if strings.Join(kinds, " ") != want {
		t.Errorf("event log %v, want %s", kinds, want)
	}
	if got.Status.LastSeq != int64(len(kinds)) {
		t.Errorf("status.lastSeq %d, event log holds %d events", got.Status.LastSeq, len(kinds))
	}
	if ready := condition(got, v1alpha1.ReadyCondition); ready == nil {
		t.Error("no Ready condition")
	}
}

// A first action still running when the grace is up: the start is saved
// as it stands, the action not started again.
func TestStartSavedWhenGraceIsUp(t *testing.T) {
	f := newStartFixture(t)
	r := f.reconciler()
	f.reconcile(t, r)
	f.clock.Step(400 * time.Millisecond)
	if res := f.reconcile(t, r); res.RequeueAfter != DefaultStartGrace-400*time.Millisecond {
		t.Errorf("requeue after %v, want the rest of the grace", res.RequeueAfter)
	}
	if got, _ := f.saved(t); !neverSaved(got) {
		t.Fatalf("written before the grace was up: %+v", got.Status.RunState)
	}
	f.clock.Step(DefaultStartGrace)
	f.reconcile(t, r)
	got, kinds := f.saved(t)
	if got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Action == nil || got.Status.Action.State != "a" || got.Status.Action.Iteration != 1 {
		t.Fatalf("status after the grace: %+v", got.Status.RunState)
	}
	if want := "loop_start state_enter action_start"; strings.Join(kinds, " ") != want {
		t.Errorf("event log %v, want %s", kinds, want)
	}
	if n := f.started(1); n != 1 {
		t.Errorf("first action started %d times", n)
	}
	// Written once: the next look finds the action running and writes nothing.
	rv := got.ResourceVersion
	f.reconcile(t, r)
	if again, _ := f.saved(t); again.ResourceVersion != rv {
		t.Error("status written again with nothing new")
	}
}

// An operator that restarts while a start waits starts the run again and
// finds the first action by its key: it is not run twice, and the start
// is saved once its grace is up.
func TestUnsavedStartSurvivesRestart(t *testing.T) {
	f := newStartFixture(t)
	f.reconcile(t, f.reconciler())
	r := f.reconciler() // a new process: nothing remembered
	f.clock.Step(10 * time.Millisecond)
	f.reconcile(t, r)
	f.clock.Step(DefaultStartGrace)
	f.reconcile(t, r)
	got, kinds := f.saved(t)
	if n := f.started(1); n != 1 {
		t.Fatalf("first action started %d times", n)
	}
	if got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Action == nil || got.Status.Action.Iteration != 1 {
		t.Fatalf("status %+v", got.Status.RunState)
	}
	if want := "loop_start state_enter action_start"; strings.Join(kinds, " ") != want {
		t.Errorf("event log %v, want %s", kinds, want)
	}
}

// With the grace turned off, the start is written at once.
func TestStartGraceOff(t *testing.T) {
	f := newStartFixture(t)
	r := f.reconciler()
	r.StartGrace = -1
	f.reconcile(t, r)
	if got, _ := f.saved(t); got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Action == nil {
		t.Fatalf("start not written: %+v", got.Status.RunState)
	}
}

// The status keeps nextStepAt to the second: a reconcile before the wait
// is up finds the exact time this process saved, not the second before it.
func TestSharpenNextStepAt(t *testing.T) {
	exact := time.Date(2026, 11, 23, 10, 0, 1, 700_000_000, time.UTC)
	r := &LoopReconciler{}
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "u"}}
	r.memory.keep(loop, loopMemory{uid: loop.UID, nextStepAt: exact})
	for _, tt := range []struct {
		saved, want time.Time
	}{
		{exact.Truncate(time.Second), exact},
		{exact.Add(time.Second).Truncate(time.Second), exact.Add(time.Second).Truncate(time.Second)}, // another wait, saved by another process
	} {
		loop.Status.NextStepAt = &metav1.Time{Time: tt.saved}
		r.memory.exactNextStepAt(loop)
		if got := loop.Status.NextStepAt.Time; !got.Equal(tt.want) {
			t.Errorf("saved %v: sharpened to %v, want %v", tt.saved, got, tt.want)
		}
	}
	loop.Status.NextStepAt = nil
	if r.memory.exactNextStepAt(loop); loop.Status.NextStepAt != nil {
		t.Error("no wait became one")
	}
	r.forget(client.ObjectKeyFromObject(loop))
}

// A status write is remembered: a Loop read from a cache behind it is stale,
// one read at or past it is not; a finished run no longer counts as
// running; a start that waits to be saved stays until its run is saved.
func TestMemorySavedAndStale(t *testing.T) {
	var m memories
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mem", UID: "u"}}
	loop.Status.LastSeq = 5
	loop.Status.Phase = v1alpha1.PhaseRunning
	m.saved(loop)
	if lm := m.recall(loop); lm.lastSeq != 5 || !lm.running {
		t.Fatalf("remembered %+v", lm)
	}
	behind := loop.DeepCopy()
	behind.Status.LastSeq = 4
	if !m.stale(behind) || m.stale(loop) {
		t.Errorf("stale: behind %v, current %v", m.stale(behind), m.stale(loop))
	}
	m.finished(loop)
	if m.recall(loop).running || m.running.Load() != 0 {
		t.Errorf("a finished run still counts: %d", m.running.Load())
	}
	fresh := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new", UID: "v"}}
	m.keep(fresh, loopMemory{uid: "v", unsaved: &unsavedStart{}})
	m.saved(fresh) // nothing of its run written yet (phase "")
	if m.recall(fresh).unsaved == nil {
		t.Error("the waiting start was dropped before its run was saved")
	}
	fresh.Status.Phase = v1alpha1.PhaseRunning
	m.saved(fresh)
	if m.recall(fresh).unsaved != nil {
		t.Error("the waiting start outlived the save of its run")
	}
	m.drop(client.ObjectKeyFromObject(fresh))
	m.drop(client.ObjectKeyFromObject(loop))
	if m.running.Load() != 0 {
		t.Errorf("running %d after both went", m.running.Load())
	}
}

func TestRunningLoopsGauge(t *testing.T) {
	r := &LoopReconciler{}
	a := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "a"}}
	b := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "b"}}
	steps := []struct {
		loop    *v1alpha1.Loop
		running bool
		want    float64
	}{
		{a, true, 1}, {a, true, 1}, {b, true, 2}, {a, false, 1}, {a, false, 1}, {b, false, 0},
	}
	for i, s := range steps {
		r.memory.keep(s.loop, loopMemory{uid: s.loop.UID, running: s.running})
		if got := testutil.ToFloat64(runningLoops); got != s.want {
			t.Errorf("step %d: gauge %v, want %v", i, got, s.want)
		}
	}
	// A Loop that is gone leaves the gauge and the reconciler's memory,
	// found by name alone (NotFound gives nothing more).
	r.memory.keep(a, loopMemory{uid: a.UID, running: true})
	r.forget(client.ObjectKeyFromObject(a))
	if got := testutil.ToFloat64(runningLoops); got != 0 {
		t.Errorf("after a deleted Loop: gauge %v", got)
	}
	n := 0
	r.memory.byKey.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d Loops remembered, want 1 (b, finished)", n)
	}
	// A Loop recreated under the same name starts with no memory.
	r.memory.keep(b, loopMemory{uid: b.UID, lastSeq: 9})
	again := b.DeepCopy()
	again.UID = "b2"
	if m := r.memory.recall(again); m.lastSeq != 0 {
		t.Errorf("recreated Loop remembered seq %d", m.lastSeq)
	}
}
