package controllers

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

var _ = Describe("A Loop's budget", func() {
	It("pauses the Loop when spent, says so, and goes on when raised, every action once", func() {
		agent := startPricedOperator() // 400 micro-dollars a call

		ns := newNamespace()
		key := createLoop(ns, "spender", v1alpha1.LoopSpec{Initial: "work", MaxIterations: i32(12),
			Agent:  &v1alpha1.AgentSpec{Command: []string{agent}},
			Budget: &v1alpha1.Budget{MaxCostUSD: "0.0008"},
			States: map[string]v1alpha1.State{
				"work":  {Action: "work on it", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "check"},
				"check": {Action: "true", Next: "work"},
				"done":  {Terminal: true},
			}})
		var loop *v1alpha1.Loop
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhasePaused))
		}, "60s").Should(Succeed())
		Expect(loop.Status.Usage.Calls).To(Equal(int64(2)))
		Expect(loop.Status.CurrentState).To(Equal("work"))
		ready := condition(loop, v1alpha1.ReadyCondition)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(v1alpha1.ReasonBudgetExceeded))
		Expect(ready.Message).To(ContainSubstring("spent $0.0008 of its $0.0008 budget"))
		Expect(condition(loop, v1alpha1.ReconcilingCondition)).To(BeNil())
		Expect(condition(loop, v1alpha1.StalledCondition)).To(BeNil())
		// kstatus reads it as a suspended Loop: in progress, not failed.
		Expect(kstatusOf(Default, key)).To(Equal(status.InProgressStatus))
		Eventually(func(g Gomega) {
			g.Expect(eventNotes(g, ns, "BudgetExceeded")).To(ContainElement(ContainSubstring("$0.0008 of $0.0008")))
		}, "30s").Should(Succeed())
		// Paused holds: nothing more runs.
		Consistently(func(g Gomega) { g.Expect(getLoop(g, key).Status.Usage.Calls).To(Equal(int64(2))) }, "2s").Should(Succeed())

		// Raised (as looprun budget --add does): it goes on, then pauses again.
		patch := client.MergeFrom(loop.DeepCopy())
		loop.Spec.Budget.MaxCostUSD = "0.0016"
		Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhasePaused))
			g.Expect(loop.Status.Usage.Calls).To(Equal(int64(4)))
		}, "60s").Should(Succeed())
		// Raised past maxIterations: it ends at the cap.
		patch = client.MergeFrom(loop.DeepCopy())
		loop.Spec.Budget.MaxCostUSD = "1"
		Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())
		loop = waitFinished(key)
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedMaxIterations))

		types := strings.Join(eventTypes(loopEvents(loop)), ",")
		Expect(strings.Count(types, executor.EventActionStart)).To(Equal(12))
		Expect(strings.Count(types, executor.EventActionComplete)).To(Equal(12))
		Expect(strings.Count(types, executor.EventBudgetExceeded)).To(Equal(2))
		Expect(strings.Count(types, executor.EventBudgetResumed)).To(Equal(2))
		Expect(loop.Status.Usage.Calls).To(Equal(int64(6)))
	})
})

var _ = Describe("A sub-loop under a budget", func() {
	It("spends from its parent's budget: the child gets what is left, its pause holds the parent, its spend joins the parent's", func() {
		agent := startPricedOperator() // 400 micro-dollars a call

		ns := newNamespace()
		createTemplate(ns, "worker", v1alpha1.LoopSpec{Initial: "a", Agent: &v1alpha1.AgentSpec{Command: []string{agent}},
			States: map[string]v1alpha1.State{
				"a":    {Action: "first", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "b"},
				"b":    {Action: "second", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "done"},
				"done": {Terminal: true},
			}}, nil)
		key := createLoop(ns, "boss", v1alpha1.LoopSpec{Initial: "delegate", Budget: &v1alpha1.Budget{MaxCostUSD: "0.0003"},
			States: map[string]v1alpha1.State{
				"delegate": {Loop: "worker", OnSuccess: "done", OnFailure: "failed", OnError: "failed"},
				"done":     {Terminal: true},
				"failed":   {Terminal: true},
			}})
		var child v1alpha1.Loop
		Eventually(func(g Gomega) {
			kids := childrenOf(g, ns, "boss")
			g.Expect(kids).To(HaveLen(1))
			child = kids[0]
			g.Expect(child.Status.Phase).To(Equal(v1alpha1.PhasePaused))
			loop := getLoop(g, key)
			g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhasePaused))
			ready := condition(loop, v1alpha1.ReadyCondition)
			g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonBudgetExceeded))
			g.Expect(ready.Message).To(ContainSubstring("the sub-loop " + child.Name + " of state delegate paused: the run spent $0.0004 of its $0.0003 budget before state b"))
		}, "60s").Should(Succeed())
		Expect(child.Spec.Budget.MaxCostUSD).To(Equal("0.0003"), "the child's budget is what its parent had left")

		// Raised on the child (looprun budget loop/CHILD): both go on.
		patch := client.MergeFrom(child.DeepCopy())
		child.Spec.Budget.MaxCostUSD = "1"
		Expect(k8sClient.Patch(bg, &child, patch)).To(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(loop.Status.Usage.Calls).To(Equal(int64(2)))
		Expect(loop.Status.Usage.CostMicroUSD).To(Equal(int64(800)))
		Expect(loop.Status.Usage.States).To(HaveKey("delegate"))
		types := strings.Join(eventTypes(loopEvents(loop)), ",")
		Expect(strings.Count(types, executor.EventBudgetExceeded)).To(Equal(1))
		Expect(strings.Count(types, executor.EventBudgetResumed)).To(Equal(1))
	})
})
