package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
)

var _ = Describe("Loop", func() {
	var (
		ns string
		op *operator
	)
	BeforeEach(func() {
		ns = newNamespace()
		op = startOperator(Config{SegmentBytes: 4096})
		DeferCleanup(func() { op.stop() })
	})

	It("runs fix-until-clean to completion", func() {
		key := createLoop(ns, "fix", fixUntilClean())
		loop := waitFinished(key)
		st := loop.Status
		Expect(st.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(st.CurrentState).To(Equal("done"))
		Expect(st.TerminatedBy).To(Equal(v1alpha1.TerminatedTerminal))
		Expect(st.Iteration).To(Equal(int32(5))) // check, fix, check, fix, check
		Expect(st.Captured).To(HaveKeyWithValue("check", HaveField("Verdict", "success")))
		Expect(st.LastResult).NotTo(BeNil())
		Expect(st.LastResult.Verdict).To(Equal("success"))
		Expect(st.Action).To(BeNil())
		Expect(condition(loop, v1alpha1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
		Expect(condition(loop, v1alpha1.ReadyCondition).Reason).To(Equal(v1alpha1.ReasonCompleted))
		Expect(condition(loop, v1alpha1.ReconcilingCondition)).To(BeNil())
		Expect(condition(loop, v1alpha1.StalledCondition)).To(BeNil())

		evs := loopEvents(loop)
		types := eventTypes(evs)
		Expect(types[0]).To(Equal(executor.EventLoopStart))
		Expect(types[len(types)-1]).To(Equal(executor.EventLoopComplete))
		Expect(strings.Count(strings.Join(types, ","), executor.EventStateEnter)).To(Equal(5))

		var k8sEvents eventsv1.EventList
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.List(bg, &k8sEvents, client.InNamespace(ns))).To(Succeed())
			reasons := []string{}
			for _, e := range k8sEvents.Items {
				reasons = append(reasons, e.Reason)
			}
			g.Expect(reasons).To(ContainElements("Started", "Completed"))
		}).Should(Succeed())
	})

	It("keeps the event log in segments, every event once and in order", func() {
		spec := v1alpha1.LoopSpec{Initial: "spin", MaxIterations: i32(40), MaxEdgeRevisits: i32(100), States: map[string]v1alpha1.State{
			"spin": {Action: "echo spinning", OnSuccess: "$current"},
			"done": {Terminal: true},
		}}
		loop := waitFinished(createLoop(ns, "segments", spec))
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedMaxIterations))
		log := loop.Status.EventLog
		Expect(log).NotTo(BeNil())
		Expect(log.LastSegment).To(BeNumerically(">", 3), "a 4 KiB cap must have split the log")
		Expect(log.Count).To(Equal(loop.Status.LastSeq))
		evs := loopEvents(loop)
		Expect(evs).To(HaveLen(int(log.LastSeq)))
		for n := log.FirstSegment; n <= log.LastSegment; n++ {
			cm := &corev1.ConfigMap{}
			Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: configmaps.SegmentName("segments", n)}, cm)).To(Succeed())
			Expect(len(cm.Data[configmaps.EventsKey])).To(BeNumerically("<=", 4096+2048))
			// Deleting the Loop deletes its segments: they are owned by it.
			Expect(cm.OwnerReferences).To(ContainElement(And(
				HaveField("Kind", "Loop"), HaveField("Name", "segments"), HaveField("UID", loop.UID), HaveField("Controller", HaveValue(BeTrue())))))
		}
	})

	It("stops at maxIterations", func() {
		spec := v1alpha1.LoopSpec{Initial: "a", MaxIterations: i32(3), States: map[string]v1alpha1.State{
			"a":    {Action: "exit 1", OnFailure: "a", OnSuccess: "done"},
			"done": {Terminal: true},
		}}
		loop := waitFinished(createLoop(ns, "capped", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseInterrupted))
		Expect(loop.Status.Iteration).To(Equal(int32(3)))
		Expect(condition(loop, v1alpha1.ReadyCondition).Status).To(Equal(metav1.ConditionFalse))
		Expect(condition(loop, v1alpha1.StalledCondition).Reason).To(Equal(v1alpha1.ReasonMaxIterations))
	})

	It("ends at the loop timeout", func() {
		spec := v1alpha1.LoopSpec{Initial: "slow", Timeout: dur(time.Second), States: map[string]v1alpha1.State{
			"slow": {Action: "sleep 0.6", Next: "slow"},
			"done": {Terminal: true},
		}}
		loop := waitFinished(createLoop(ns, "slow", spec))
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedTimeout))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(condition(loop, v1alpha1.ReadyCondition).Reason).To(Equal(v1alpha1.ReasonTimeout))
	})

	It("restarts in maintain mode until a limit", func() {
		spec := v1alpha1.LoopSpec{Initial: "check", Maintain: true, MaxIterations: i32(6), States: map[string]v1alpha1.State{
			"check":   {Action: "test -f ok || { touch ok; exit 1; }", OnSuccess: "healthy", OnFailure: "check"},
			"healthy": {Terminal: true, OnMaintain: "check"},
		}}
		loop := waitFinished(createLoop(ns, "keeper", spec))
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedMaxIterations))
		Expect(loop.Status.Passes).To(BeNumerically(">=", 2))
		maintain := 0
		for _, e := range loopEvents(loop) {
			if e.Type == executor.EventRoute && executor.RouteOf(e).Reason == "maintain" {
				maintain++
			}
		}
		Expect(maintain).To(Equal(int(loop.Status.Passes)))
	})

	It("holds a suspended loop between states and goes on when resumed", func() {
		spec := fixUntilClean()
		spec.Suspend = true
		key := createLoop(ns, "held", spec)
		Eventually(func(g Gomega) {
			loop := getLoop(g, key)
			g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
			g.Expect(condition(loop, v1alpha1.ReadyCondition)).To(HaveField("Reason", v1alpha1.ReasonSuspended))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Iteration).To(BeZero())
		}, "500ms").Should(Succeed())

		loop := getLoop(Default, key)
		patch := client.MergeFrom(loop.DeepCopy())
		loop.Spec.Suspend = false
		Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())
		loop = waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(eventTypes(loopEvents(loop))).To(ContainElement(executor.EventSpecChanged))
	})

	It("keeps the status small whatever the action prints", func() {
		spec := v1alpha1.LoopSpec{Initial: "loud", States: map[string]v1alpha1.State{
			"loud": {Action: "head -c 10485760 /dev/zero | tr '\\0' x; head -c 1048576 /dev/zero | tr '\\0' y >&2", Capture: "loud", Next: "done"},
			"done": {Terminal: true},
		}}
		loop := waitFinished(createLoop(ns, "loud", spec))
		raw, err := json.Marshal(loop.Status)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(raw)).To(BeNumerically("<", 64<<10), "status of %d bytes", len(raw))
		Expect(loop.Status.Captured["loud"].Output).To(HaveLen(executor.DefaultMaxCaptureBytes))
		var segments int64
		for _, e := range loopEvents(loop) {
			b, _ := json.Marshal(e)
			segments += int64(len(b))
		}
		Expect(segments).To(BeNumerically("<", 64<<10), "event log of %d bytes", segments)
	})

	It("deletes a finished Loop after ttlSecondsAfterFinished", func() {
		spec := fixUntilClean()
		spec.TTLSecondsAfterFinished = i32(1)
		key := createLoop(ns, "short-lived", spec)
		Eventually(func() bool {
			err := k8sClient.Get(bg, key, &v1alpha1.Loop{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, 100*time.Millisecond).Should(BeTrue())
	})

	It("marks an old invalid Loop Stalled, names the state and field, and does not retry it", func() {
		spec := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			// Valid for the CRD schema, but the template is not.
			"a":    {Action: "echo ${context.x:-y}", Next: "done"},
			"done": {Terminal: true},
		}}
		key := createLoop(ns, "broken", spec)
		var loop *v1alpha1.Loop
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			stalled := condition(loop, v1alpha1.StalledCondition)
			g.Expect(stalled).NotTo(BeNil())
			g.Expect(stalled.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
			g.Expect(stalled.Message).To(ContainSubstring("spec.states[a].action"))
			g.Expect(stalled.Message).To(ContainSubstring("bash-style default"))
			g.Expect(loop.Status.ObservedGeneration).To(Equal(loop.Generation))
		}).Should(Succeed())
		expectConditionInvariants(loop)
		Expect(condition(loop, v1alpha1.ReadyCondition).Status).To(Equal(metav1.ConditionFalse))
		rv := loop.ResourceVersion
		Consistently(func(g Gomega) {
			g.Expect(getLoop(g, key).ResourceVersion).To(Equal(rv), "a stalled Loop is not reconciled again and again")
		}, "1s").Should(Succeed())
	})
})

