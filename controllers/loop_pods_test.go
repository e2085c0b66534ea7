package controllers

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/pod"
)

// withWorkspace runs a spec's actions as Pods sharing a claim the operator creates.
func withWorkspace(spec v1alpha1.LoopSpec) v1alpha1.LoopSpec {
	spec.Runner = &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{VolumeClaimTemplate: &corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}}
	return spec
}

// claimDir is where the test kubelet keeps a claim's files.
func claimDir(ns, claim string) string {
	return filepath.Join(testKubelet.Dir, "claims", ns, claim)
}

func loopPods(ns, loop string) []corev1.Pod {
	list := &corev1.PodList{}
	Expect(k8sClient.List(bg, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelLoop: loop})).To(Succeed())
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

// normalEvents is an event log without its times and durations, for comparing runs.
func normalEvents(evs []executor.Event) []map[string]any {
	out := make([]map[string]any, len(evs))
	for i, e := range evs {
		m := map[string]any{"event": e.Type, "seq": e.Seq}
		for k, v := range e.Data {
			if k != "duration_ms" {
				m[k] = v
			}
		}
		out[i] = m
	}
	return out
}

// normalStatus is a run's outcome without times and durations.
func normalStatus(loop *v1alpha1.Loop) v1alpha1.RunState {
	run := *loop.Status.RunState.DeepCopy()
	run.RunID, run.StartedAt, run.UpdatedAt, run.AccumulatedMs = "", nil, nil, 0
	for k, c := range run.Captured {
		c.DurationMs = 0
		run.Captured[k] = c
	}
	return run
}

