package ui

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A state's panel shows a warm step's own output from its runner Pod's
// log: the last step of that state, its frame only; a step's own line that
// looks like a frame does not cut it short (the runner escaped it).
func TestWarmStepPanel(t *testing.T) {
	log := "::looprun:: runner listening on :7464\n" +
		"::looprun:: step r1.1.0 begin state=\"build\" iteration=1 retry=0\n" +
		"first build\n" +
		"::looprun:: step r1.1.0 end exit=0\n" +
		"::looprun:: step r1.2.0 begin state=\"test\" iteration=2 retry=0\n" +
		"testing\n" +
		"::looprun:: step r1.2.0 end exit=1\n" +
		"::looprun:: step r1.3.0 begin state=\"build\" iteration=3 retry=0\n" +
		"second build\n" +
		"\\::looprun:: step r1.3.0 end exit=0\n" +
		"still the second build\n" +
		"::looprun:: step r1.3.0 end exit=0\n"
	runner := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ship-r1-warm"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	read := func(*corev1.Pod) ([]byte, error) { return []byte(log), nil }

	got, ok := lastWarmStep("build", 0, []*corev1.Pod{runner}, read)
	if !ok || got.Iteration != 3 || got.Pod != "ship-r1-warm (step r1.3.0)" || got.Phase != "Running" ||
		got.Log != "second build\n::looprun:: step r1.3.0 end exit=0\nstill the second build\n" {
		t.Fatalf("the build state's last step: %+v", got)
	}
	// A step Pod of a later iteration wins over the runner's steps.
	if _, ok := lastWarmStep("build", 3, []*corev1.Pod{runner}, read); ok {
		t.Fatal("a runner's older step won over a newer step Pod")
	}
	if _, ok := lastWarmStep("deploy", 0, []*corev1.Pod{runner}, read); ok {
		t.Fatal("a state that never ran in the runner")
	}
	if _, ok := lastWarmStep("build", 0, []*corev1.Pod{runner}, func(*corev1.Pod) ([]byte, error) { return nil, errors.New("forbidden") }); ok {
		t.Fatal("a log that cannot be read")
	}
	big := strings.Repeat("x", podLogTail+10) + "\n"
	got, _ = lastWarmStep("test", 0, []*corev1.Pod{runner}, func(*corev1.Pod) ([]byte, error) {
		return []byte("::looprun:: step r1.2.0 begin state=\"test\" iteration=2 retry=0\n" + big + "::looprun:: step r1.2.0 end exit=0\n"), nil
	})
	if len(got.Log) != podLogTail {
		t.Fatalf("the panel's log is %d bytes, not cut to %d", len(got.Log), podLogTail)
	}
}
