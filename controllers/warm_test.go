package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/internal/runner/warm"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
)

// testRunnerKey is the test operator's runner key (--runner-key-file).
var testRunnerKey = []byte("the runner key of the test operator, 32 bytes or more")

// warmSpec puts a spec in Warm mode, with a workspace claim its runner
// Pods share (so the test can read its files).
func warmSpec(spec v1alpha1.LoopSpec) v1alpha1.LoopSpec {
	spec = withWorkspace(spec)
	spec.Runner.Mode = v1alpha1.RunnerModeWarm
	return spec
}

// podsSeen records every Pod of a namespace as the watch first saw it.
func podsSeen(ns string) (func() []*corev1.Pod, func()) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	w, err := c.Watch(bg, &corev1.PodList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	seen := map[string]bool{}
	var pods []*corev1.Pod
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == apiwatch.Added && !seen[p.Name] {
				mu.Lock()
				seen[p.Name] = true
				pods = append(pods, p)
				mu.Unlock()
			}
		}
	}()
	return func() []*corev1.Pod {
		mu.Lock()
		defer mu.Unlock()
		return append([]*corev1.Pod(nil), pods...)
	}, w.Stop
}

// appending is a Warm loop of n steps, each appending its iteration to
// lines in the workspace after a pause, the n-th going to check, which
// passes when each step appended once, in order.
func appending(n int, pause string) v1alpha1.LoopSpec {
	return warmSpec(v1alpha1.LoopSpec{Initial: "append", MaxIterations: i32(int32(n) + 5), States: map[string]v1alpha1.State{
		"append": {Action: fmt.Sprintf("sleep %s; echo ${state.iteration} >> lines && test ${state.iteration} -ge %d", pause, n), OnSuccess: "check", OnFailure: "append"},
		"check":  {Action: fmt.Sprintf(`test "$(cat lines)" = "$(seq 1 %d)"`, n), OnSuccess: "done", OnFailure: "wrong"},
		"done":   {Terminal: true},
		"wrong":  {Terminal: true, Failure: new(true)},
	}})
}

