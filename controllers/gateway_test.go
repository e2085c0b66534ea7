package controllers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner/pod"
)

// An agent that prints a small, false usage once the test lets it go.
const lyingAgentScript = `#!/bin/sh
while [ ! -f "$GO_ON" ]; do sleep 0.05; done
printf '%s\n' '{"type":"system","subtype":"init","model":"claude-sonnet-4-6"}'
printf '%s\n' '{"type":"result","total_cost_usd":0.000001,"usage":{"input_tokens":1,"output_tokens":1}}'
`

// withStepPod waits for the Loop's action to run in a Pod the status
// names (by uid), and returns the Loop.
func withStepPod(key types.NamespacedName) *v1alpha1.Loop {
	var loop *v1alpha1.Loop
	Eventually(func(g Gomega) {
		loop = getLoop(g, key)
		g.Expect(loop.Status.Action).NotTo(BeNil())
		g.Expect(loop.Status.Action.PodUID).NotTo(BeEmpty())
	}).Should(Succeed())
	return loop
}

var _ = Describe("The model gateway, from the operator's side", func() {
	var (
		ns, gatewayNS string
		store         *ledger.Store
	)
	gateway := &pod.Gateway{URL: "http://looprun-gateway.looprun-system.svc:8080", Audience: "looprun-gateway"}
	BeforeEach(func() {
		ns, gatewayNS = newNamespace(), newNamespace()
		store = &ledger.Store{Client: k8sClient, Namespace: gatewayNS}
		prices, err := pricing.Parse([]byte("models: {claude-sonnet-4-6: {input: 2, output: 10, cacheRead: 0.1, cacheCreation: 0}, claude-haiku-4-5: {input: 1, output: 5}}"))
		Expect(err).NotTo(HaveOccurred())
		op := startPodOperator(Config{Prices: prices, LedgerNamespace: gatewayNS, Pods: pod.Options{Gateway: gateway,
			Egress: pod.Egress{GatewayNamespace: "looprun-system", GatewayLabels: map[string]string{"app.kubernetes.io/component": "gateway"}, GatewayPort: 8080}}})
		DeferCleanup(op.stop)
	})

	It("bills a step what the gateway metered, keeps what the agent printed as reported, and drops the ledger", func() {
		goOn := filepath.Join(GinkgoT().TempDir(), "go-on")
		agent := filepath.Join(GinkgoT().TempDir(), "agent")
		Expect(os.WriteFile(agent, []byte(lyingAgentScript), 0o755)).To(Succeed())
		spec := v1alpha1.LoopSpec{Initial: "fix",
			Agent:  &v1alpha1.AgentSpec{Command: []string{agent}},
			Runner: &v1alpha1.RunnerSpec{Env: []corev1.EnvVar{{Name: "GO_ON", Value: goOn}}},
			States: map[string]v1alpha1.State{
				"fix":  {Action: "fix it", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "done"},
				"done": {Terminal: true},
			}}
		key := createLoop(ns, "metered", spec)
		loop := withStepPod(key)
		p := &corev1.Pod{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: loop.Status.Action.Pod}, p)).To(Succeed())
		Expect(string(p.UID)).To(Equal(loop.Status.Action.PodUID), "status.action.podUID is the uid of the Pod made")
		for _, e := range p.Spec.Containers[0].Env {
			Expect(e.Name).NotTo(Equal("ANTHROPIC_API_KEY"))
		}
		Expect(p.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "ANTHROPIC_BASE_URL", Value: gateway.URL}))

		// The gateway's count: two calls of two models, one recorded twice.
		step := ledger.Step{Namespace: ns, Loop: "metered", LoopUID: loop.UID, Pod: p.Name, PodUID: p.UID, Run: loop.Status.RunID, Iteration: 1, State: "fix"}
		Expect(store.Record(bg, step, ledger.Call{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 100, Final: true})).To(Succeed())
		Expect(store.Record(bg, step, ledger.Call{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 100, Final: true})).To(Succeed())
		Expect(store.Record(bg, step, ledger.Call{ID: "msg_2", Model: "claude-haiku-4-5", InputTokens: 500, OutputTokens: 20, Final: true})).To(Succeed())
		Expect(os.WriteFile(goOn, nil, 0o644)).To(Succeed())

		loop = waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		u := loop.Status.Usage
		Expect(u).NotTo(BeNil())
		// 1000×2 + 100×10 = 3000; 500×1 + 20×5 = 600: each call at its model's price.
		Expect(u.UsageTotals).To(Equal(v1alpha1.UsageTotals{Calls: 2, InputTokens: 1500, OutputTokens: 120, CostMicroUSD: 3600, Model: "claude-sonnet-4-6"}))
		Expect(u.Reported).NotTo(BeNil())
		Expect(u.Reported.InputTokens).To(Equal(int64(1)))
		Expect(u.Reported.CLICostMicroUSD).To(Equal(int64(1)))
		for _, e := range loopEvents(loop) {
			if e.Type == "action_complete" {
				Expect(e.Data).To(HaveKeyWithValue("metered", true))
				Expect(e.Data).To(HaveKeyWithValue("input_tokens", json.Number("1500")))
				Expect(e.Data).To(HaveKey("reported_usage"))
			}
		}
		Eventually(func() bool {
			err := k8sClient.Get(bg, types.NamespacedName{Namespace: gatewayNS, Name: ledger.Name(p.UID)}, &corev1.ConfigMap{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "the counted step's ledger is dropped")
	})

	It("waits at a step's end for a call the ledger shows open, and bills a cut-off one as last seen", func() {
		goOn := filepath.Join(GinkgoT().TempDir(), "go-on")
		agent := filepath.Join(GinkgoT().TempDir(), "agent")
		Expect(os.WriteFile(agent, []byte(lyingAgentScript), 0o755)).To(Succeed())
		key := createLoop(ns, "late", v1alpha1.LoopSpec{Initial: "fix",
			Agent:  &v1alpha1.AgentSpec{Command: []string{agent}},
			Runner: &v1alpha1.RunnerSpec{Env: []corev1.EnvVar{{Name: "GO_ON", Value: goOn}}},
			States: map[string]v1alpha1.State{
				"fix":  {Action: "fix it", ActionType: v1alpha1.ActionAgent, Next: "done"},
				"done": {Terminal: true},
			}})
		loop := withStepPod(key)
		step := ledger.Step{Namespace: ns, Loop: "late", LoopUID: loop.UID, Pod: loop.Status.Action.Pod,
			PodUID: types.UID(loop.Status.Action.PodUID), Run: loop.Status.RunID, Iteration: 1, State: "fix"}
		// Two calls started: one whose end the gateway ships just after
		// the Pod ended, one cut off (never final).
		Expect(store.Record(bg, step, ledger.Call{ID: "msg_late", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 10})).To(Succeed())
		Expect(store.Record(bg, step, ledger.Call{ID: "msg_cut", Model: "claude-sonnet-4-6", InputTokens: 100, OutputTokens: 10})).To(Succeed())
		Expect(os.WriteFile(goOn, nil, 0o644)).To(Succeed())
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: step.Pod}, p)).To(Succeed())
			g.Expect(p.Status.Phase).To(BeElementOf(corev1.PodSucceeded, corev1.PodFailed))
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
		time.Sleep(200 * time.Millisecond)
		Expect(store.Record(bg, step, ledger.Call{ID: "msg_late", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 100, Final: true})).To(Succeed())

		loop = waitFinished(key)
		u := loop.Status.Usage
		Expect(u).NotTo(BeNil())
		Expect(u.Calls).To(Equal(int64(2)))
		Expect(u.OutputTokens).To(Equal(int64(110)), "the late call's final count and the cut-off call's last one")
	})

	It("bills a step that made no call through the gateway nothing, whatever it printed", func() {
		agent := filepath.Join(GinkgoT().TempDir(), "agent")
		goOn := filepath.Join(GinkgoT().TempDir(), "go-on")
		Expect(os.WriteFile(goOn, nil, 0o644)).To(Succeed())
		Expect(os.WriteFile(agent, []byte(lyingAgentScript), 0o755)).To(Succeed())
		loop := waitFinished(createLoop(ns, "silent", v1alpha1.LoopSpec{Initial: "fix",
			Agent:  &v1alpha1.AgentSpec{Command: []string{agent}},
			Runner: &v1alpha1.RunnerSpec{Env: []corev1.EnvVar{{Name: "GO_ON", Value: goOn}}},
			States: map[string]v1alpha1.State{
				"fix":  {Action: "fix it", ActionType: v1alpha1.ActionAgent, Next: "done"},
				"done": {Terminal: true},
			}}))
		Expect(loop.Status.Usage).NotTo(BeNil())
		Expect(loop.Status.Usage.CostMicroUSD).To(BeZero())
		Expect(loop.Status.Usage.InputTokens).To(BeZero())
		Expect(loop.Status.Usage.Reported.InputTokens).To(Equal(int64(1)))
	})

	It("restricts an agent Loop's egress to the gateway, DNS and what it lists, and follows spec edits", func() {
		spec := v1alpha1.LoopSpec{Initial: "fix",
			Agent:  &v1alpha1.AgentSpec{Command: []string{"true"}},
			Runner: &v1alpha1.RunnerSpec{Network: &v1alpha1.NetworkSpec{Allow: []v1alpha1.EgressRule{{CIDR: "10.9.8.7/32", Ports: []int32{443}}}}},
			States: map[string]v1alpha1.State{
				"fix":  {Action: "fix it", ActionType: v1alpha1.ActionAgent, Next: "done"},
				"done": {Terminal: true},
			}}
		loop := waitFinished(createLoop(ns, "fenced", spec))
		np := &networkingv1.NetworkPolicy{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: "fenced-egress"}, np)).To(Succeed())
		Expect(metav1.GetControllerOf(np).UID).To(Equal(loop.UID))
		Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}))
		Expect(np.Spec.PodSelector.MatchLabels).To(Equal(map[string]string{v1alpha1.LabelLoop: "fenced"}))
		Expect(np.Spec.Egress).To(HaveLen(3)) // DNS, the gateway, 10.9.8.7:443
		Expect(np.Spec.Egress[1].To[0].NamespaceSelector.MatchLabels).To(HaveKeyWithValue("kubernetes.io/metadata.name", "looprun-system"))
		Expect(np.Spec.Egress[1].Ports[0].Port.IntValue()).To(Equal(8080))
		Expect(np.Spec.Egress[2].To[0].IPBlock.CIDR).To(Equal("10.9.8.7/32"))

		// A shell-only Loop is Unrestricted by default: no policy.
		waitFinished(createLoop(ns, "open", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}))
		err := k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: "open-egress"}, &networkingv1.NetworkPolicy{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)

		// A block that does not parse is refused at admission, naming the field.
		spec.Runner.Network.Allow[0].CIDR = "github.com"
		err = k8sClient.Create(bg, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "badcidr"}, Spec: spec})
		Expect(err).To(MatchError(And(ContainSubstring("spec.runner.network.allow[0].cidr"), ContainSubstring("an address block"))))
		spec.Runner.Network.Allow[0].CIDR = "10.9.8.7/32"

		// A Loop may open its own Pods: no policy.
		spec.Runner.Network = &v1alpha1.NetworkSpec{Egress: v1alpha1.EgressUnrestricted}
		waitFinished(createLoop(ns, "opened", spec))
		err = k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: "opened-egress"}, &networkingv1.NetworkPolicy{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)

		// A policy of the name the Loop does not own is not taken as its own.
		Expect(k8sClient.Create(bg, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-egress"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{}}}})).To(Succeed())
		spec.Runner.Network = nil
		taken := waitFinished(createLoop(ns, "taken", spec))
		var failure string
		for _, e := range loopEvents(taken) {
			if e.Type == "action_complete" {
				failure = executor.ActionCompleteOf(e).Failure.Reason
			}
		}
		Expect(failure).To(Equal("EgressPolicyNameTaken"))
	})
})