var _ = Describe("Actions as Pods", func() {
	It("runs fix-until-clean through Pods with the local runner's status and events", func() {
		spec := withWorkspace(fixUntilClean())
		spec.History = &v1alpha1.HistorySpec{KeepPods: i32(2)}

		localNS := newNamespace()
		op := startOperator(Config{})
		want := waitFinished(createLoop(localNS, "fix", spec))
		op.stop()

		ns := newNamespace()
		op = startPodOperator(Config{})
		DeferCleanup(func() { op.stop() })
		got := waitFinished(createLoop(ns, "fix", spec))

		Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(normalStatus(got)).To(Equal(normalStatus(want)))
		Expect(normalEvents(loopEvents(got))).To(Equal(normalEvents(loopEvents(want))))

		// The steps shared the workspace: fix wrote twice, check read it.
		data, err := os.ReadFile(filepath.Join(claimDir(ns, pod.WorkspaceClaim("fix")), "fixes"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(Equal("fixed\nfixed\n"))
		pvc := &corev1.PersistentVolumeClaim{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: "fix-workspace"}, pvc)).To(Succeed())
		Expect(metav1.GetControllerOf(pvc).UID).To(Equal(got.UID))

		// Only the newest keepPods Pods are left, owned and labelled.
		Eventually(func() []corev1.Pod { return loopPods(ns, "fix") }).Should(HaveLen(2))
		for _, p := range loopPods(ns, "fix") {
			Expect(metav1.GetControllerOf(&p).UID).To(Equal(got.UID))
			Expect(p.Labels).To(HaveKeyWithValue(v1alpha1.LabelRun, got.Status.RunID))
			Expect(p.Labels[v1alpha1.LabelIteration]).To(BeElementOf("4", "5"))
			Expect(*p.Spec.AutomountServiceAccountToken).To(BeFalse())
		}
	})

	Context("with a pod operator", func() {
		var (
			ns string
			op *operator
		)
		BeforeEach(func() {
			ns = newNamespace()
			op = startPodOperator(Config{Pods: pod.Options{StartAllowance: 2 * time.Second}})
			DeferCleanup(func() { op.stop() })
		})

		It("times an action out with exit code 124", func() {
			spec := v1alpha1.LoopSpec{Initial: "slow", States: map[string]v1alpha1.State{
				"slow":     {Action: "echo started; sleep 30", Timeout: dur(time.Second), Capture: "slow", OnSuccess: "done", OnError: "timedout"},
				"done":     {Terminal: true},
				"timedout": {Terminal: true, Failure: new(true)},
			}}
			loop := waitFinished(createLoop(ns, "slow", spec))
			Expect(loop.Status.CurrentState).To(Equal("timedout"))
			Expect(loop.Status.Captured["slow"].ExitCode).To(Equal(int32(124)), string(loop.Status.LastResult.Details.Raw))
			Expect(loop.Status.Captured["slow"].Output).To(Equal("started"))
			Expect(loop.Status.Captured["slow"].DurationMs).To(BeNumerically("<", 10000))
		})

		It("gives an error verdict when the Pod is deleted mid-step", func() {
			spec := v1alpha1.LoopSpec{Initial: "long", States: map[string]v1alpha1.State{
				"long":      {Action: "sleep 60", OnSuccess: "done", OnError: "recovered"},
				"done":      {Terminal: true},
				"recovered": {Terminal: true},
			}}
			key := createLoop(ns, "deleted", spec)
			var name string
			Eventually(func(g Gomega) {
				loop := getLoop(g, key)
				g.Expect(loop.Status.Action).NotTo(BeNil())
				name = loop.Status.Action.Pod
				g.Expect(name).NotTo(BeEmpty())
				p := &corev1.Pod{}
				g.Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			}, 30*time.Second).Should(Succeed())
			Expect(k8sClient.Delete(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
			loop := waitFinished(key)
			Expect(loop.Status.CurrentState).To(Equal("recovered"))
			Expect(loop.Status.LastResult.Verdict).To(Equal("error"))
			Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring(pod.ReasonPodDeleted))
		})

		It("gives an error verdict, routed by onError, when the image never starts", func() {
			spec := v1alpha1.LoopSpec{Initial: "build", States: map[string]v1alpha1.State{
				"build":   {Action: "make", OnSuccess: "done", OnError: "alert"},
				"done":    {Terminal: true},
				"alert":   {Terminal: true, Failure: new(true)},
				"unknown": {Terminal: true},
			}}
			spec.Runner = &v1alpha1.RunnerSpec{Image: neverStartsImage}
			loop := waitFinished(createLoop(ns, "pull", spec))
			Expect(loop.Status.CurrentState).To(Equal("alert"))
			Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			Expect(loop.Status.LastResult.Verdict).To(Equal("error"))
			Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring(pod.ReasonImagePullFailed))
			Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring("ErrImagePull"))
			// The Pod is gone, so it can never run the action late.
			Eventually(func() []corev1.Pod { return loopPods(ns, "pull") }).Should(BeEmpty())
		})

		It("ends the step of a Pod that is never scheduled, though nothing about the Pod changes", func() {
			spec := v1alpha1.LoopSpec{Initial: "build", States: map[string]v1alpha1.State{
				"build": {Action: "make", OnSuccess: "done", OnError: "alert"},
				"done":  {Terminal: true},
				"alert": {Terminal: true, Failure: new(true)},
			}}
			spec.Runner = &v1alpha1.RunnerSpec{Image: neverScheduledImage}
			loop := waitFinished(createLoop(ns, "unscheduled", spec))
			Expect(loop.Status.CurrentState).To(Equal("alert"))
			Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring(pod.ReasonPodNeverStarted))
			Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring("not scheduled"))
		})

		It("retries a transient failure with backoff, then escalates", func() {
			spec := v1alpha1.LoopSpec{Initial: "build", States: map[string]v1alpha1.State{
				"build": {Action: "make", OnSuccess: "done", OnError: "alert", RetryPolicy: &v1alpha1.RetryPolicy{
					Limit: 2, Backoff: dur(time.Second), Factor: new(int32(3))}},
				"done":  {Terminal: true},
				"alert": {Terminal: true},
			}}
			spec.Runner = &v1alpha1.RunnerSpec{Image: neverStartsImage}
			loop := waitFinished(createLoop(ns, "retry", spec))
			Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedRetryExhausted))
			Expect(loop.Status.CurrentState).To(Equal("build"), "onError does not take over from used-up retries")
			Expect(loop.Status.Iteration).To(Equal(int32(1)), "retries are the same iteration")
			stalled := meta.FindStatusCondition(loop.Status.Conditions, v1alpha1.StalledCondition)
			Expect(stalled).NotTo(BeNil())
			Expect(stalled.Message).To(ContainSubstring(`state "build" escalated`))
			Expect(stalled.Message).To(ContainSubstring(pod.ReasonImagePullFailed))

			// Three tries, the retries 1s and 3s after the failure before them.
			var starts, failures []time.Time
			var delays []int64
			for _, e := range loopEvents(loop) {
				switch e.Type {
				case executor.EventActionStart:
					starts = append(starts, e.Time)
				case executor.EventActionComplete:
					failures = append(failures, e.Time)
				case executor.EventActionRetry:
					delays = append(delays, executor.RetryOf(e).DelayMs)
				}
			}
			Expect(fmt.Sprint(delays)).To(Equal("[1000 3000]"))
			Expect(starts).To(HaveLen(3))
			const slack = 10 * time.Millisecond // event times are the reconciles' clock readings
			Expect(starts[1].Sub(failures[0])).To(BeNumerically(">=", time.Second-slack))
			Expect(starts[2].Sub(failures[1])).To(BeNumerically(">=", 3*time.Second-slack))
			// Each try had a Pod of its own, deleted when it gave up.
			Eventually(func() []corev1.Pod { return loopPods(ns, "retry") }).Should(BeEmpty())
		})

		It("retries an exit code the policy lists, and goes on", func() {
			// A file in the workspace claim, which every try mounts, tells
			// the second try from the first.
			spec := withWorkspace(v1alpha1.LoopSpec{Initial: "flaky", States: map[string]v1alpha1.State{
				"flaky": {Action: "test -e tried || { touch tried; exit 75; }; echo ok", Capture: "flaky",
					OnSuccess: "done", OnError: "failed", RetryPolicy: &v1alpha1.RetryPolicy{Limit: 1, Backoff: dur(100 * time.Millisecond), ExitCodes: []int32{75}}},
				"done":   {Terminal: true},
				"failed": {Terminal: true},
			}})
			loop := waitFinished(createLoop(ns, "redo", spec))
			Expect(loop.Status.CurrentState).To(Equal("done"))
			Expect(loop.Status.Captured["flaky"].Output).To(Equal("ok"))
			Expect(loop.Status.Iteration).To(Equal(int32(1)))
			Expect(loop.Status.Retries).To(BeZero())
			var names []string
			for _, p := range loopPods(ns, "redo") {
				names = append(names, p.Name)
				if strings.HasSuffix(p.Name, "-r1") {
					Expect(p.Labels).To(HaveKeyWithValue(v1alpha1.LabelRetry, "1"))
				}
			}
			Expect(names).To(ConsistOf(HaveSuffix("-1"), HaveSuffix("-1-r1")), "each try has a Pod named for it")
		})

		It("runs an agent action with the agent command", func() {
			spec := v1alpha1.LoopSpec{Initial: "ask", States: map[string]v1alpha1.State{
				"ask":  {Action: "/review the change", Evaluate: &v1alpha1.Evaluate{Type: "output_contains", Pattern: "^agent: /review"}, Capture: "answer", OnSuccess: "done", OnFailure: "done"},
				"done": {Terminal: true},
			}}
			spec.Agent = &v1alpha1.AgentSpec{Command: []string{"bash", "-c", `echo "agent: $1"`, "agent"}}
			loop := waitFinished(createLoop(ns, "agent", spec))
			Expect(loop.Status.Captured["answer"].Output).To(Equal("agent: /review the change"))
			Expect(loop.Status.Captured["answer"].Verdict).To(Equal("success"))
		})

		It("refuses the operator's own service account", func() {
			op.stop()
			op = startPodOperator(Config{Pods: pod.Options{OperatorNamespace: ns, OperatorServiceAccount: "looprun-manager"}})
			spec := v1alpha1.LoopSpec{Initial: "steal", States: map[string]v1alpha1.State{
				"steal": {Action: "cat /var/run/secrets/kubernetes.io/serviceaccount/token", OnSuccess: "done", OnError: "refused"},
				"done":  {Terminal: true}, "refused": {Terminal: true},
			}}
			spec.Runner = &v1alpha1.RunnerSpec{ServiceAccountName: "looprun-manager"}
			loop := waitFinished(createLoop(ns, "steal", spec))
			Expect(loop.Status.CurrentState).To(Equal("refused"))
			Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring("ForbiddenServiceAccount"))
			Expect(loopPods(ns, "steal")).To(BeEmpty())
		})
	})

	It("runs every step exactly once across ten operator restarts", func() {
		const steps = 30
		spec := withWorkspace(v1alpha1.LoopSpec{Initial: "append", MaxIterations: i32(steps), States: map[string]v1alpha1.State{
			"append": {Action: "echo ${state.iteration} >> lines; sleep 0.4", OnSuccess: "$current"},
			"done":   {Terminal: true},
		}})
		calmNS := newNamespace()
		op := startPodOperator(Config{})
		want := waitFinished(createLoop(calmNS, "steps", spec))
		op.stop()

		ns := newNamespace()
		op = startPodOperator(Config{})
		key := createLoop(ns, "steps", spec)
		restarts := 0
		for restarts < 10 {
			// Each kill comes after the Loop moved on since the last start,
			// at a random point of the next step (mid-action,
			// mid-reconcile): kills that come faster than a slow machine
			// starts an operator would keep the Loop from ever finishing.
			since := getLoop(Default, key).Status.Iteration
			var loop *v1alpha1.Loop
			Eventually(func(g Gomega) {
				loop = getLoop(g, key)
				g.Expect(loop.Status.Phase.IsFinished() || loop.Status.Iteration > since).To(BeTrue(), "the Loop moves on after a restart")
			}, time.Minute).Should(Succeed())
			if loop.Status.Phase.IsFinished() {
				break
			}
			time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
			op.stop()
			op = startPodOperator(Config{})
			restarts++
		}
		DeferCleanup(func() { op.stop() })
		got := waitFinished(key)
		GinkgoWriter.Printf("manager restarts during the run: %d\n", restarts)
		Expect(restarts).To(BeNumerically(">=", 10))

		data, err := os.ReadFile(filepath.Join(claimDir(ns, pod.WorkspaceClaim("steps")), "lines"))
		Expect(err).NotTo(HaveOccurred())
		var lines []string
		for i := 1; i <= steps; i++ {
			lines = append(lines, strconv.Itoa(i))
		}
		Expect(string(data)).To(Equal(strings.Join(lines, "\n") + "\n"))
		Expect(normalStatus(got)).To(Equal(normalStatus(want)))
		Expect(normalEvents(loopEvents(got))).To(Equal(normalEvents(loopEvents(want))))
	})
})
