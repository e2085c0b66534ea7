package controllers

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/test/proc"
)

var _ = Describe("Loop lifecycle", func() {
	var (
		ns      string
		op      *operator
		workdir string
	)
	BeforeEach(func() {
		ns = newNamespace()
		workdir = GinkgoT().TempDir()
		op = startOperator(Config{SegmentBytes: 2048, MaxEventBytes: 8192, LocalWorkdir: workdir})
		DeferCleanup(func() { op.stop() })
	})

	It("deletes the oldest event-log segments past the retention limit", func() {
		spec := v1alpha1.LoopSpec{Initial: "spin", MaxIterations: i32(40), MaxEdgeRevisits: i32(100), States: map[string]v1alpha1.State{
			"spin": {Action: "true", OnSuccess: "$current"},
			"done": {Terminal: true},
		}}
		loop := waitFinished(createLoop(ns, "retained", spec))
		log := loop.Status.EventLog
		Expect(log.FirstSegment).To(BeNumerically(">", 1), "old segments must have gone")
		Expect(log.Bytes).To(BeNumerically("<=", 8192+2048))
		for n := int32(1); n < log.FirstSegment; n++ {
			err := k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: configmaps.SegmentName("retained", n)}, &corev1.ConfigMap{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "segment %d: %v", n, err)
		}
		evs, err := configmaps.Read(bg, k8sClient, loop)
		Expect(err).NotTo(HaveOccurred())
		Expect(evs).NotTo(BeEmpty())
		first := evs[0].Seq
		for i, e := range evs {
			Expect(e.Seq).To(Equal(first+int64(i)), "the kept events are contiguous")
		}
		Expect(evs[len(evs)-1].Seq).To(Equal(loop.Status.LastSeq))
		Expect(log.Count).To(Equal(int64(len(evs))))
	})

	It("gives the run the context a local run gets: run_dir, made before the action, max_steps, input_hash", func() {
		spec := v1alpha1.LoopSpec{Initial: "use", MaxIterations: i32(7), States: map[string]v1alpha1.State{
			"use": {Action: "echo ${context.max_steps} ${context.input_hash} > ${context.run_dir:shell}note && cat ${context.run_dir:shell}note && echo ${context.run_dir}",
				Capture: "used", Next: "done"},
			"done": {Terminal: true},
		}}
		spec.SetContext("input", "fix the login page")
		loop := waitFinished(createLoop(ns, "ctx", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), loop.Status.Message)
		runDir := RunDirBase + "/" + string(loop.UID)[:8] + "/"
		Expect(loop.Status.Captured["used"].Output).To(Equal("7 11a102aa3604\n" + runDir))
		Expect(filepath.Join(workdir, ns, "ctx", runDir, "note")).To(BeAnExistingFile())
	})

	It("kills the running action of a deleted Loop", func() {
		spec := v1alpha1.LoopSpec{Initial: "slow", States: map[string]v1alpha1.State{
			"slow": {Action: "echo $$ > pid; exec sleep 60", Next: "done"},
			"done": {Terminal: true},
		}}
		key := createLoop(ns, "doomed", spec)
		pid := 0
		Eventually(func(g Gomega) {
			b, err := os.ReadFile(filepath.Join(workdir, ns, "doomed", "pid"))
			g.Expect(err).NotTo(HaveOccurred())
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			g.Expect(err).NotTo(HaveOccurred())
		}).Should(Succeed(), "the action runs")
		Eventually(func() float64 { return testutil.ToFloat64(runningLoops) }).Should(BeNumerically(">=", 1))
		running := testutil.ToFloat64(runningLoops)
		Expect(k8sClient.Delete(bg, getLoop(Default, key))).To(Succeed())
		Eventually(func() int { return op.local.Running() }).Should(BeZero(), "the action must be killed, not left to finish")
		Eventually(func() bool { return proc.Alive(pid) }).Should(BeFalse(), "the action's process went on after its Loop was deleted")
		// Everything kept for it goes: the running gauge drops, and the
		// reconciler remembers nothing of it.
		// (At most: a Loop an earlier spec left running may end meanwhile.)
		Eventually(func() float64 { return testutil.ToFloat64(runningLoops) }).Should(BeNumerically("<=", running-1))
		Eventually(func() bool { _, ok := op.reconciler.memory.byKey.Load(key); return ok }).Should(BeFalse())
	})

	It("applies a raised maxIterations to a running Loop and records the change", func() {
		spec := v1alpha1.LoopSpec{Initial: "spin", MaxIterations: i32(3), MaxEdgeRevisits: i32(100), States: map[string]v1alpha1.State{
			"spin": {Action: "sleep 0.3", OnSuccess: "$current"},
			"done": {Terminal: true},
		}}
		key := createLoop(ns, "raised", spec)
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Iteration).To(BeNumerically(">=", 1))
		}).Should(Succeed())
		loop := getLoop(Default, key)
		patch := client.MergeFrom(loop.DeepCopy())
		loop.Spec.MaxIterations = i32(6)
		Expect(k8sClient.Patch(bg, loop, patch)).To(Succeed())
		loop = waitFinished(key)
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedMaxIterations))
		Expect(loop.Status.Iteration).To(Equal(int32(6)))
		changes := 0
		for _, e := range loopEvents(loop) {
			if e.Type == executor.EventSpecChanged {
				changes++
			}
		}
		Expect(changes).To(Equal(1))
	})

	It("says once, in a Kubernetes Event, why a Loop cannot run", func() {
		spec := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a":    {Action: "echo ${captured.nothing.output}", Next: "done"},
			"done": {Terminal: true},
		}}
		createLoop(ns, "unrunnable", spec)
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(k8sClient.List(bg, &list, client.InNamespace(ns))).To(Succeed())
			n := 0
			for _, e := range list.Items {
				if e.Reason == "InvalidSpec" {
					n++
					g.Expect(e.Note).To(ContainSubstring(`spec.states[a].action`))
					g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
				}
			}
			g.Expect(n).To(Equal(1))
		}).Should(Succeed())
	})

	It("counts transitions and action durations in the metrics", func() {
		before := testutil.ToFloat64(transitions)
		loop := waitFinished(createLoop(ns, "measured", fixUntilClean()))
		Expect(testutil.ToFloat64(transitions) - before).To(BeNumerically(">=", float64(loop.Status.Iteration)))
		Expect(testutil.CollectAndCount(actionDuration)).To(Equal(1))
		// Loops by phase are counted from the cache at each scrape.
		Eventually(func(g Gomega) {
			g.Expect(gauge(g, "looprun_loops", "phase", "Completed")).To(BeNumerically(">=", 1))
		}).Should(Succeed())
		Expect(testutil.CollectAndCount(loopsCollector, "looprun_loops")).To(Equal(7))
		Expect(testutil.CollectAndCount(loopsCollector, "looprun_loops_waiting")).To(Equal(4))
	})
})
