package controllers

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
)

// conflicting fails every nth status patch with a conflict, as a write
// racing the operator's would.
type conflicting struct {
	client.Client
	n, calls int64
	failed   atomic.Int64
}

func (c *conflicting) Status() client.SubResourceWriter {
	return &conflictingStatus{c.Client.Status(), c}
}

type conflictingStatus struct {
	client.SubResourceWriter
	c *conflicting
}

func (s *conflictingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if atomic.AddInt64(&s.c.calls, 1)%s.c.n == 0 {
		s.c.failed.Add(1)
		return apierrors.NewConflict(schema.GroupResource{Group: "looprun.io", Resource: "loops"}, obj.GetName(), nil)
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func countSteps(evs []executor.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

var _ = Describe("The event log never lies", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("writes exactly the events of the steps that are saved, whatever the status conflicts", func() {
		var conflicts *conflicting
		statusErrors := testutil.ToFloat64(reconcileErrors.WithLabelValues("status"))
		op := runOperator(Config{LocalWorkdir: GinkgoT().TempDir(), AllowLocalActions: true, SegmentBytes: 4096}, func(r *LoopReconciler) {
			conflicts = &conflicting{Client: r.Client, n: 3}
			r.Client = conflicts
		})
		DeferCleanup(op.stop)
		spec := v1alpha1.LoopSpec{Initial: "count", MaxIterations: i32(200), MaxEdgeRevisits: i32(200), States: map[string]v1alpha1.State{
			"count": {Action: "echo x >> n; test $(wc -l < n) -ge 30", OnSuccess: "done", OnFailure: "count"},
			"done":  {Terminal: true},
		}}
		loop := waitFinished(createLoop(ns, "conflicted", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(conflicts.failed.Load()).To(BeNumerically(">", 5), "conflicts happened")
		evs := loopEvents(loop) // every event once, in order, as many as status.lastSeq
		Expect(countSteps(evs, executor.EventActionStart)).To(Equal(int(loop.Status.Iteration)), "one action_start per saved step")
		Expect(countSteps(evs, executor.EventActionComplete)).To(Equal(int(loop.Status.Iteration)))
		Expect(countSteps(evs, executor.EventActionRestarted)).To(BeZero(), "no finished action was lost to a conflict")
		Expect(testutil.ToFloat64(reconcileErrors.WithLabelValues("status"))).To(Equal(statusErrors),
			"a conflict is a race to take the step again, not a reconcile error")
	})

	It("runs Loops whose names are too long for a label or a ConfigMap name", func() {
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		for _, name := range []string{strings.Repeat("l", 70), strings.Repeat("n", 248)} {
			loop := waitFinished(createLoop(ns, name, fixUntilClean()))
			Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), name)
			Expect(loopEvents(loop)).NotTo(BeEmpty())
		}
	})

	It("does not write into a ConfigMap it does not own, and waits saying why", func() {
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		victim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configmaps.SegmentName("victim", 1), Namespace: ns},
			Data: map[string]string{configmaps.EventsKey: `{"event":"loop_start","seq":1000}` + "\n"}}
		Expect(k8sClient.Create(bg, victim)).To(Succeed())
		key := createLoop(ns, "victim", fixUntilClean())
		Eventually(func(g Gomega) {
			loop := getLoop(g, key)
			ready := condition(loop, v1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonEventLogFailed))
			g.Expect(ready.Message).To(ContainSubstring("does not belong to this Loop"))
			g.Expect(loop.Status.Iteration).To(BeZero(), "no step is kept without its events")
		}, 30*time.Second).Should(Succeed())
		Expect(k8sClient.Get(bg, client.ObjectKeyFromObject(victim), victim)).To(Succeed())
		Expect(victim.Data[configmaps.EventsKey]).To(Equal(`{"event":"loop_start","seq":1000}`+"\n"), "the foreign ConfigMap is untouched")

		// Removed, the Loop goes on.
		Expect(k8sClient.Delete(bg, victim)).To(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(loopEvents(loop)[0].Type).To(Equal(executor.EventLoopStart))
	})

	It("shows a Loop recreated under the same name its own history only", func() {
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		first := waitFinished(createLoop(ns, "again", fixUntilClean()))
		Expect(k8sClient.Delete(bg, first)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(bg, client.ObjectKeyFromObject(first), &v1alpha1.Loop{}))
		}).Should(BeTrue())
		// envtest has no garbage collector: the first run's segments stay.
		spec := v1alpha1.LoopSpec{Initial: "only", States: map[string]v1alpha1.State{"only": {Action: "true", Next: "end"}, "end": {Terminal: true}}}
		second := waitFinished(createLoop(ns, "again", spec))
		evs := loopEvents(second)
		for _, e := range evs {
			Expect(executor.StatesNamed(e)).NotTo(ContainElement("fix"), "an event of the deleted Loop's run")
		}
	})
})
