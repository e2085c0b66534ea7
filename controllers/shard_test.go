package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/pod"
)

// startLog is a runner that notes the Loops whose actions it started.
type startLog struct {
	runner.Runner
	mu    sync.Mutex
	loops map[string]int
}

func (s *startLog) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	s.mu.Lock()
	s.loops[loop.Name]++
	s.mu.Unlock()
	return s.Runner.Start(ctx, loop, a)
}

func (s *startLog) started(loop string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loops[loop]
}

// startShard starts a Pod operator of one shard that notes what it starts.
func startShard(shard string) (*operator, *startLog) {
	log := &startLog{loops: map[string]int{}}
	c := Config{Shard: shard, Pods: pod.Options{Images: pod.Images{Entrypoint: testEntrypointImage, Runner: testRunnerImage}, StartAllowance: time.Minute}}
	op := runOperator(c, func(r *LoopReconciler) {
		log.Runner = r.Actions
		r.Actions = log
	})
	DeferCleanup(op.stop)
	return op, log
}

var _ = Describe("Shards", func() {
	It("gives each Loop to the manager of its shard, and its Pods its shard's label", func() {
		ns := newNamespace()
		_, plain := startShard("")
		_, blue := startShard("blue")
		spec := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "echo hi", Next: "done"}, "done": {Terminal: true}}}

		unlabelled := waitFinished(createLoop(ns, "unlabelled", spec))
		labelled := &v1alpha1.Loop{}
		labelled.Namespace, labelled.Name, labelled.Spec = ns, "labelled", spec
		labelled.Labels = map[string]string{v1alpha1.LabelShard: "blue"}
		Expect(k8sClient.Create(bg, labelled)).To(Succeed())
		labelled = waitFinished(client.ObjectKeyFromObject(labelled))

		Expect(unlabelled.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(labelled.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect([]int{plain.started("unlabelled"), blue.started("unlabelled")}).To(Equal([]int{1, 0}))
		Expect([]int{plain.started("labelled"), blue.started("labelled")}).To(Equal([]int{0, 1}))
		for _, p := range loopPods(ns, "labelled") {
			Expect(p.Labels).To(HaveKeyWithValue(v1alpha1.LabelShard, "blue"))
		}
		for _, p := range loopPods(ns, "unlabelled") {
			Expect(p.Labels).NotTo(HaveKey(v1alpha1.LabelShard))
		}

		// A Loop of a shard no manager serves is left alone.
		orphan := &v1alpha1.Loop{}
		orphan.Namespace, orphan.Name, orphan.Spec = ns, "orphan", spec
		orphan.Labels = map[string]string{v1alpha1.LabelShard: "green"}
		Expect(k8sClient.Create(bg, orphan)).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(getLoop(g, client.ObjectKeyFromObject(orphan)).Status.Phase).To(BeEmpty())
		}, 2*time.Second).Should(Succeed())
	})

	It("finishes a Loop moved to another shard mid-run once, each step run once", func() {
		ns := newNamespace()
		_, plain := startShard("")
		_, blue := startShard("blue")
		const steps = 8
		spec := withWorkspace(v1alpha1.LoopSpec{Initial: "append", MaxIterations: i32(steps + 2), States: map[string]v1alpha1.State{
			"append": {Action: "sleep 0.3; echo ${state.iteration} >> lines; test ${state.iteration} -ge " + strconv.Itoa(steps), OnSuccess: "done", OnFailure: "append"},
			"done":   {Terminal: true},
		}})
		key := createLoop(ns, "moved", spec)
		Eventually(func(g Gomega) { g.Expect(getLoop(g, key).Status.Iteration).To(BeNumerically(">=", 3)) }, time.Minute).Should(Succeed())
		loop := getLoop(Default, key)
		patch := client.MergeFrom(loop.DeepCopy())
		loop.Labels = map[string]string{v1alpha1.LabelShard: "blue"}
		Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())

		got := waitFinished(key)
		Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(got.Status.Iteration).To(Equal(int32(steps)))
		data, err := os.ReadFile(filepath.Join(claimDir(ns, pod.WorkspaceClaim("moved")), "lines"))
		Expect(err).NotTo(HaveOccurred())
		var want []string
		for i := 1; i <= steps; i++ {
			want = append(want, strconv.Itoa(i))
		}
		Expect(string(data)).To(Equal(strings.Join(want, "\n") + "\n"))
		Expect(plain.started("moved")).To(BeNumerically(">=", 3), "the first shard ran the first steps")
		Expect(blue.started("moved")).To(BeNumerically(">=", 1), "the second shard ran the rest")
		Expect(plain.started("moved")+blue.started("moved")).To(BeNumerically("<=", steps+1),
			"a step in flight at the move may be started by both, but its Pod only once")
	})
})
