//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
)

var _ = Describe("LoopSchedules on a real node", func() {
	It("fires a schedule on time: its run is a Loop of real Pods, owned by the schedule, and the schedule reports its end", func() {
		ns := newNamespace()
		// The sample is accepted and kept (its next run is tonight).
		applyFile(ns, filepath.Join(root, "config", "samples", "looprun_v1alpha1_loopschedule.yaml"))
		run("kubectl", "wait", "-n", ns, "--for=condition=Ready", "loopschedule/nightly-check", "--timeout=60s")

		sch := &v1alpha1.LoopSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "every-minute"}, Spec: v1alpha1.LoopScheduleSpec{
			Schedule: "* * * * *",
			Loop: &v1alpha1.LoopRunTemplate{Spec: v1alpha1.LoopSpec{Initial: "hello", States: map[string]v1alpha1.State{
				"hello": {Action: "echo scheduled", Next: "done"}, "done": {Terminal: true}}}},
		}}
		Expect(k8sClient.Create(bg, sch)).To(Succeed())
		var runName string
		Eventually(func(g Gomega) {
			list := &v1alpha1.LoopList{}
			g.Expect(k8sClient.List(bg, list, client.InNamespace(ns), client.MatchingLabels{controllers.LabelSchedule: "every-minute"})).To(Succeed())
			g.Expect(list.Items).NotTo(BeEmpty())
			runName = list.Items[0].Name
			g.Expect(metav1.IsControlledBy(&list.Items[0], sch)).To(BeTrue())
		}, 2*time.Minute, time.Second).Should(Succeed())
		loop := waitFinished(client.ObjectKey{Namespace: ns, Name: runName}, 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		// Its Pod's log (the Pod's phase may trail the Loop's end a moment).
		Eventually(func() string {
			out, _ := exec.Command(looprun, "logs", "-n", ns, runName).CombinedOutput()
			return string(out)
		}, 30*time.Second, time.Second).Should(ContainSubstring("scheduled"), "looprun logs %s; the namespace's Pods:\n%s", runName, podsIn(ns))

		Eventually(func(g Gomega) {
			got := &v1alpha1.LoopSchedule{}
			g.Expect(k8sClient.Get(bg, client.ObjectKeyFromObject(sch), got)).To(Succeed())
			g.Expect(got.Status.LastRun).NotTo(BeNil())
			g.Expect(got.Status.LastRun.Phase).To(Equal(v1alpha1.PhaseCompleted))
			g.Expect(got.Status.LastScheduleTime).NotTo(BeNil())
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ReadyCondition)).To(BeTrue())
		}, time.Minute, time.Second).Should(Succeed())
		out := run("kubectl", "get", "lps", "-n", ns)
		Expect(out).To(ContainSubstring("every-minute"))
		Expect(out).To(ContainSubstring("Completed"))

		// Deleting the schedule deletes its runs.
		Expect(k8sClient.Delete(bg, sch)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: runName}, &v1alpha1.Loop{}))
		}, time.Minute, time.Second).Should(BeTrue(), "the run outlived its schedule")
	})
})

// podsIn lists a namespace's Pods with their phases, for a failure's message.
func podsIn(ns string) string { return kubectlOut("get", "pods", "-n", ns, "-o", "wide") }
