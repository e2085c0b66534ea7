package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

var _ = Describe("The cap on running Loops per namespace", func() {
	It("queues the Loops past it as Pending, says why, and starts them in creation order as slots free; another namespace is not held", func() {
		op := startOperator(Config{MaxRunningPerNamespace: 2})
		DeferCleanup(op.stop)
		gate := GinkgoT().TempDir() // a Loop's action waits for its file here
		waits := func(name string) v1alpha1.LoopSpec {
			return v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
				"work": {Action: fmt.Sprintf("echo %s >> %s/order; until [ -f %s/%s ]; do sleep 0.1; done", name, gate, gate, name), Next: "done"},
				"done": {Terminal: true},
			}}
		}
		ns := newNamespace()
		var keys []client.ObjectKey
		for _, name := range []string{"a", "b", "c", "d"} {
			keys = append(keys, createLoop(ns, name, waits(name)))
			time.Sleep(1100 * time.Millisecond) // creation timestamps are to the second
		}
		// Two run; c and d wait, c first.
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, keys[0]).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
			g.Expect(getLoop(g, keys[1]).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
			for i, ahead := range map[int]int{2: 0, 3: 1} {
				l := getLoop(g, keys[i])
				g.Expect(l.Status.Phase).To(Equal(v1alpha1.PhasePending))
				c := condition(l, v1alpha1.ReconcilingCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonQueued))
				g.Expect(c.Message).To(Equal(fmt.Sprintf("queued: 2 of the namespace's 2 running Loops are running; %d queued before it", ahead)))
			}
			g.Expect(eventNotes(g, ns, v1alpha1.ReasonQueued)).NotTo(BeEmpty())
		}, "30s").Should(Succeed())
		// Another namespace runs at once.
		other := waitFinished(createLoop(newNamespace(), "free", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}))
		Expect(other.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))

		// b ends: c starts, d still waits.
		Expect(os.WriteFile(filepath.Join(gate, "b"), nil, 0o644)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, keys[2]).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
		}, "30s").Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(getLoop(g, keys[3]).Status.Phase).To(Equal(v1alpha1.PhasePending))
		}, "3s").Should(Succeed())
		for _, name := range []string{"a", "c", "d"} {
			Expect(os.WriteFile(filepath.Join(gate, name), nil, 0o644)).To(Succeed())
		}
		for _, k := range keys {
			Expect(waitFinished(k).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		}
		order, err := os.ReadFile(filepath.Join(gate, "order"))
		Expect(err).NotTo(HaveOccurred())
		// a and b ran together; c started before d.
		Expect(string(order)).To(Or(Equal("a\nb\nc\nd\n"), Equal("b\na\nc\nd\n")))
	})

	It("does not count a sub-loop's child: a parent holding the only slot still runs it", func() {
		op := startOperator(Config{MaxRunningPerNamespace: 1})
		DeferCleanup(op.stop)
		ns := newNamespace()
		createTemplate(ns, "inner", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}, nil)
		loop := waitFinished(createLoop(ns, "outer", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":  {Loop: "inner", OnSuccess: "done", OnFailure: "done"},
			"done": {Terminal: true},
		}}))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
	})
})

var _ = Describe("The cap's idea of a child", func() {
	It("counts a Loop its author labelled looprun.io/parent, and wakes it when the slot frees, without polling", func() {
		op := startOperator(Config{MaxRunningPerNamespace: 1})
		DeferCleanup(op.stop)
		gate := GinkgoT().TempDir()
		ns := newNamespace()
		first := createLoop(ns, "first", v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
			"work": {Action: fmt.Sprintf("until [ -f %s/go ]; do sleep 0.1; done", gate), Next: "done"},
			"done": {Terminal: true},
		}})
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, first).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
		}, "30s").Should(Succeed())
		forged := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged",
			Labels: map[string]string{v1alpha1.LabelParent: "first"}},
			Spec: v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}}
		Expect(k8sClient.Create(bg, forged)).To(Succeed())
		key := client.ObjectKeyFromObject(forged)
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.Phase).To(Equal(v1alpha1.PhasePending))
			g.Expect(condition(l, v1alpha1.ReconcilingCondition).Reason).To(Equal(v1alpha1.ReasonQueued))
		}, "30s").Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Phase).To(Equal(v1alpha1.PhasePending))
		}, "2s").Should(Succeed())
		// The slot frees: the queued Loop is woken (its own look again is
		// minutes away, so only the wake-up can start it in time).
		Expect(os.WriteFile(filepath.Join(gate, "go"), nil, 0o644)).To(Succeed())
		Expect(waitFinished(first).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		}, "20s").Should(Succeed())
	})
})
