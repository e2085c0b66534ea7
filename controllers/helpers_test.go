package controllers

import (
	"context"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
)

var bg = context.Background()

func createLoop(ns, name string, spec v1alpha1.LoopSpec) client.ObjectKey {
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	Expect(k8sClient.Create(bg, loop)).To(Succeed())
	return client.ObjectKeyFromObject(loop)
}

func getLoop(g Gomega, key client.ObjectKey) *v1alpha1.Loop {
	loop := &v1alpha1.Loop{}
	g.Expect(k8sClient.Get(bg, key, loop)).To(Succeed())
	return loop
}

// waitFinished waits until the Loop ended and checks the condition invariants.
func waitFinished(key client.ObjectKey) *v1alpha1.Loop {
	var loop *v1alpha1.Loop
	Eventually(func(g Gomega) {
		loop = getLoop(g, key)
		g.Expect(loop.Status.Phase.IsFinished()).To(BeTrue(), "phase %q", loop.Status.Phase)
		g.Expect(loop.Status.ObservedGeneration).To(Equal(loop.Generation))
	}, 60*time.Second, 50*time.Millisecond).Should(Succeed())
	expectConditionInvariants(loop)
	return loop
}

// expectConditionInvariants checks the kstatus rules every Loop follows:
// Ready is always there; Reconciling and Stalled only when True.
func expectConditionInvariants(loop *v1alpha1.Loop) {
	ready := meta.FindStatusCondition(loop.Status.Conditions, v1alpha1.ReadyCondition)
	ExpectWithOffset(1, ready).NotTo(BeNil(), "no Ready condition")
	for _, t := range []string{v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition} {
		if c := meta.FindStatusCondition(loop.Status.Conditions, t); c != nil {
			ExpectWithOffset(1, c.Status).To(Equal(metav1.ConditionTrue), "%s is present but not True", t)
		}
	}
	for _, c := range loop.Status.Conditions {
		ExpectWithOffset(1, c.Reason).NotTo(BeEmpty())
	}
}

func condition(loop *v1alpha1.Loop, t string) *metav1.Condition {
	return meta.FindStatusCondition(loop.Status.Conditions, t)
}

// loopEvents reads the Loop's whole event log and checks it has every event
// exactly once, in order.
func loopEvents(loop *v1alpha1.Loop) []executor.Event {
	evs, err := configmaps.Read(bg, k8sClient, loop)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	for i, e := range evs {
		ExpectWithOffset(1, e.Seq).To(Equal(int64(i+1)), "event %d (%s)", i, e.Type)
	}
	ExpectWithOffset(1, int64(len(evs))).To(Equal(loop.Status.LastSeq), "log length vs status.lastSeq")
	return evs
}

func eventTypes(evs []executor.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func i32(v int32) *int32 { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// fixUntilClean: check fails until fix has run twice.
func fixUntilClean() v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{
		Initial: "check",
		States: map[string]v1alpha1.State{
			"check": {Action: "test \"$(cat fixes 2>/dev/null | wc -l)\" -ge 2", Capture: "check", OnSuccess: "done", OnFailure: "fix"},
			"fix":   {Action: "echo fixed >> fixes; echo fixed", Next: "check"},
			"done":  {Terminal: true},
		},
	}
}

// eventNotes lists the notes of the namespace's Kubernetes Events of a
// reason.
func eventNotes(g Gomega, ns, reason string) []string {
	var list eventsv1.EventList
	g.Expect(k8sClient.List(bg, &list, client.InNamespace(ns))).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// gauge is the value of a gauge of the operator's metrics with the label
// given.
func gauge(g Gomega, name, label, value string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
