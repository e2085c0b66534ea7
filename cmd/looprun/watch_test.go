package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
)

// watchEvents is a Loop's event log as the cluster keeps it: an agent step
// that took 1.5s and cost $0.0123, told twice (a log read again after an
// import), its action said twice to run again, an approval answered, and
// the pause on the budget.
const watchEvents = `{"event":"loop_start","seq":1,"ts":"2026-01-01T00:00:00Z","loop":"count","depth":0}
{"event":"state_enter","seq":2,"ts":"2026-01-01T00:00:01Z","state":"fix","iteration":1,"depth":0}
{"event":"action_start","seq":3,"ts":"2026-01-01T00:00:01Z","action":"fix it","is_prompt":true,"depth":0}
{"event":"action_complete","seq":4,"ts":"2026-01-01T00:00:03Z","exit_code":0,"duration_ms":1500,"output_preview":"done\tok","input_tokens":10,"output_tokens":5,"cost_usd":0.0123,"depth":0}
{"event":"state_enter","seq":2,"ts":"2026-01-01T00:00:01Z","state":"fix","iteration":1,"depth":0}
{"event":"action_restarted","seq":5,"ts":"2026-01-01T00:00:03Z","action":"fix it","state":"fix","iteration":1,"depth":0}
{"event":"action_restarted","seq":6,"ts":"2026-01-01T00:00:03Z","action":"fix it","state":"fix","iteration":1,"depth":0}
{"event":"approval_answered","seq":7,"ts":"2026-01-01T00:00:04Z","state":"ask","verdict":"approved","by":"ann","message":"fine","depth":0}
{"event":"budget_exceeded","seq":8,"ts":"2026-01-01T00:00:05Z","depth":0}
`

// looprun watch shows what looprun run shows of the same events: the
// actions' durations and cost, the exit hook, each step once; and a run
// paused on its budget ends the watch with run's exit code and advice.
func TestWatchShowsWhatRunShows(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 6, 0, time.UTC))
	loop := &v1alpha1.Loop{
		ObjectMeta: metav1.ObjectMeta{Name: "count", Namespace: "ns", UID: "u1", Generation: 1},
		Status: v1alpha1.LoopStatus{ObservedGeneration: 1, RunState: v1alpha1.RunState{
			Phase: v1alpha1.PhasePaused, LastSeq: 8,
			ExitHook: &v1alpha1.ExitHookStatus{Phase: v1alpha1.ExitHookSucceeded, StartedAt: &start, FinishedAt: &start},
		}},
	}
	loop.Status.EventLog = &v1alpha1.EventLogStatus{LastSeq: 8}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configmaps.SegmentName("count", 0), Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "looprun.io/v1alpha1", Kind: "Loop", Name: "count", UID: "u1", Controller: ptr.To(true)}}},
		Data: map[string]string{configmaps.EventsKey: watchEvents},
	}
	var out bytes.Buffer
	w := &watcher{k: &kube{c: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).Build()}, out: &out}
	if !w.show(t.Context(), loop) {
		t.Fatal("the watch of a paused Loop goes on; it ends as run does")
	}
	got := out.String()
	for _, want := range []string{"(1.5s)", "10 in, 5 out, $0.0123", "done    ok", "answer: approved by ann (fine)", "exit hook done"} {
		if !strings.Contains(got, want) {
			t.Errorf("watch lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "(again: it was cut off)"); n != 1 {
		t.Errorf("the restart is shown %d times:\n%s", n, got)
	}
	if n := strings.Count(got, "] fix ("); n != 2 {
		t.Errorf("the step is shown %d times:\n%s", n, got)
	}
	var exit *exitError
	if err := outcome(&loop.Status.RunState, loop.Name, false, nil); !errors.As(err, &exit) || exit.code != ExitPaused ||
		!strings.Contains(exit.msg, "looprun budget loop/count --add USD") {
		t.Errorf("outcome of the paused Loop: %v", err)
	}
}

// A watch does not end at a run's end while the run's exit hook is still
// to run: the operator writes the end, then starts the hook.
func TestWatchWaitsForTheExitHook(t *testing.T) {
	l := &v1alpha1.Loop{Spec: v1alpha1.LoopSpec{OnExit: &v1alpha1.ExitHook{Action: "echo bye"}}}
	l.Status.Phase, l.Status.Iteration = v1alpha1.PhaseCompleted, 3
	if watchEnds(l) {
		t.Error("ended before the exit hook started")
	}
	l.Status.ExitHook = &v1alpha1.ExitHookStatus{Iteration: 3, Phase: v1alpha1.ExitHookRunning}
	if watchEnds(l) {
		t.Error("ended while the exit hook runs")
	}
	l.Status.ExitHook.Phase = v1alpha1.ExitHookSucceeded
	if !watchEnds(l) {
		t.Error("did not end once the exit hook ran")
	}
	l.Spec.OnExit = nil
	l.Status.ExitHook = nil
	if !watchEnds(l) {
		t.Error("a run without an exit hook did not end at its end")
	}
}
