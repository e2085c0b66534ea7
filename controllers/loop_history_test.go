package controllers

import (
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// countToFive counts in a captured result, so a run's progress is all in
// its run state: start, then inc until the count reaches 5 (iteration 6).
func countToFive() v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{
		Initial: "start",
		States: map[string]v1alpha1.State{
			"start": {Action: "echo 0", Capture: "n", Next: "inc"},
			"inc": {Action: "echo $(( ${captured.n.output} + 1 ))", Capture: "n",
				Evaluate:  &v1alpha1.Evaluate{Type: "output_numeric", Operator: "ge", Target: &apiextensionsv1.JSON{Raw: []byte("5")}},
				OnSuccess: "done", OnFailure: "inc"},
			"done": {Terminal: true},
		},
	}
}

func requestOn(key client.ObjectKey, req string) {
	loop := &v1alpha1.Loop{}
	Expect(k8sClient.Get(bg, key, loop)).To(Succeed())
	patch := client.MergeFrom(loop.DeepCopy())
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[v1alpha1.RequestAnnotation] = req
	Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())
}

func warningReasons(ns string) []string {
	var list eventsv1.EventList
	Expect(k8sClient.List(bg, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning {
			out = append(out, e.Reason)
		}
	}
	return out
}

// keptCheckpoints reads a Loop's kept checkpoints, each of which must be readable.
func keptCheckpoints(loop *v1alpha1.Loop) []v1alpha1.CheckpointRef {
	kept, err := configmaps.Checkpoints(bg, k8sClient, loop)
	Expect(err).NotTo(HaveOccurred())
	refs := make([]v1alpha1.CheckpointRef, 0, len(kept))
	for _, k := range kept {
		Expect(k.Err).NotTo(HaveOccurred())
		refs = append(refs, k.Ref)
	}
	if ix := loop.Status.Checkpoints; ix != nil {
		Expect(refs).To(HaveLen(int(ix.Count())), "status.checkpoints.count")
		last := refs[len(refs)-1]
		Expect([]any{last.Iteration, last.State, last.Segment, last.Seq}).To(Equal([]any{ix.Latest.Iteration, ix.Latest.State, ix.Latest.Segment, ix.Latest.Seq}), "status.checkpoints.latest")
	}
	return refs
}

// corruptCheckpoint changes one byte inside the snapshot of iteration's checkpoint.
func corruptCheckpoint(loop *v1alpha1.Loop, iteration int32) {
	var ref v1alpha1.CheckpointRef
	for _, r := range keptCheckpoints(loop) {
		if r.Iteration == iteration {
			ref = r // the newest of that iteration
		}
	}
	Expect(ref.Seq).NotTo(BeZero(), "no checkpoint of iteration %d", iteration)
	cm := &corev1.ConfigMap{}
	Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: loop.Namespace, Name: configmaps.SegmentName(loop.Name, ref.Segment)}, cm)).To(Succeed())
	lines := strings.Split(cm.Data[configmaps.CheckpointsKey], "\n")
	found := false
	for i, l := range lines {
		if strings.Contains(l, `"seq":`+itoa(ref.Seq)+`,`) {
			lines[i] = strings.Replace(l, `"currentState":"inc"`, `"currentState":"inx"`, 1)
			found = lines[i] != l
		}
	}
	Expect(found).To(BeTrue(), "checkpoint of iteration %d not found in %s", iteration, cm.Name)
	cm.Data[configmaps.CheckpointsKey] = strings.Join(lines, "\n")
	Expect(k8sClient.Update(bg, cm)).To(Succeed())
}

