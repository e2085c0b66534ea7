package controllers

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/pod"
)

// hooked is a loop of two steps that ends in done, or in broken when the
// file fail exists in dir, with spec.onExit hook.
func hooked(dir, hook string) v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "a", OnExit: &v1alpha1.ExitHook{Action: hook}, States: map[string]v1alpha1.State{
		"a":      {Action: "true", Next: "b"},
		"b":      {Action: "test ! -f " + dir + "/fail", OnSuccess: "done", OnFailure: "broken"},
		"done":   {Terminal: true},
		"broken": {Terminal: true, Failure: ptr.To(true)},
	}}
}

// waitHook waits until the Loop's exit hook ended.
func waitHook(key client.ObjectKey) *v1alpha1.Loop {
	var loop *v1alpha1.Loop
	Eventually(func(g Gomega) {
		loop = getLoop(g, key)
		g.Expect(loop.Status.ExitHook).NotTo(BeNil())
		g.Expect(loop.Status.ExitHook.Phase).NotTo(Equal(v1alpha1.ExitHookRunning))
	}, "60s").Should(Succeed())
	return loop
}

// hookPods are the Loop's exit-hook Pods.
func hookPods(ns, loop string) []string {
	var names []string
	for _, p := range loopPods(ns, loop) {
		if p.Labels[v1alpha1.LabelState] == executor.ExitState {
			names = append(names, p.Name)
		}
	}
	return names
}

// gateDir is a directory the test kubelet does not map into Pods (it is
// under no volume mount of theirs), shared by the test and its actions.
func gateDir() string {
	dir, err := os.MkdirTemp(".", ".gate-")
	Expect(err).NotTo(HaveOccurred())
	abs, err := filepath.Abs(dir)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, abs)
	return abs
}

var _ = Describe("The exit hook (spec.onExit)", func() {
	// The hook reads how the run ended from its templates.
	const check = `test "${loop.phase}" = Completed && test "${loop.terminated_by}" = terminal && test "${loop.final_state}" = done ` +
		`&& test "${loop.iterations}" = 2 && test "${loop.usage.input_tokens}" = 0 || { echo "ended ${loop.phase} in ${loop.final_state} by ${loop.terminated_by} after ${loop.iterations}" >&2; exit 3; }`

	It("runs once as a Pod when the run ends, with how it ended, and records the result", func() {
		op := startPodOperator(Config{})
		DeferCleanup(op.stop)
		ns := newNamespace()
		dir := gateDir()
		ok := createLoop(ns, "ok", hooked(dir, check))
		loop := waitHook(ok)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		h := loop.Status.ExitHook
		Expect(h.Phase).To(Equal(v1alpha1.ExitHookSucceeded), h.Message)
		Expect(*h.ExitCode).To(BeZero())
		Expect(h.Pod).To(Equal(pod.ExitName("ok", loop.Status.RunID, loop.Status.Iteration)))
		Expect(h.Iteration).To(Equal(loop.Status.Iteration))
		Expect(hookPods(ns, "ok")).To(ConsistOf(h.Pod))
		Eventually(func(g Gomega) { g.Expect(eventNotes(g, ns, "ExitHookSucceeded")).NotTo(BeEmpty()) }).Should(Succeed())
		// How the run ended is unchanged.
		Expect(condition(loop, v1alpha1.ReadyCondition).Reason).To(Equal(v1alpha1.ReasonCompleted))

		// A failed run's hook runs too, and its failure is said.
		Expect(os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644)).To(Succeed())
		bad := createLoop(ns, "bad", hooked(dir, check))
		loop = waitHook(bad)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		h = loop.Status.ExitHook
		Expect(h.Phase).To(Equal(v1alpha1.ExitHookFailed))
		Expect(*h.ExitCode).To(BeEquivalentTo(3))
		Expect(h.Message).To(ContainSubstring("ended Failed in broken"))
		Eventually(func(g Gomega) {
			g.Expect(eventNotes(g, ns, "ExitHookFailed")).To(ContainElement(ContainSubstring("ended Failed in broken")))
		}).Should(Succeed())
		Expect(condition(loop, v1alpha1.ReadyCondition).Reason).To(Equal(v1alpha1.ReasonFailureState))
	})

	It("is started once across an operator restart while its Pod runs", func() {
		op := startPodOperator(Config{})
		dir := gateDir()
		ns := newNamespace()
		key := createLoop(ns, "held", hooked(dir, "until [ -f "+dir+"/go ]; do sleep 0.1; done; echo hooked"))
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.ExitHook).NotTo(BeNil())
			g.Expect(l.Status.ExitHook.Phase).To(Equal(v1alpha1.ExitHookRunning))
		}, "60s").Should(Succeed())
		op.stop()
		op = startPodOperator(Config{})
		DeferCleanup(op.stop)
		Consistently(func() []string { return hookPods(ns, "held") }, "2s").Should(HaveLen(1))
		Expect(os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)).To(Succeed())
		loop := waitHook(key)
		Expect(loop.Status.ExitHook.Phase).To(Equal(v1alpha1.ExitHookSucceeded), loop.Status.ExitHook.Message)
		Expect(hookPods(ns, "held")).To(HaveLen(1))
	})

	It("keeps a Loop with ttlSecondsAfterFinished until its hook ended", func() {
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		dir := gateDir()
		ns := newNamespace()
		spec := hooked(dir, "until [ -f "+dir+"/go ]; do sleep 0.1; done")
		spec.TTLSecondsAfterFinished = ptr.To[int32](0)
		key := createLoop(ns, "ttl", spec)
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.ExitHook).NotTo(BeNil())
		}, "30s").Should(Succeed())
		Consistently(func(g Gomega) { getLoop(g, key) }, "1s").Should(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)).To(Succeed())
		Eventually(func() error { return k8sClient.Get(bg, key, &v1alpha1.Loop{}) }, "30s").Should(MatchError(ContainSubstring("not found")))
	})
})
