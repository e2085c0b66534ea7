//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

var _ = Describe("Exit hooks on a real node", func() {
	It("runs a Loop's onExit as a Pod of its namespace when it ends, which posts how it ended to a receiver Pod", func() {
		ns := newNamespace()
		// The receiver answers one request and prints it.
		receiver := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "receiver"}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "nc", Image: actionsImage, Command: []string{"/bin/sh", "-c",
				`(printf 'HTTP/1.0 200 OK\r\n\r\nok\n'; sleep 5) | nc -l -p 8080`},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
		Expect(k8sClient.Create(bg, receiver)).To(Succeed())
		var ip string
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(bg, client.ObjectKeyFromObject(receiver), receiver)).To(Succeed())
			g.Expect(receiver.Status.Phase).To(Equal(corev1.PodRunning))
			ip = receiver.Status.PodIP
			g.Expect(ip).NotTo(BeEmpty())
		}, 2*time.Minute, time.Second).Should(Succeed())
		time.Sleep(time.Second) // nc listens

		spec := v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
			"work": {Action: "echo working", Next: "done"}, "done": {Terminal: true}},
			OnExit: &v1alpha1.ExitHook{Action: `wget -q -O- --post-data "phase=${loop.phase}&state=${loop.final_state}&by=${loop.terminated_by}" http://` + ip + `:8080/`},
		}
		key := create(ns, "notify", spec)
		var loop *v1alpha1.Loop
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			g.Expect(loop.Status.ExitHook).NotTo(BeNil())
			g.Expect(loop.Status.ExitHook.Phase).NotTo(Equal(v1alpha1.ExitHookRunning))
		}, 3*time.Minute, time.Second).Should(Succeed())
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		h := loop.Status.ExitHook
		Expect(h.Phase).To(Equal(v1alpha1.ExitHookSucceeded), "exit hook %+v (exit %v); its log:\n%s\nthe receiver's log:\n%s",
			*h, ptr.Deref(h.ExitCode, -1), logsOf(ns, h.Pod), logsOf(ns, "receiver"))
		hook := &corev1.Pod{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: loop.Status.ExitHook.Pod}, hook)).To(Succeed())
		Expect(hook.Spec.Containers[0].Image).To(Equal(actionsImage))
		Eventually(func() string {
			return run("kubectl", "logs", "-n", ns, "receiver")
		}, time.Minute, time.Second).Should(ContainSubstring("phase=Completed&state=done&by=terminal"))
		out := run("kubectl", "get", "events", "-n", ns, "--field-selector", "reason=ExitHookSucceeded", "-o", "name")
		Expect(strings.TrimSpace(out)).NotTo(BeEmpty())
	})
})

// logsOf is a Pod's log, or why there is none.
func logsOf(ns, pod string) string { return kubectlOut("logs", "-n", ns, pod, "--all-containers") }

// kubectlOut is what kubectl says, for a failure's message: its output, or
// why it failed.
func kubectlOut(args ...string) string {
	out, err := exec.Command("kubectl", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%v) %s", err, out)
	}
	return string(out)
}
