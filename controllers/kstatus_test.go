package controllers

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// kstatusOf is the Loop's health as kstatus computes it from what the API
// server serves, as Flux does.
func kstatusOf(g Gomega, key client.ObjectKey) status.Status {
	st, err := fixture.KStatus(bg, k8sClient, key)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

var _ = Describe("GitOps health, read by kstatus from the API server", func() {
	It("is InProgress for a Loop no operator saw yet, and follows the Loop after", func() {
		ns := newNamespace()
		suspended := fixUntilClean()
		suspended.Suspend = true
		failing := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "false", OnFailure: "bad", OnSuccess: "good"},
			"bad": {Terminal: true, Failure: ptr.To(true)}, "good": {Terminal: true}}}
		keys := map[string]client.ObjectKey{
			"completes": createLoop(ns, "completes", fixUntilClean()),
			"suspended": createLoop(ns, "suspended", suspended),
			"fails":     createLoop(ns, "fails", failing),
		}
		for name, key := range keys {
			Expect(kstatusOf(Default, key)).To(Equal(status.InProgressStatus), "%s before any operator", name)
		}
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		// A suspended Loop is paused, not done: in progress for kstatus.
		want := map[string]status.Status{"completes": status.CurrentStatus, "suspended": status.InProgressStatus, "fails": status.FailedStatus}
		Eventually(func(g Gomega) {
			g.Expect(condition(getLoop(g, keys["suspended"]), v1alpha1.ReadyCondition)).To(HaveField("Reason", v1alpha1.ReasonSuspended))
		}, "60s").Should(Succeed())
		for name, key := range keys {
			Eventually(func(g Gomega) { g.Expect(kstatusOf(g, key)).To(Equal(want[name])) }, "60s").Should(Succeed(), name)
		}
		Expect(getLoop(Default, keys["suspended"]).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
	})
})
