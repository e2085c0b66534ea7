package controllers

import (
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/test/fixture"
)

// newLLMServer is a stand-in for the Messages API, closed when the spec ends.
func newLLMServer(hang bool) *fixture.LLMServer {
	s := fixture.NewLLMServer(nil, hang)
	DeferCleanup(s.Close)
	return s
}

// judgedSpec is a Loop whose one state the LLM judge weighs.
func judgedSpec(llm *v1alpha1.LLMSpec) v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "check", LLM: llm, States: map[string]v1alpha1.State{
		"check":  {Action: "echo hi", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalLLMStructured}, OnSuccess: "done", OnFailure: "done", OnError: "failed"},
		"done":   {Terminal: true},
		"failed": {Terminal: true, Failure: ptr.To(true)},
	}}
}

func judgeError(loop *v1alpha1.Loop) string {
	if loop.Status.LastResult == nil || loop.Status.LastResult.Details == nil {
		return ""
	}
	var d map[string]any
	_ = json.Unmarshal(loop.Status.LastResult.Details.Raw, &d)
	s, _ := d["error"].(string)
	return s
}

var _ = Describe("The LLM judge and tenancy", func() {
	var (
		ns      string
		op      *operator
		allowed *fixture.LLMServer
	)
	BeforeEach(func() {
		ns = newNamespace()
		allowed = newLLMServer(false)
		op = startOperator(Config{LLM: LLMConfig{APIKey: "operator-key", BaseURL: allowed.URL, AllowedBaseURLs: []string{allowed.URL + "/"}}})
		DeferCleanup(op.stop)
		Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "victim-db", Namespace: ns},
			StringData: map[string]string{"password": "s3cret"}})).To(Succeed())
	})

	It("sends the operator's key only to the operator's own endpoint", func() {
		loop := waitFinished(createLoop(ns, "own", judgedSpec(nil)))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(allowed.SentKeys()).To(Equal([]string{"operator-key"}))
		// The judge's call counts in the metrics as an agent's does (model
		// "m" is not in the price table: other, unpriced).
		Eventually(func() float64 { return testutil.ToFloat64(agentCalls.WithLabelValues(ns, "other", "false")) }).Should(Equal(1.0))
		Expect(testutil.ToFloat64(agentTokens.WithLabelValues(ns, "other", "input"))).To(Equal(1.0))
	})

	It("refuses a base URL outside the allow-list, and sends it nothing", func() {
		elsewhere := newLLMServer(false)
		spec := judgedSpec(&v1alpha1.LLMSpec{BaseURL: elsewhere.URL,
			APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "victim-db", Key: "password"}})
		loop := waitFinished(createLoop(ns, "exfiltrate", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(judgeError(loop)).To(ContainSubstring("not allowed by the operator"))
		Expect(elsewhere.SentKeys()).To(BeEmpty())
	})

	It("never sends the operator's key to a Loop-chosen endpoint, even an allowed one", func() {
		spec := judgedSpec(&v1alpha1.LLMSpec{BaseURL: allowed.URL})
		loop := waitFinished(createLoop(ns, "borrow", spec))
		Expect(judgeError(loop)).To(ContainSubstring("brings its own key"))
		Expect(allowed.SentKeys()).To(BeEmpty())
	})

	It("reads a named Secret as the Loop's service account: RBAC decides", func() {
		spec := judgedSpec(&v1alpha1.LLMSpec{BaseURL: allowed.URL, APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "victim-db", Key: "password"}})
		loop := waitFinished(createLoop(ns, "not-mine", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(judgeError(loop)).To(And(ContainSubstring("as service account default"), ContainSubstring("forbidden")))
		Expect(allowed.SentKeys()).To(BeEmpty(), "the secret reached no endpoint")

		// Granted to the Loop's service account, the same Secret works.
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-key", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"victim-db"}, Verbs: []string{"get"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read-key", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-key"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ns}}}
		Expect(k8sClient.Create(bg, role)).To(Succeed())
		Expect(k8sClient.Create(bg, binding)).To(Succeed())
		Eventually(func(g Gomega) {
			l := waitFinished(createLoop(ns, "mine-"+time.Now().Format("150405.000")[7:], spec))
			g.Expect(l.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), "authorization decisions are cached for a while")
		}, 30*time.Second).Should(Succeed())
		Expect(allowed.SentKeys()).To(ContainElement("s3cret"))
	})
})

