package controllers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// oneStep is a Loop of one action that ends in a failure state on error.
func oneStep(action string) v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
		"work":   {Action: action, OnSuccess: "done", OnFailure: "done", OnError: "failed"},
		"done":   {Terminal: true},
		"failed": {Terminal: true, Failure: ptr.To(true)},
	}}
}

var _ = Describe("A step that can never be taken", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("ends in error when the working directory of local actions cannot be made", func() {
		notADir := filepath.Join(GinkgoT().TempDir(), "looprun")
		Expect(os.WriteFile(notADir, []byte("a file"), 0o644)).To(Succeed())
		op := startOperator(Config{LocalWorkdir: notADir})
		DeferCleanup(op.stop)
		loop := waitFinished(createLoop(ns, "nowhere", oneStep("echo hi")))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(judgeError(loop)).To(ContainSubstring("not a directory"))
		for _, e := range loopEvents(loop) {
			Expect(e.Type).NotTo(Equal(executor.EventActionRestarted), "the action was never lost: it never started")
		}
	})

	It("ends in error when the API server rejects the action's Pod", func() {
		op := startPodOperator(Config{})
		DeferCleanup(op.stop)
		spec := oneStep("echo hi")
		spec.Runner = &v1alpha1.RunnerSpec{Env: []corev1.EnvVar{{Name: "NOT=A NAME", Value: "x"}}}
		loop := waitFinished(createLoop(ns, "bad-env", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(judgeError(loop)).To(And(ContainSubstring("the action cannot start"), ContainSubstring("env")))
	})

	It("ends the run with its reason when the status outgrows what the API server stores", func() {
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		// The spec just fits in etcd (1.5 MiB a write); four captures of
		// 4,000 bytes each in the status do not.
		spec := v1alpha1.LoopSpec{Initial: "s0", States: map[string]v1alpha1.State{"done": {Terminal: true}},
			Context: map[string]apiextensionsv1.JSON{"ballast": jsonOf(strings.Repeat("z", 1560000))}}
		for i, next := range []string{"s1", "s2", "s3", "done"} {
			spec.States[fmt.Sprintf("s%d", i)] = v1alpha1.State{Action: "head -c 4000 /dev/zero | tr '\\0' x", Capture: fmt.Sprintf("c%d", i), Next: next}
		}
		loop := waitFinished(createLoop(ns, "huge", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(loop.Status.Message).To(ContainSubstring("status cannot be saved"))
		c := condition(loop, v1alpha1.StalledCondition)
		Expect(c).NotTo(BeNil())
		Expect(c.Message).To(ContainSubstring("status cannot be saved"))
	})

	It("says why it waits while a quota refuses a child Loop, and goes on once it is lifted", func() {
		op := startOperator(Config{})
		DeferCleanup(op.stop)
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "loops", Namespace: ns},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/loops.looprun.io": resource.MustParse("1")}}}
		Expect(k8sClient.Create(bg, quota)).To(Succeed())
		// No quota controller runs here: the status it would write.
		quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{"count/loops.looprun.io": resource.MustParse("0")}}
		Expect(k8sClient.Status().Update(bg, quota)).To(Succeed())
		createTemplate(ns, "inner", oneStep("true"), nil)
		key := createLoop(ns, "outer", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":  {Loop: "inner", OnSuccess: "done"},
			"done": {Terminal: true},
		}})
		Eventually(func(g Gomega) {
			c := condition(getLoop(g, key), v1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonRetrying))
			g.Expect(c.Message).To(ContainSubstring("exceeded quota"))
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
		Expect(k8sClient.Delete(bg, quota)).To(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), loop.Status.Message)
	})
})

var _ = DescribeTable("which errors of a step are permanent",
	func(err error, want bool) { Expect(permanent(err)).To(Equal(want)) },
	Entry("invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), true),
	Entry("a LimitRange", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("maximum cpu usage per Container is 1, but limit is 2")), true),
	Entry("Pod Security", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New(`violates PodSecurity "restricted:latest": privileged`)), true),
	Entry("a full quota", apierrors.NewForbidden(schema.GroupResource{Resource: "loops"}, "c", errors.New("exceeded quota: loops")), false),
	Entry("a service account not made yet", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New(`error looking up service account ns/default: serviceaccount "default" not found`)), false),
	Entry("a conflict", apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("changed")), false),
	Entry("a working directory that is a file", &os.PathError{Op: "mkdir", Path: "/x", Err: syscall.ENOTDIR}, true),
)