var _ = Describe("Loop validation at apply", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("rejects a broken loop with a message naming the problem",
		func(mutate func(*v1alpha1.LoopSpec), want string) {
			spec := fixUntilClean()
			mutate(&spec)
			loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: spec}
			err := k8sClient.Create(bg, loop)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("initial names no state", func(s *v1alpha1.LoopSpec) { s.Initial = "start" }, "initial start is not a state (initial must name a state)"),
		Entry("no terminal state", func(s *v1alpha1.LoopSpec) {
			delete(s.States, "done")
			st := s.States["check"]
			st.OnSuccess = "fix"
			s.States["check"] = st
		}, "at least one state must be terminal"),
		Entry("a state without a way out", func(s *v1alpha1.LoopSpec) {
			s.States["stuck"] = v1alpha1.State{Action: "true"}
		}, "spec.states[stuck]: Invalid value: a state that is not terminal needs a way out"),
		Entry("next names no state", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "true", Next: "chek"}
		}, "state fix: next chek is not a state"),
		Entry("onFailure names no state", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.OnFailure = "repair"
			s.States["check"] = st
		}, "state check: onFailure repair is not a state"),
		Entry("a route target names no state", func(s *v1alpha1.LoopSpec) {
			s.States["check"] = v1alpha1.State{Action: "true", Route: map[string]v1alpha1.StateName{"success": "done", "_": "nowhere"}}
		}, "state check: a route target is not a state"),
		Entry("an approval state with an action", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "true", Approval: &v1alpha1.Approval{Message: "ok?"}, OnSuccess: "check"}
		}, "spec.states[fix]: Invalid value: an approval state waits for a person"),
		Entry("next is $current", func(s *v1alpha1.LoopSpec) {
			s.States["fix"] = v1alpha1.State{Action: "true", Next: "$current"}
		}, "spec.states[fix]: Invalid value: next cannot be $current"),
		Entry("maxRetries without onRetryExhausted", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.MaxRetries = i32(2)
			s.States["check"] = st
		}, "spec.states[check]: Invalid value: maxRetries needs onRetryExhausted"),
		Entry("onRetryExhausted without maxRetries or retryPolicy", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.OnRetryExhausted = "done"
			s.States["check"] = st
		}, "spec.states[check]: Invalid value: onRetryExhausted needs maxRetries or retryPolicy"),
		Entry("a retry policy without a limit", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.RetryPolicy = &v1alpha1.RetryPolicy{Factor: i32(20)}
			s.States["check"] = st
		}, "spec.states.check.retryPolicy.factor: Invalid value: 20: spec.states.check.retryPolicy.factor in body should be less than or equal to 10"),
		Entry("an unknown evaluator", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.Evaluate = &v1alpha1.Evaluate{Type: "comparator"}
			s.States["check"] = st
		}, "spec.states.check.evaluate.type: Unsupported value: \"comparator\""),
		Entry("more states than a Loop holds", func(s *v1alpha1.LoopSpec) {
			for i := range 130 {
				s.States[fmt.Sprintf("s%d", i)] = v1alpha1.State{Action: "true", Next: "done"}
			}
		}, "spec.states: Too many: 133: must have at most 128 items"),
		Entry("params without an mcp action", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.Params = &apiextensionsv1.JSON{Raw: []byte(`{"path": "x"}`)}
			s.States["check"] = st
		}, "spec.states[check]: Invalid value: params are the arguments of an MCP tool: they need actionType mcp"),
		Entry("a learning state with an action", func(s *v1alpha1.LoopSpec) {
			st := s.States["check"]
			st.Learning = &v1alpha1.LearningSpec{Targets: []string{"an SDK"}}
			s.States["check"] = st
		}, "spec.states[check]: Invalid value: a learning state runs its gate: it has no action and no loop"),
		Entry("learning targets given twice", func(s *v1alpha1.LoopSpec) {
			s.States["gate"] = v1alpha1.State{Learning: &v1alpha1.LearningSpec{Targets: []string{"x"}, TargetsCSV: "y"}, OnSuccess: "done"}
		}, "set targets or targetsCSV, not both"),
	)

	It("accepts a loop of 128 states, mcp and learning states among them", func() {
		spec := fixUntilClean()
		for i := len(spec.States); i < 126; i++ {
			spec.States[fmt.Sprintf("s%d", i)] = v1alpha1.State{Action: "true", Next: "done"}
		}
		spec.States["call"] = v1alpha1.State{Action: "files/read", ActionType: v1alpha1.ActionMCP,
			Params: &apiextensionsv1.JSON{Raw: []byte(`{"path": "${context.file}"}`)}, Route: map[string]v1alpha1.StateName{"success": "done"}}
		spec.States["gate"] = v1alpha1.State{Learning: &v1alpha1.LearningSpec{TargetsCSV: "${context.sdks}"}, OnSuccess: "done"}
		Expect(spec.States).To(HaveLen(128))
		Expect(k8sClient.Create(bg, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"}, Spec: spec})).To(Succeed())
	})

	It("accepts $current as a target", func() {
		spec := fixUntilClean()
		st := spec.States["check"]
		st.OnFailure = "$current"
		spec.States["check"] = st
		delete(spec.States, "fix")
		Expect(k8sClient.Create(bg, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "self"}, Spec: spec})).To(Succeed())
	})
})

