package controllers

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// kstatusOf reads the Loop as the API server serves it and computes its
// status with kstatus, as Flux does.
func kstatusOf(g Gomega, key client.ObjectKey) status.Status {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Loop"))
	g.Expect(k8sClient.Get(bg, key, u)).To(Succeed())
	res, err := status.Compute(u)
	g.Expect(err).NotTo(HaveOccurred())
	return res.Status
}

var _ = Describe("GitOps health, read by kstatus from the API server", func() {
	It("is InProgress for a Loop no operator saw yet, and follows the Loop after", func() {
		ns := newNamespace()
		suspended := fixUntilClean()
		suspended.Suspend = true
		failing := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "false", OnFailure: "bad", OnSuccess: "good"},
			"bad": {Terminal: true, Failure: ptrTrue()}, "good": {Terminal: true}}}
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
		want := map[string]status.Status{"completes": status.CurrentStatus, "suspended": status.CurrentStatus, "fails": status.FailedStatus}
		for name, key := range keys {
			Eventually(func(g Gomega) { g.Expect(kstatusOf(g, key)).To(Equal(want[name])) }, "60s").Should(Succeed(), name)
		}
		Expect(getLoop(Default, keys["suspended"]).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
	})
})

func ptrTrue() *bool { t := true; return &t }
