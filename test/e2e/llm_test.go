//go:build e2e

package e2e

import (
	"net"
	"net/url"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// startLLMServer serves a stand-in for the Messages API on this machine's
// own address (the API server's), where the operator Pod reaches it.
func startLLMServer() *fixture.LLMServer {
	GinkgoHelper()
	cfg, err := clientcmd.LoadFromFile(os.Getenv("KUBECONFIG"))
	Expect(err).NotTo(HaveOccurred())
	server, err := url.Parse(cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server)
	Expect(err).NotTo(HaveOccurred())
	l, err := net.Listen("tcp", net.JoinHostPort(server.Hostname(), "0"))
	Expect(err).NotTo(HaveOccurred())
	s := fixture.NewLLMServer(l, false)
	DeferCleanup(s.Close)
	return s
}

var _ = Describe("The LLM judge with the chart's rights", Serial, func() {
	It("reads a Loop's key as the Loop's service account, and sends it only to an allowed endpoint", func() {
		llm := startLLMServer()
		DeferCleanup(func() { installOperator("e2e", "replicas=1") })
		installOperator("e2e", "replicas=1", "llm.allowedBaseURLs={"+llm.URL+"}")

		ns := newNamespace()
		for name, key := range map[string]string{"readable": "tenant-key", "unreadable": "secret-of-another-team"} {
			Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				StringData: map[string]string{"api-key": key}})).To(Succeed())
		}
		// The Loop's service account may read one of them.
		Expect(k8sClient.Create(bg, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-llm-key"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"readable"}, Verbs: []string{"get"}}}})).To(Succeed())
		Expect(k8sClient.Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-llm-key"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-llm-key"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}}})).To(Succeed())

		judged := func(secret string) v1alpha1.LoopSpec {
			return v1alpha1.LoopSpec{Initial: "check",
				LLM: &v1alpha1.LLMSpec{BaseURL: llm.URL, APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: secret, Key: "api-key"}},
				States: map[string]v1alpha1.State{
					"check":  {Action: "echo hi", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalLLMStructured}, OnSuccess: "done", OnFailure: "done", OnError: "failed"},
					"done":   {Terminal: true},
					"failed": {Terminal: true, Failure: ptr.To(true)},
				}}
		}
		ok := waitFinished(create(ns, "readable", judged("readable")), 2*time.Minute)
		Expect(ok.Status.CurrentState).To(Equal("done"), describe(ok))
		Expect(ok.Status.LastResult.Verdict).NotTo(Equal(v1alpha1.VerdictError), resultDetails(ok))

		refused := waitFinished(create(ns, "unreadable", judged("unreadable")), 2*time.Minute)
		Expect(refused.Status.CurrentState).To(Equal("failed"), describe(refused))
		Expect(resultDetails(refused)).To(And(ContainSubstring("as service account default"), ContainSubstring("forbidden")))
		Expect(llm.SentKeys()).To(Equal([]string{"tenant-key"}), "only the key the Loop's account may read went out, once")
	})
})