var _ = Describe("Warm mode", func() {
	var (
		ns string
		op *operator
	)
	BeforeEach(func() {
		ns = newNamespace()
		op = startPodOperator(Config{RunnerKey: testRunnerKey})
		DeferCleanup(func() { op.stop() })
	})

	It("runs a run's shell steps in one runner Pod, each once, and ends it at the run's end", func() {
		pods, stop := podsSeen(ns)
		defer stop()
		loop := waitFinished(createLoop(ns, "warm", appending(6, "0")))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), string(loop.Status.LastResult.Details.Raw))
		Expect(loop.Status.CurrentState).To(Equal("done"))
		Expect(loop.Status.Iteration).To(Equal(int32(7)))

		seen := pods()
		Expect(seen).To(HaveLen(1), "one Pod for the run")
		runner := seen[0]
		Expect(runner.Name).To(Equal(pod.WarmName("warm", loop.Status.RunID, 1)))
		Expect(runner.Labels).To(HaveKeyWithValue(v1alpha1.LabelRunner, pod.WarmLabelValue))
		Expect(metav1.GetControllerOf(runner).UID).To(Equal(loop.UID))
		Expect(*runner.Spec.AutomountServiceAccountToken).To(BeFalse(), "the runner holds no API credentials")
		// The key reaches the Pod from a Secret, never in its spec.
		var keyEnv *corev1.EnvVar
		for i, e := range runner.Spec.Containers[0].Env {
			if e.Name == handoff.KeyEnv {
				keyEnv = &runner.Spec.Containers[0].Env[i]
			}
		}
		Expect(keyEnv).NotTo(BeNil())
		Expect(keyEnv.Value).To(BeEmpty())
		keySecret := pod.WarmKeySecret("warm", warm.Fingerprint(warm.LoopKey(testRunnerKey, loop.UID)))
		Expect(keyEnv.ValueFrom.SecretKeyRef.Name).To(Equal(keySecret))
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: keySecret}, secret)).To(Succeed())
		Expect(metav1.GetControllerOf(secret).UID).To(Equal(loop.UID))

		// The run ended: its runner ends too; its Pod stays, with its log.
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(k8sClient.Get(bg, client.ObjectKeyFromObject(runner), p)).To(Succeed())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
		}).Should(Succeed())
	})

	It("goes on where it was after the operator restarts mid-run, each step once", func() {
		key := createLoop(ns, "restarted", appending(8, "0.3"))
		Eventually(func(g Gomega) {
			l := &v1alpha1.Loop{}
			g.Expect(k8sClient.Get(bg, key, l)).To(Succeed())
			g.Expect(l.Status.Iteration).To(BeNumerically(">=", 3))
			g.Expect(l.Status.Action).NotTo(BeNil())
			g.Expect(l.Status.Action.Step).To(Equal(handoff.StepID(l.Status.RunID, l.Status.Action.Iteration, 0)))
		}).Should(Succeed())
		op.stop()
		time.Sleep(time.Second) // a step ends while no operator runs
		op = startPodOperator(Config{RunnerKey: testRunnerKey})
		loop := waitFinished(key)
		Expect(loop.Status.CurrentState).To(Equal("done"), "each step once, in order")
		data, err := os.ReadFile(filepath.Join(claimDir(ns, pod.WorkspaceClaim("restarted")), "lines"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(Equal("1\n2\n3\n4\n5\n6\n7\n8\n"))
	})

	It("runs a step again in the next runner Pod when its runner Pod is deleted mid-step", func() {
		spec := warmSpec(v1alpha1.LoopSpec{Initial: "first", States: map[string]v1alpha1.State{
			"first": {Action: "echo first >> lines", Next: "slow"},
			// Its first run marks the workspace and waits to be cut off;
			// run again, it ends.
			"slow": {Action: `if [ -e again ]; then echo slow >> lines; else touch again; sleep 30; fi`, Next: "done"},
			"done": {Terminal: true},
		}})
		key := createLoop(ns, "deleted", spec)
		var runner string
		Eventually(func(g Gomega) {
			l := &v1alpha1.Loop{}
			g.Expect(k8sClient.Get(bg, key, l)).To(Succeed())
			g.Expect(l.Status.CurrentState).To(Equal("slow"))
			g.Expect(l.Status.Action).NotTo(BeNil())
			runner = l.Status.Action.Pod
			_, err := os.Stat(filepath.Join(claimDir(ns, pod.WorkspaceClaim("deleted")), "again"))
			g.Expect(err).NotTo(HaveOccurred())
		}).Should(Succeed())
		Expect(k8sClient.Delete(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runner}})).To(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		data, err := os.ReadFile(filepath.Join(claimDir(ns, pod.WorkspaceClaim("deleted")), "lines"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(Equal("first\nslow\n"), "the first step once; the lost one again")
		Expect(normalEvents(loopEvents(loop))).To(ContainElement(HaveKeyWithValue("event", executor.EventActionRestarted)))
	})

	// Hostile: a tenant's own Secret under the runner key's name (another
	// key) makes the runner refuse the operator: that Loop's step fails,
	// naming why; nothing runs on the tenant's word.
	It("fails only its own step when a tenant's Secret of the key's name holds another key", func() {
		spec := warmSpec(v1alpha1.LoopSpec{Initial: "step", States: map[string]v1alpha1.State{
			"step":    {Action: "touch ran", OnSuccess: "done", OnError: "refused"},
			"done":    {Terminal: true},
			"refused": {Terminal: true, Failure: new(true)},
		}})
		// Its name is known once the Loop is (from its uid, as the first
		// runner Pod's spec would show it): the Loop waits suspended.
		spec.Suspend = true
		key := createLoop(ns, "victim", spec)
		victim := &v1alpha1.Loop{}
		Expect(k8sClient.Get(bg, key, victim)).To(Succeed())
		other, err := handoff.NewKey()
		Expect(err).NotTo(HaveOccurred())
		name := pod.WarmKeySecret("victim", warm.Fingerprint(warm.LoopKey(testRunnerKey, victim.UID)))
		Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string][]byte{pod.WarmKeyName: []byte(other)}})).To(Succeed())
		victim.Spec.Suspend = false
		Expect(k8sClient.Update(bg, victim)).To(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.CurrentState).To(Equal("refused"))
		Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring(warm.ReasonRunnerRefused))
		_, err = os.Stat(filepath.Join(claimDir(ns, pod.WorkspaceClaim("victim")), "ran"))
		Expect(os.IsNotExist(err)).To(BeTrue(), "the step ran")
	})

	// Hostile: a runner the operator cannot reach (a NetworkPolicy, a
	// black hole) holds no reconcile: other Loops run on meanwhile, and
	// its step fails, naming why, once it was unreachable long enough.
	It("fails the step of a runner it cannot reach, holding up no other Loop", func() {
		op.stop()
		op = startPodOperatorWith(Config{RunnerKey: testRunnerKey}, func(r *LoopReconciler) {
			w := r.Actions.(*warm.Runner)
			w.UnreachableAfter = 3 * time.Second
			w.Addr = func(*corev1.Pod) string { return "127.0.0.1:1" } // nothing listens
		})
		spec := warmSpec(v1alpha1.LoopSpec{Initial: "step", States: map[string]v1alpha1.State{
			"step":        {Action: "true", OnSuccess: "done", OnError: "unreachable"},
			"done":        {Terminal: true},
			"unreachable": {Terminal: true, Failure: new(true)},
		}})
		blocked := createLoop(ns, "blocked", spec)
		// A Pod-mode Loop beside it runs to its end meanwhile.
		other := waitFinished(createLoop(ns, "other", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "true", Next: "b"}, "b": {Action: "true", Next: "done"}, "done": {Terminal: true},
		}}))
		Expect(other.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		loop := waitFinished(blocked)
		Expect(loop.Status.CurrentState).To(Equal("unreachable"))
		Expect(string(loop.Status.LastResult.Details.Raw)).To(ContainSubstring(warm.ReasonRunnerUnreachable))
	})

	// An operator that restarted with another key (no --runner-key-file)
	// cannot talk to the runners made before: the step in flight is lost
	// and runs again in a runner of the new key (so it may have run twice,
	// as docs/runner.md says); the steps before it ran once.
	It("runs the step in flight again in a new runner when the operator's key changed", func() {
		spec := appending(6, "0.5")
		check := spec.States["check"]
		check.Action = `test "$(uniq lines)" = "$(seq 1 6)" && test "$(wc -l < lines)" -le 7`
		spec.States["check"] = check
		key := createLoop(ns, "rekeyed", spec)
		Eventually(func(g Gomega) {
			l := &v1alpha1.Loop{}
			g.Expect(k8sClient.Get(bg, key, l)).To(Succeed())
			g.Expect(l.Status.Iteration).To(BeNumerically(">=", 3))
		}).Should(Succeed())
		op.stop()
		op = startPodOperator(Config{RunnerKey: []byte("another runner key, of the restarted operator")})
		loop := waitFinished(key)
		Expect(loop.Status.CurrentState).To(Equal("done"), "each step once, but the one in flight, at most twice")
		Expect(normalEvents(loopEvents(loop))).To(ContainElement(HaveKeyWithValue("event", executor.EventActionRestarted)))
	})

	// As in a step Pod: the wrapper times a step out (124), keeps what it
	// printed, and the runner goes on with the next step.
	It("times a warm step out with exit code 124 and runs the next in the same runner", func() {
		pods, stop := podsSeen(ns)
		defer stop()
		spec := warmSpec(v1alpha1.LoopSpec{Initial: "slow", States: map[string]v1alpha1.State{
			"slow":     {Action: "echo started; sleep 30", Timeout: dur(time.Second), Capture: "slow", OnSuccess: "done", OnError: "timedout"},
			"timedout": {Action: "echo after", Next: "done"},
			"done":     {Terminal: true},
		}})
		loop := waitFinished(createLoop(ns, "slow", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(loop.Status.Captured["slow"].ExitCode).To(Equal(int32(124)))
		Expect(loop.Status.Captured["slow"].Output).To(Equal("started"))
		Expect(loop.Status.Captured["slow"].DurationMs).To(BeNumerically("<", 10000))
		Expect(pods()).To(HaveLen(1))
	})

	// The run's own parts beside its shell steps behave as in Pod mode: an
	// approval between two steps (the runner waits, holding its files), and
	// the exit hook in a Pod of its own.
	It("keeps a run's runner across an approval and runs its exit hook in a Pod of its own", func() {
		pods, stop := podsSeen(ns)
		defer stop()
		spec := warmSpec(v1alpha1.LoopSpec{Initial: "build", OnExit: &v1alpha1.ExitHook{Action: "echo hook"}, States: map[string]v1alpha1.State{
			"build": {Action: "echo built > /tmp/artifact", Next: "ask"},
			"ask":   {Approval: &v1alpha1.Approval{Message: "ship?"}, OnSuccess: "ship", OnFailure: "done"},
			"ship":  {Action: "cat /tmp/artifact", Capture: "shipped", Next: "done"},
			"done":  {Terminal: true},
		}})
		key := createLoop(ns, "gated", spec)
		loop := waitAsking(key)
		requestOn(key, v1alpha1.ApprovalRequest(true, waitingFor(loop), "1"))
		loop = waitHook(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(loop.Status.Captured["shipped"].Output).To(Equal("built"), "the steps shared the runner's /tmp across the approval")
		Expect(loop.Status.ExitHook.Phase).To(Equal(v1alpha1.ExitHookSucceeded), loop.Status.ExitHook.Message)
		var runners, hooks int
		for _, p := range pods() {
			switch {
			case p.Labels[v1alpha1.LabelRunner] != "":
				runners++
			case p.Labels[v1alpha1.LabelState] == executor.ExitState:
				hooks++
			}
		}
		Expect([]int{runners, hooks, len(pods())}).To(Equal([]int{1, 1, 2}))
	})
})