var _ = Describe("A judge that never answers", func() {
	It("stalls no other Loop, is capped, and is cancelled with its Loop", func() {
		ns := newNamespace()
		hang := newLLMServer(true)
		op := startOperator(Config{Workers: 2, LLM: LLMConfig{APIKey: "k", BaseURL: hang.URL, MaxTimeout: time.Minute}})
		DeferCleanup(op.stop)
		var stuck []*v1alpha1.Loop
		for _, name := range []string{"stuck-1", "stuck-2", "stuck-3", "stuck-4"} {
			key := createLoop(ns, name, judgedSpec(nil))
			stuck = append(stuck, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
		}
		Eventually(func(g Gomega) {
			for _, l := range stuck {
				c := condition(getLoop(g, client.ObjectKeyFromObject(l)), v1alpha1.ReadyCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonJudging))
			}
		}, 30*time.Second).Should(Succeed())
		Expect(op.reconciler.Judges.Runner.Running()).To(Equal(4))

		// Four judge calls hang on two workers; an unrelated Loop runs.
		other := waitFinished(createLoop(ns, "unrelated", fixUntilClean()))
		Expect(other.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))

		for _, l := range stuck {
			Expect(k8sClient.Delete(bg, l)).To(Succeed())
		}
		Eventually(op.reconciler.Judges.Runner.Running, 10*time.Second).Should(BeZero(), "deleting the Loops cancels their calls")
	})

	It("ends a call at the operator's cap, whatever the Loop asks", func() {
		ns := newNamespace()
		hang := newLLMServer(true)
		op := startOperator(Config{LLM: LLMConfig{APIKey: "k", BaseURL: hang.URL, MaxTimeout: time.Second}})
		DeferCleanup(op.stop)
		spec := judgedSpec(&v1alpha1.LLMSpec{Timeout: &metav1.Duration{Duration: time.Hour}})
		loop := waitFinished(createLoop(ns, "patient", spec))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(judgeError(loop)).To(ContainSubstring("within 1s"))
	})
})

var _ = Describe("A pattern that backtracks", func() {
	It("is searched in the background: it costs its own Loop time, never a worker", func() {
		ns := newNamespace()
		op := startOperator(Config{Workers: 2})
		DeferCleanup(op.stop)
		hostile := v1alpha1.LoopSpec{Initial: "check",
			Context: map[string]apiextensionsv1.JSON{"log": {Raw: []byte(`"` + strings.Repeat("a", 40) + `!"`)}},
			States: map[string]v1alpha1.State{
				"check": {Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputContains, Pattern: "(a+)+$", Source: "${context.log}"},
					OnSuccess: "done", OnFailure: "done", OnError: "failed"},
				"done":   {Terminal: true},
				"failed": {Terminal: true, Failure: ptr.To(true)},
			}}
		var slow []client.ObjectKey
		for _, name := range []string{"slow-1", "slow-2", "slow-3", "slow-4"} {
			slow = append(slow, createLoop(ns, name, hostile))
		}
		Eventually(func(g Gomega) {
			for _, key := range slow {
				loop := getLoop(g, key)
				c := condition(loop, v1alpha1.ReadyCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Message).To(ContainSubstring("searching the output of state check"))
				// Saved as waiting for its verdict: a wake judges it, never enters it again.
				g.Expect(loop.Status.Action).NotTo(BeNil())
				g.Expect(loop.Status.Action.Verdict).To(BeTrue())
				g.Expect(loop.Status.Iteration).To(Equal(int32(1)))
			}
		}, 30*time.Second).Should(Succeed())

		// Four searches run on two workers; an unrelated Loop runs meanwhile.
		other := waitFinished(createLoop(ns, "unrelated", fixUntilClean()))
		Expect(other.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		for _, key := range slow {
			loop := waitFinished(key)
			Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			Expect(judgeError(loop)).To(ContainSubstring("took too long"))
			Expect(loop.Status.UpdatedAt.After(other.Status.UpdatedAt.Time)).To(BeTrue(),
				"the unrelated Loop ended before the searches gave up")
			// The state waited for its verdict across reconciles, entered once.
			var entered int
			for _, e := range loopEvents(loop) {
				if e.Type == executor.EventStateEnter {
					entered++
				}
			}
			Expect(entered).To(Equal(1), "check, once")
			Expect(loop.Status.Iteration).To(Equal(int32(1)))
		}
	})
})
