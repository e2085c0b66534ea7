package controllers

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// gated asks before it ships: approved goes to ship, anything else to stop.
func gated(timeout time.Duration) v1alpha1.LoopSpec {
	ask := v1alpha1.State{Approval: &v1alpha1.Approval{Message: "ship ${context.version}?"},
		Route: map[string]v1alpha1.StateName{v1alpha1.VerdictApproved: "ship", v1alpha1.VerdictRejected: "stop", v1alpha1.VerdictTimeout: "stop"}}
	if timeout > 0 {
		ask.Approval.Timeout = dur(timeout)
	}
	return v1alpha1.LoopSpec{Initial: "build", Context: map[string]apiextensionsv1.JSON{"version": jsonOf("v2")},
		States: map[string]v1alpha1.State{
			"build": {Action: "true", Next: "ask"},
			"ask":   ask,
			"ship":  {Action: "true", Next: "done"},
			"done":  {Terminal: true}, "stop": {Terminal: true, Failure: ptr.To(true)},
		}}
}

// waitAsking waits until the Loop waits for approval, and says so.
func waitAsking(key client.ObjectKey) *v1alpha1.Loop {
	var loop *v1alpha1.Loop
	Eventually(func(g Gomega) {
		loop = getLoop(g, key)
		g.Expect(loop.Status.Action).NotTo(BeNil())
		g.Expect(loop.Status.Action.Approval).NotTo(BeNil())
		c := condition(loop, v1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(v1alpha1.ReasonAwaitingApproval))
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	return loop
}

var _ = Describe("Approval states", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
	})

	It("waits for a person, holding no worker, and goes on when approved", func() {
		key := createLoop(ns, "approved", gated(0))
		loop := waitAsking(key)
		Expect(loop.Status.Action.Approval.Message).To(Equal("ship v2?"))
		Expect(condition(loop, v1alpha1.ReadyCondition).Message).To(ContainSubstring("ship v2?"))
		Consistently(func(g Gomega) { g.Expect(getLoop(g, key).Status.Phase).To(Equal(v1alpha1.PhaseRunning)) }, time.Second).Should(Succeed())
		setAnnotation(key, v1alpha1.ApprovalMessageAnnotation, "tests are green")
		requestOn(key, v1alpha1.ApprovalRequest(true, waitingFor(loop), "1"))
		loop = waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(loop.Status.CurrentState).To(Equal("done"))
		evs := loopEvents(loop)
		var answered *executor.Event
		for i := range evs {
			if evs[i].Type == executor.EventApprovalAnswered {
				answered = &evs[i]
			}
		}
		Expect(answered).NotTo(BeNil())
		Expect(executor.ApprovalAnsweredOf(*answered).Verdict).To(Equal(v1alpha1.VerdictApproved))
		Expect(executor.ApprovalAnsweredOf(*answered).Message).To(Equal("tests are green"))
		Expect(eventTypes(evs)).To(ContainElement(executor.EventApprovalRequested))
	})

	It("routes a rejection", func() {
		key := createLoop(ns, "rejected", gated(0))
		loop := waitAsking(key)
		requestOn(key, v1alpha1.ApprovalRequest(false, waitingFor(loop), "1"))
		loop = waitFinished(key)
		Expect(loop.Status.CurrentState).To(Equal("stop"))
		Expect(loop.Status.LastResult.Verdict).To(Equal(v1alpha1.VerdictRejected))
	})

	It("times out at the deadline, woken by no one", func() {
		key := createLoop(ns, "late", gated(2*time.Second))
		waitAsking(key)
		loop := waitFinished(key)
		Expect(loop.Status.CurrentState).To(Equal("stop"))
		Expect(loop.Status.LastResult.Verdict).To(Equal(v1alpha1.VerdictTimeout))
	})

	It("refuses an answer when no approval waits", func() {
		key := createLoop(ns, "unasked", v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "sleep 30", Next: "done"}, "done": {Terminal: true},
		}})
		Eventually(func(g Gomega) { g.Expect(getLoop(g, key).Status.Action).NotTo(BeNil()) }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		requestOn(key, v1alpha1.ApprovalRequest(true, v1alpha1.ApprovalTarget{RunID: "r", State: "wait", Iteration: 1}, "1"))
		Eventually(func() []string { return warningReasons(ns) }, 20*time.Second, 100*time.Millisecond).Should(ContainElement("NoApprovalWaiting"))
		Expect(getLoop(Default, key).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
		requestOn(key, "stop") // its action must not outlive the spec
		waitFinished(key)
	})

	It("bounds the Warning Events a stream of bad requests makes", func() {
		key := createLoop(ns, "spammed", gated(0))
		waitAsking(key)
		last := ""
		for i := range 15 {
			last = fmt.Sprintf("frobnicate-%d", i)
			requestOn(key, last)
		}
		Eventually(func(g Gomega) { g.Expect(getLoop(g, key).Status.LastRequest).To(Equal(last)) }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(len(eventNotes(g, ns, "InvalidRequest"))).To(BeNumerically("<=", requestEventBurst))
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(eventNotes(Default, ns, "InvalidRequest")).NotTo(BeEmpty())
	})

	It("takes an answer only for the approval it names: none, an earlier one or another run's is refused, and the Loop still waits", func() {
		key := createLoop(ns, "named", gated(0))
		loop := waitAsking(key)
		waiting := waitingFor(loop)
		stale := waiting
		stale.Iteration--
		otherRun := waiting
		otherRun.RunID = "an-earlier-run"
		otherState := waiting
		otherState.State = "ship"
		for i, req := range []string{"approve@1", "approve:x@2",
			v1alpha1.ApprovalRequest(true, stale, "3"), v1alpha1.ApprovalRequest(true, otherRun, "4"), v1alpha1.ApprovalRequest(true, otherState, "5")} {
			requestOn(key, req)
			Eventually(func(g Gomega) {
				g.Expect(getLoop(g, key).Status.LastRequest).To(Equal(req))
			}, 20*time.Second, 50*time.Millisecond).Should(Succeed(), "request %d", i)
			Expect(getLoop(Default, key).Status.Action.Approval).NotTo(BeNil(), "request %d answered the approval", i)
		}
		Eventually(func(g Gomega) {
			notes := eventNotes(g, ns, v1alpha1.EventReasonApprovalRefused)
			g.Expect(notes).To(ContainElement(ContainSubstring("approve names no approval")))
			g.Expect(notes).To(ContainElement(ContainSubstring("of run an-earlier-run, but the Loop waits in state ask")))
			g.Expect(notes).To(ContainElement(ContainSubstring("approve answers state ship at iteration")))
		}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(getLoop(Default, key).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
		requestOn(key, v1alpha1.ApprovalRequest(true, waiting, "6"))
		Expect(waitFinished(key).Status.CurrentState).To(Equal("done"))
	})
})

// waitingFor is the approval loop waits for, as an answer names it.
func waitingFor(loop *v1alpha1.Loop) v1alpha1.ApprovalTarget {
	return v1alpha1.ApprovalTarget{RunID: loop.Status.RunID, State: loop.Status.Action.State, Iteration: loop.Status.Action.Iteration}
}

func setAnnotation(key client.ObjectKey, k, v string) {
	loop := &v1alpha1.Loop{}
	Expect(k8sClient.Get(bg, key, loop)).To(Succeed())
	patch := client.MergeFrom(loop.DeepCopy())
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[k] = v
	Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())
}