var _ = Describe("An operator restart", func() {
	It("finishes the loop as an undisturbed run does, iterations continuous, no event twice", func() {
		// Each iteration writes its own file, so an action cut off and run
		// again leaves the same trace.
		spec := v1alpha1.LoopSpec{Initial: "step", MaxIterations: i32(20), MaxEdgeRevisits: i32(100), States: map[string]v1alpha1.State{
			"step": {Action: "touch trace.${state.iteration}; sleep 0.2; test $(ls trace.* | wc -l) -ge 8", Capture: "step",
				OnSuccess: "done", OnFailure: "$current"},
			"done": {Terminal: true},
		}}
		workdir := GinkgoT().TempDir()
		op := startOperator(Config{LocalWorkdir: workdir})
		calm := createLoop(newNamespace(), "undisturbed", spec)
		key := createLoop(newNamespace(), "restarted", spec)
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Iteration).To(BeNumerically(">=", 3))
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
		op.stop()
		stoppedAt := getLoop(Default, key).Status.Iteration

		op2 := startOperator(Config{LocalWorkdir: workdir})
		DeferCleanup(func() { op2.stop() })
		want := waitFinished(calm).Status
		got := waitFinished(key).Status
		Expect(got.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(got.CurrentState).To(Equal(want.CurrentState))
		Expect(got.Iteration).To(Equal(want.Iteration))
		Expect(got.TerminatedBy).To(Equal(want.TerminatedBy))
		Expect(got.LastResult.Verdict).To(Equal(want.LastResult.Verdict))
		Expect(got.Captured["step"].ExitCode).To(Equal(want.Captured["step"].ExitCode))

		loop := getLoop(Default, key)
		var iterations []int64
		for _, e := range loopEvents(loop) {
			if e.Type == executor.EventStateEnter {
				iterations = append(iterations, int64(executor.StateEnterOf(e).Iteration))
			}
		}
		for i, n := range iterations {
			Expect(n).To(Equal(int64(i+1)), "iterations must be continuous: %v", iterations)
		}
		Expect(int64(got.Iteration)).To(Equal(int64(len(iterations))))
		fmt.Fprintf(GinkgoWriter, "stopped at iteration %d, finished at %d\n", stoppedAt, got.Iteration)
	})
})
