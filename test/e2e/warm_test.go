//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// warm puts a spec in Warm mode.
func warm(spec v1alpha1.LoopSpec) v1alpha1.LoopSpec {
	if spec.Runner == nil {
		spec.Runner = &v1alpha1.RunnerSpec{}
	}
	spec.Runner.Mode = v1alpha1.RunnerModeWarm
	return spec
}

// podsMade records the names of every Pod a Loop makes, from a watch
// started before the Loop.
func podsMade(ns, loop string) (names func() []string, stop func()) {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	Expect(err).NotTo(HaveOccurred())
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: fixture.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	w, err := c.Watch(bg, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelLoop: loop})
	Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	seen := map[string]bool{}
	var order []string
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Error && !seen[p.Name] {
				mu.Lock()
				seen[p.Name] = true
				order = append(order, p.Name)
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), order...)
	}, w.Stop
}

var _ = Describe("Warm mode on a real node", func() {
	It("runs a run's shell steps in one runner Pod, each once, sharing its files, a step outlasting the hand-off's waits", func() {
		ns := newNamespace()
		names, stop := podsMade(ns, "warm")
		defer stop()
		key := create(ns, "warm", warm(v1alpha1.LoopSpec{Initial: "append", MaxIterations: ptr.To[int32](40), States: map[string]v1alpha1.State{
			// No workspace claim: the steps share the runner Pod's files.
			"append": {Action: "echo ${state.iteration} >> /workspace/lines && test ${state.iteration} -ge 12", OnSuccess: "long", OnFailure: "append"},
			// Longer than one long poll (30 s) and any request's timeout.
			"long":  {Action: "sleep 35; echo late >> /workspace/lines", Next: "check"},
			"check": {Action: fmt.Sprintf(`test "$(cat /workspace/lines)" = "$(seq 1 12; echo late)"`), OnSuccess: "done", OnFailure: "wrong"},
			"done":  {Terminal: true},
			"wrong": {Terminal: true},
		}}))
		loop := waitFinished(key, 3*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(loop.Status.CurrentState).To(Equal("done"), "each step once, in order, in one filesystem")
		Expect(names()).To(HaveLen(1), "one Pod for the run: %v", names())
		// The runner ends with the run; its Pod stays, with its log, which
		// looprun logs shows per step.
		Eventually(func(g Gomega) {
			pods := loopPods(ns, "warm")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodSucceeded))
		}, time.Minute).Should(Succeed())
		out := run(looprun, "logs", "-n", ns, "warm")
		Expect(out).To(ContainSubstring("==> iteration 13, state long (pod " + names()[0] + ", step "))
		Expect(strings.Count(out, "==> iteration")).To(Equal(14))
		Expect(out).NotTo(ContainSubstring("::looprun::"))
	})

	It("shows each warm step's output: looprun watch follows it as it comes, looprun logs shows it per step", func() {
		ns := newNamespace()
		key := create(ns, "watched", warm(v1alpha1.LoopSpec{Initial: "first", States: map[string]v1alpha1.State{
			"first": {Action: "echo one-of-first", Next: "count"},
			// The output is complete long before the step ends: followed,
			// the watch shows its head.
			"count": {Action: "seq 1 2000; sleep 8", Next: "done"},
			"done":  {Terminal: true},
		}}))
		out := run(looprun, "watch", "-n", ns, "loop/watched")
		expectCountFollowed(out)
		Expect(out).NotTo(ContainSubstring("::looprun::"), "the runner's frames are not the step's output")
		Expect(getLoop(Default, key).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))

		out = run(looprun, "logs", "-n", ns, "watched")
		Expect(out).To(ContainSubstring("state first (pod "))
		Expect(out).To(ContainSubstring("one-of-first\n==> iteration 2, state count (pod "))
		Expect(out).To(ContainSubstring("\n2000\n"))
	})

	It("runs a step again in a new runner Pod when its Pod is deleted mid-step, the steps before it once", func() {
		ns := newNamespace()
		volumes(1)
		spec := warm(withWorkspace(v1alpha1.LoopSpec{Initial: "append", MaxIterations: ptr.To[int32](40), States: map[string]v1alpha1.State{
			"append": {Action: "echo ${state.iteration} >> lines && test ${state.iteration} -ge 5", OnSuccess: "slow", OnFailure: "append"},
			"slow":   {Action: "sleep 15; echo slow >> lines", Next: "done"},
			"done":   {Terminal: true},
		}}))
		key := create(ns, "deleted", spec)
		var runner string
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.CurrentState).To(Equal("slow"))
			g.Expect(l.Status.Action).NotTo(BeNil())
			g.Expect(l.Status.Action.Step).NotTo(BeEmpty())
			runner = l.Status.Action.Pod
		}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
		time.Sleep(2 * time.Second)
		Expect(k8sClient.Delete(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runner}})).To(Succeed())
		loop := waitFinished(key, 3*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(workspaceFile(ns, "deleted", "lines")).To(Equal(oneToN(5) + "slow\n"))
	})

	It("finishes a 20-step Warm loop with each step once while its operator Pod is deleted mid-hand-off four times", func() {
		ns := newNamespace()
		volumes(1)
		spec := warm(withWorkspace(v1alpha1.LoopSpec{Initial: "append", MaxIterations: ptr.To[int32](40), States: map[string]v1alpha1.State{
			"append": {Action: "sleep 1; echo ${state.iteration} >> lines && test ${state.iteration} -ge 20", OnSuccess: "done", OnFailure: "append"},
			"done":   {Terminal: true},
		}}))
		key := create(ns, "restarts", spec)
		for i := range 4 {
			time.Sleep(time.Duration(2000+rand.IntN(2500)) * time.Millisecond)
			Expect(getLoop(Default, key).Status.Phase.IsFinished()).To(BeFalse(), "the loop ended before restart %d", i+1)
			old := leader()
			Expect(old).NotTo(BeEmpty())
			Expect(k8sClient.Delete(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: old}}, client.GracePeriodSeconds(0))).To(Succeed())
			Eventually(func() string { return leader() }, 2*time.Minute, 250*time.Millisecond).ShouldNot(Or(BeEmpty(), Equal(old)))
		}
		loop := waitFinished(key, 5*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		// Each step ran once: each iteration appended its line once.
		Expect(workspaceFile(ns, "restarts", "lines")).To(Equal(oneToN(20)))
	})
})