var _ = Describe("Run history", func() {
	var (
		ns string
		op *operator
	)
	BeforeEach(func() {
		ns = newNamespace()
		op = startOperator(Config{SegmentBytes: 4096})
		DeferCleanup(func() { op.stop() })
	})

	It("checkpoints every iteration, each readable and checked", func() {
		loop := waitFinished(createLoop(ns, "count", countToFive()))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(loop.Status.Iteration).To(Equal(int32(6)))
		refs := keptCheckpoints(loop)
		Expect(refs).To(HaveLen(6), "one after each iteration")
		Expect(refs[5].State).To(Equal("done"))
		for i, ref := range refs {
			Expect(ref.Iteration).To(Equal(int32(i + 1)))
			Expect(ref.Time).NotTo(BeNil())
			cp, run, err := configmaps.FindCheckpoint(bg, k8sClient, loop, &ref.Iteration)
			Expect(err).NotTo(HaveOccurred())
			Expect(cp.SHA256).To(HaveLen(64))
			Expect(run.Iteration).To(Equal(ref.Iteration))
			Expect(run.CurrentState).To(Equal(ref.State))
			Expect(run.Action).To(BeNil())
			Expect(run.Captured["n"].Output).To(Equal(itoa(int64(i))))
		}
	})

	It("keeps history.maxCheckpoints and drops older ones from their segments", func() {
		spec := countToFive()
		spec.History = &v1alpha1.HistorySpec{MaxCheckpoints: i32(2)}
		loop := waitFinished(createLoop(ns, "few", spec))
		refs := keptCheckpoints(loop)
		Expect(refs).To(HaveLen(2))
		Expect(refs[0].Iteration).To(Equal(int32(5)))
		Expect(refs[1].Iteration).To(Equal(int32(6)))
		oldest := refs[0].Segment
		Expect(oldest).To(BeNumerically(">", 1), "a 4 KiB segment cap must have moved the checkpoints on")
		for n := loop.Status.EventLog.FirstSegment; n < oldest; n++ {
			cm := &corev1.ConfigMap{}
			Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: configmaps.SegmentName("few", n)}, cm)).To(Succeed())
			Expect(cm.Data).NotTo(HaveKey(configmaps.CheckpointsKey), "segment %d", n)
		}
		loopEvents(loop)
	})

	It("checkpoints every checkpointEvery iterations", func() {
		spec := countToFive()
		spec.History = &v1alpha1.HistorySpec{CheckpointEvery: i32(2)}
		loop := waitFinished(createLoop(ns, "every2", spec))
		var its []int32
		for _, r := range keptCheckpoints(loop) {
			its = append(its, r.Iteration)
		}
		Expect(its).To(Equal([]int32{2, 4, 6}))
	})

	It("forks from iteration 3 of a finished loop to the same final state", func() {
		orig := waitFinished(createLoop(ns, "orig", countToFive()))
		spec := countToFive()
		spec.ResumeFrom = &v1alpha1.ResumeFrom{Loop: "orig", Iteration: i32(3)}
		fork := waitFinished(createLoop(ns, "fork", spec))
		Expect(fork.Status.Phase).To(Equal(orig.Status.Phase))
		Expect(fork.Status.CurrentState).To(Equal(orig.Status.CurrentState))
		Expect(fork.Status.Iteration).To(Equal(orig.Status.Iteration))
		Expect(fork.Status.Captured["n"].Output).To(Equal(orig.Status.Captured["n"].Output))
		Expect(fork.Status.Captured["n"].Verdict).To(Equal(orig.Status.Captured["n"].Verdict))
		Expect(fork.Status.LastResult.Verdict).To(Equal(orig.Status.LastResult.Verdict))
		Expect(fork.Status.RunID).NotTo(Equal(orig.Status.RunID))
		types := eventTypes(loopEvents(fork))
		Expect(types[:2]).To(Equal([]string{executor.EventLoopStart, executor.EventLoopFork}))
		Expect(strings.Count(strings.Join(types, ","), executor.EventStateEnter)).To(Equal(3), "iterations 4 to 6 only")

		again := getLoop(Default, client.ObjectKeyFromObject(orig))
		Expect(again.Status.RunState).To(Equal(orig.Status.RunState), "the source is not touched")
	})

	It("reports a fork whose checkpoint is missing, without starting", func() {
		spec := countToFive()
		spec.ResumeFrom = &v1alpha1.ResumeFrom{Loop: "nowhere", Iteration: i32(3)}
		key := createLoop(ns, "orphan", spec)
		Eventually(func(g Gomega) {
			loop := getLoop(g, key)
			g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhasePending))
			c := condition(loop, v1alpha1.CheckpointErrorCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonCheckpointMissing))
			g.Expect(c.Message).To(ContainSubstring("nowhere"))
			g.Expect(condition(loop, v1alpha1.StalledCondition)).NotTo(BeNil())
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		Eventually(func() []string { return warningReasons(ns) }).Should(ContainElement(v1alpha1.ReasonCheckpointMissing))
	})

	It("detects a checkpoint whose bytes were altered", func() {
		key := createLoop(ns, "tampered", countToFive())
		loop := waitFinished(key)
		corruptCheckpoint(loop, 3)
		three := int32(3)
		_, _, err := configmaps.FindCheckpoint(bg, k8sClient, loop, &three)
		Expect(err).To(MatchError(history.ErrCorrupt))
		kept, err := configmaps.Checkpoints(bg, k8sClient, loop)
		Expect(err).NotTo(HaveOccurred())
		Expect(kept[2].Err).To(MatchError(history.ErrCorrupt), "listed as damaged")

		requestOn(key, "rewind:3")
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.LastRequest).To(Equal("rewind:3"))
			c := condition(l, v1alpha1.CheckpointErrorCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonCheckpointCorrupt))
			g.Expect(c.Message).To(ContainSubstring("iteration 3"))
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		l := getLoop(Default, key)
		Expect(l.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), "a failed rewind leaves the run as it was")
		Eventually(func() []string { return warningReasons(ns) }).Should(ContainElement(v1alpha1.ReasonCheckpointCorrupt))

		spec := countToFive()
		spec.ResumeFrom = &v1alpha1.ResumeFrom{Loop: "tampered", Iteration: i32(3)}
		forkKey := createLoop(ns, "from-tampered", spec)
		Eventually(func(g Gomega) {
			c := condition(getLoop(g, forkKey), v1alpha1.CheckpointErrorCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonCheckpointCorrupt))
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
	})

	It("rewinds a finished loop to one of its checkpoints and runs on", func() {
		key := createLoop(ns, "rewound", countToFive())
		first := waitFinished(key)
		requestOn(key, "rewind:2")
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.LastRequest).To(Equal("rewind:2"))
			g.Expect(l.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.Iteration).To(Equal(int32(6)))
		Expect(loop.Status.Captured["n"].Output).To(Equal("5"))
		Expect(loop.Status.RunID).To(Equal(first.Status.RunID + "-w1"))
		evs := loopEvents(loop)
		var rewind *executor.Event
		for i := range evs {
			if evs[i].Type == executor.EventLoopRewind {
				rewind = &evs[i]
			}
		}
		Expect(rewind).NotTo(BeNil())
		Expect(executor.LoopRewindOf(*rewind).Iteration).To(BeEquivalentTo(2))
		Expect(executor.LoopRewindOf(*rewind).FromIteration).To(BeEquivalentTo(6))
		Expect(rewind.Seq).To(BeNumerically(">", first.Status.LastSeq))
		Expect(condition(loop, v1alpha1.CheckpointErrorCondition)).To(BeNil())
	})

	It("stops a running loop at once", func() {
		spec := v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "sleep 60", Next: "done"},
			"done": {Terminal: true},
		}}
		key := createLoop(ns, "stopped", spec)
		Eventually(func(g Gomega) { g.Expect(getLoop(g, key).Status.Action).NotTo(BeNil()) }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		requestOn(key, "stop")
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseInterrupted))
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedStopped))
		Expect(loop.Status.Action).NotTo(BeNil(), "kept, so that a continued run runs it again")
		Expect(loop.Status.Action.Pod).To(BeEmpty())
		Expect(condition(loop, v1alpha1.StalledCondition).Reason).To(Equal(v1alpha1.ReasonStopped))
		Eventually(op.local.Running, 10*time.Second).Should(BeZero(), "the action was killed")
	})

	It("bounds the event log by history.maxEventBytes", func() {
		spec := v1alpha1.LoopSpec{Initial: "spin", MaxIterations: i32(40), MaxEdgeRevisits: i32(100),
			History: &v1alpha1.HistorySpec{MaxEventBytes: ptr64(10000), CheckpointEvery: i32(0)},
			States: map[string]v1alpha1.State{
				"spin": {Action: "echo spinning", OnSuccess: "$current"},
				"done": {Terminal: true},
			}}
		loop := waitFinished(createLoop(ns, "bounded", spec))
		st := loop.Status.EventLog
		Expect(st.FirstSegment).To(BeNumerically(">", 1))
		Expect(st.Bytes).To(BeNumerically("<=", 10000+4096))
		Expect(loop.Status.Checkpoints).To(BeNil())
		var list corev1.ConfigMapList
		Expect(k8sClient.List(bg, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelLoop: "bounded"})).To(Succeed())
		Expect(int32(len(list.Items))).To(Equal(st.LastSegment - st.FirstSegment + 1))
	})
})

func ptr64(v int64) *int64 { return &v }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
