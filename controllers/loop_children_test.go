package controllers

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

func createTemplate(ns, name string, spec v1alpha1.LoopSpec, params map[string]v1alpha1.Parameter) {
	t := &v1alpha1.LoopTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LoopTemplateSpec{LoopSpec: spec, Parameters: params}}
	Expect(k8sClient.Create(bg, t)).To(Succeed())
}

func childrenOf(g Gomega, ns, parent string) []v1alpha1.Loop {
	var list v1alpha1.LoopList
	g.Expect(k8sClient.List(bg, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelParent: parent})).To(Succeed())
	return list.Items
}

func jsonOf(v any) apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return apiextensionsv1.JSON{Raw: b}
}

var _ = Describe("Sub-loops", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("runs two sub-loops as child Loops and routes on how each ended", func() {
		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		createTemplate(ns, "greet", v1alpha1.LoopSpec{Initial: "say", States: map[string]v1alpha1.State{
			"say":  {Action: "echo hello ${context.who}", Capture: "greeting", OnSuccess: "done"},
			"done": {Terminal: true},
		}}, map[string]v1alpha1.Parameter{"who": {Required: true}})
		createTemplate(ns, "fail", v1alpha1.LoopSpec{Initial: "try", States: map[string]v1alpha1.State{
			"try":    {Action: "exit 1", OnSuccess: "done", OnFailure: "failed"},
			"done":   {Terminal: true},
			"failed": {Terminal: true},
		}}, nil)
		key := createLoop(ns, "parent", v1alpha1.LoopSpec{Initial: "hello", States: map[string]v1alpha1.State{
			"hello":   {Loop: "greet", With: map[string]apiextensionsv1.JSON{"who": jsonOf("${context.name}")}, OnSuccess: "attempt", OnFailure: "broken"},
			"attempt": {Loop: "fail", OnSuccess: "broken", OnFailure: "recover"},
			"recover": {Action: "echo '${captured.hello.greeting.output}' ${captured.attempt.terminated_by}", Capture: "said", Next: "done"},
			"done":    {Terminal: true},
			"broken":  {Terminal: true, Failure: new(true)},
		}, Context: map[string]apiextensionsv1.JSON{"name": jsonOf("world")}})

		parent := waitFinished(key)
		Expect(parent.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), parent.Status.Message)
		Expect(parent.Status.Captured["said"].Output).To(Equal("hello world terminal"))
		children := childrenOf(Default, ns, "parent")
		Expect(children).To(HaveLen(2))
		for _, c := range children {
			Expect(metav1.IsControlledBy(&c, parent)).To(BeTrue(), "child %s is controlled by its parent", c.Name)
			Expect(c.Labels[v1alpha1.LabelTemplate]).To(BeElementOf("greet", "fail"))
			Expect(c.Status.Phase.IsFinished()).To(BeTrue())
		}
		var types []string
		for _, e := range loopEvents(parent) {
			if e.Type == executor.EventSubLoopComplete {
				c := executor.SubLoopCompleteOf(e)
				types = append(types, c.Loop+":"+c.Verdict)
			}
		}
		Expect(types).To(Equal([]string{"greet:success", "fail:failure"}))
	})

	It("creates each child once across a manager restart, and waits on it without polling", func() {
		op := startOperator(Config{})
		createTemplate(ns, "slow", v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "sleep 2", Next: "done"},
			"done": {Terminal: true},
		}}, nil)
		key := createLoop(ns, "waiter", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":  {Loop: "slow", OnSuccess: "done"},
			"done": {Terminal: true},
		}})
		var first v1alpha1.Loop
		Eventually(func(g Gomega) {
			cs := childrenOf(g, ns, "waiter")
			g.Expect(cs).To(HaveLen(1))
			g.Expect(cs[0].Status.Action).NotTo(BeNil(), "the child's action runs")
			first = cs[0]
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
		parent := getLoop(Default, key)
		Expect(parent.Status.Action).NotTo(BeNil())
		Expect(parent.Status.Action.Child).To(Equal(first.Name), "the parent's status points at its child")
		op.stop()

		op = startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		parent = waitFinished(key)
		Expect(parent.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), parent.Status.Message)
		cs := childrenOf(Default, ns, "waiter")
		Expect(cs).To(HaveLen(1))
		Expect(cs[0].UID).To(Equal(first.UID), "the child was not created again")
	})

	It("ends the state in error when its running child is deleted, and never runs it again", func() {
		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		createTemplate(ns, "long", v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "sleep 30", Next: "done"},
			"done": {Terminal: true},
		}}, nil)
		key := createLoop(ns, "orphaned", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":    {Loop: "long", OnSuccess: "done", OnError: "failed"},
			"done":   {Terminal: true},
			"failed": {Terminal: true, Failure: new(true)},
		}})
		var first v1alpha1.Loop
		Eventually(func(g Gomega) {
			cs := childrenOf(g, ns, "orphaned")
			g.Expect(cs).To(HaveLen(1))
			g.Expect(cs[0].Status.Action).NotTo(BeNil(), "the child's action runs")
			first = cs[0]
			g.Expect(getLoop(g, key).Status.Action.ChildUID).To(Equal(string(first.UID)), "the parent recorded its child")
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
		Expect(k8sClient.Delete(bg, &first)).To(Succeed())

		parent := waitFinished(key)
		Expect(parent.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(parent.Status.CurrentState).To(Equal("failed"))
		var said []string
		for _, e := range loopEvents(parent) {
			if e.Type == executor.EventSubLoopComplete {
				said = append(said, executor.SubLoopCompleteOf(e).Error)
			}
		}
		Expect(said).To(ConsistOf(ContainSubstring("was deleted before it ended")))
		Consistently(func(g Gomega) {
			for _, c := range childrenOf(g, ns, "orphaned") {
				g.Expect(c.UID).To(Equal(first.UID), "no child was made again")
			}
		}, time.Second, 100*time.Millisecond).Should(Succeed())
	})

	It("keeps only the newest finished children (spec.history.keepChildren)", func() {
		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		createTemplate(ns, "tick", v1alpha1.LoopSpec{Initial: "t", States: map[string]v1alpha1.State{
			"t":    {Action: "true", Next: "done"},
			"done": {Terminal: true},
		}}, nil)
		key := createLoop(ns, "maintainer", v1alpha1.LoopSpec{Initial: "count", MaxIterations: i32(100),
			History: &v1alpha1.HistorySpec{KeepChildren: i32(2)},
			States: map[string]v1alpha1.State{
				"count": {Action: "echo x >> n; test $(wc -l < n) -ge 6", OnSuccess: "done", OnFailure: "run"},
				"run":   {Loop: "tick", OnSuccess: "count"},
				"done":  {Terminal: true},
			}})
		parent := waitFinished(key)
		Expect(parent.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), parent.Status.Message)
		Expect(parent.Status.Iteration).To(BeNumerically(">=", 11), "five sub-loops ran")
		Eventually(func(g Gomega) {
			g.Expect(childrenOf(g, ns, "maintainer")).To(HaveLen(2))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	})

	It("passes suspend and stop on to the child", func() {
		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		createTemplate(ns, "spin", v1alpha1.LoopSpec{Initial: "s", MaxIterations: i32(10000), MaxEdgeRevisits: i32(10000), States: map[string]v1alpha1.State{
			"s":    {Action: "sleep 0.05", OnSuccess: "$current"},
			"done": {Terminal: true},
		}}, nil)
		key := createLoop(ns, "boss", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":  {Loop: "spin", OnSuccess: "done", OnFailure: "done"},
			"done": {Terminal: true},
		}})
		var child client.ObjectKey
		Eventually(func(g Gomega) {
			cs := childrenOf(g, ns, "boss")
			g.Expect(cs).To(HaveLen(1))
			child = client.ObjectKeyFromObject(&cs[0])
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())

		parent := getLoop(Default, key)
		patch := client.MergeFrom(parent.DeepCopy())
		parent.Spec.Suspend = true
		Expect(k8sClient.Patch(bg, parent, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, child).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
			g.Expect(getLoop(g, key).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())

		parent = getLoop(Default, key)
		patch = client.MergeFrom(parent.DeepCopy())
		parent.Spec.Suspend = false
		parent.Annotations = map[string]string{v1alpha1.RequestAnnotation: v1alpha1.StopRequest("1")}
		Expect(k8sClient.Patch(bg, parent, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			c := getLoop(g, child)
			g.Expect(c.Status.Phase).To(Equal(v1alpha1.PhaseInterrupted))
			g.Expect(c.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedStopped))
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
		parent = waitFinished(key)
		Expect(parent.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedStopped))
	})

	It("reaches a child its parent's status does not name yet (its status write was lost)", func() {
		spin := v1alpha1.LoopSpec{Initial: "s", MaxIterations: i32(10000), MaxEdgeRevisits: i32(10000), States: map[string]v1alpha1.State{
			"s":    {Action: "sleep 0.05", OnSuccess: "$current"},
			"done": {Terminal: true},
		}}
		createTemplate(ns, "spin", spin, nil)
		parent := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost"}, Spec: v1alpha1.LoopSpec{
			Suspend: true, Initial: "run", States: map[string]v1alpha1.State{
				"run":  {Loop: "spin", OnSuccess: "done", OnFailure: "done"},
				"done": {Terminal: true},
			}}}
		Expect(k8sClient.Create(bg, parent)).To(Succeed())
		// The step that created this child lost its status write to the
		// edit that suspended the parent: the parent's status is empty.
		child := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns,
			Name:   executor.ChildName("lost", string(parent.UID)[:8], "run", 1),
			Labels: map[string]string{v1alpha1.LabelParent: "lost"}}, Spec: spin}
		Expect(controllerutil.SetControllerReference(parent, child, scheme)).To(Succeed())
		Expect(k8sClient.Create(bg, child)).To(Succeed())

		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		key, childKey := client.ObjectKeyFromObject(parent), client.ObjectKeyFromObject(child)
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
			g.Expect(getLoop(g, childKey).Spec.Suspend).To(BeTrue(), "the suspend reached the child")
			g.Expect(getLoop(g, childKey).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())

		p := getLoop(Default, key)
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations = map[string]string{v1alpha1.RequestAnnotation: v1alpha1.StopRequest("1")}
		Expect(k8sClient.Patch(bg, p, patch)).To(Succeed())
		Expect(waitFinished(key).Status.TerminatedBy).To(Equal(v1alpha1.TerminatedStopped))
		Eventually(func(g Gomega) {
			c := getLoop(g, childKey)
			g.Expect(c.Status.Phase).To(Equal(v1alpha1.PhaseInterrupted))
			g.Expect(c.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedStopped), "the stop reached the child")
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
		Expect(childrenOf(Default, ns, "lost")).To(HaveLen(1), "no second child")
	})

	It("ends the state in error for a missing template and for a cycle", func() {
		op := startOperator(Config{})
		DeferCleanup(func() { op.stop() })
		missing := waitFinished(createLoop(ns, "lost", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":  {Loop: "nowhere", OnSuccess: "done"},
			"done": {Terminal: true},
		}}))
		Expect(missing.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(missing.Status.Message).To(ContainSubstring(`no LoopTemplate "nowhere"`))

		createTemplate(ns, "ouro", v1alpha1.LoopSpec{Initial: "again", States: map[string]v1alpha1.State{
			"again": {Loop: "ouro", OnSuccess: "done", OnError: "cycle"},
			"done":  {Terminal: true},
			"cycle": {Terminal: true, Failure: new(true)},
		}}, nil)
		root := waitFinished(createLoop(ns, "root", v1alpha1.LoopSpec{Initial: "go", States: map[string]v1alpha1.State{
			"go":   {Loop: "ouro", OnSuccess: "done", OnFailure: "failed"},
			"done": {Terminal: true}, "failed": {Terminal: true},
		}}))
		// root runs ouro, which runs ouro: the second is refused, the
		// first routes to its failure state cycle, root to failed.
		Expect(root.Status.CurrentState).To(Equal("failed"))
		cs := childrenOf(Default, ns, "root")
		Expect(cs).To(HaveLen(1))
		Expect(cs[0].Status.CurrentState).To(Equal("cycle"))
		var errs []string
		for _, e := range loopEvents(&cs[0]) {
			if e.Type == executor.EventActionError {
				errs = append(errs, executor.ActionErrorOf(e).Error)
			}
		}
		Expect(errs).To(ContainElement(ContainSubstring("LoopTemplate ouro is already running above this Loop")))
	})
})
