//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/test/fixture"
)

// The gateway's Service address in the e2e cluster: fixed, since there is
// no kube-proxy here; the spec routes it to the gateway Pod itself.
const (
	gatewayIP   = "10.97.0.50"
	gatewayPort = "8080"
	gatewayURL  = "http://" + gatewayIP + ":" + gatewayPort
)

var _ = Describe("The model gateway", Ordered, Serial, func() {
	var (
		upstream *fixture.MessagesServer
		key      string
		callCost int64 // what one call of the upstream costs, in micro-dollars
	)

	BeforeAll(func() {
		cfg, err := clientcmd.LoadFromFile(os.Getenv("KUBECONFIG"))
		Expect(err).NotTo(HaveOccurred())
		server, err := url.Parse(cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server)
		Expect(err).NotTo(HaveOccurred())
		l, err := net.Listen("tcp", net.JoinHostPort(server.Hostname(), "0"))
		Expect(err).NotTo(HaveOccurred())
		upstream = fixture.NewMessagesServer(l)
		DeferCleanup(upstream.Close)
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		key = "sk-ant-e2e-" + hex.EncodeToString(b)
		cost, ok := pricing.Default().CostMicroUSD(agentstream.Usage{Model: fixture.MessagesModel,
			InputTokens: fixture.MessagesInputTokens, OutputTokens: fixture.MessagesOutputTokens})
		Expect(ok).To(BeTrue())
		callCost = cost

		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: "model-key"}, StringData: map[string]string{"api-key": key}}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(bg, secret))).To(Succeed())
		DeferCleanup(func() {
			installOperator("e2e")
			Expect(k8sClient.Delete(bg, secret)).To(Succeed())
		})
		installOperator("e2e", "replicas=1", "gateway.apiKeySecret.name=model-key", "gateway.replicas=1",
			"gateway.upstream="+upstream.URL, "gateway.allowedUpstreams={"+upstream.URL+"}",
			"gateway.service.clusterIP="+gatewayIP, "gateway.url="+gatewayURL)
		routeGateway()
	})

	It("keeps the key out of the agent's Pod and bills what the gateway metered, not what the agent printed", func() {
		ns := newNamespace()
		loop := waitFinished(create(ns, "honest", agentLoop("scan json sse")), 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		out := loop.Status.Captured["agent"].Output
		Expect(out).To(ContainSubstring("key found in 0:"), out)
		Expect(out).To(MatchRegexp(`scanned [1-9][0-9]* files and [1-9][0-9]* process environments`))
		Expect(out).To(ContainSubstring("json: ok msg_e2e_"))
		Expect(out).To(ContainSubstring("sse: ok"))

		u := loop.Status.Usage
		Expect(u).NotTo(BeNil())
		Expect(u.Calls).To(Equal(int64(2)))
		Expect(u.InputTokens).To(Equal(int64(2 * fixture.MessagesInputTokens)))
		Expect(u.OutputTokens).To(Equal(int64(2 * fixture.MessagesOutputTokens)))
		Expect(u.CostMicroUSD).To(Equal(2 * callCost))
		Expect(u.Reported).NotTo(BeNil())
		Expect(u.Reported.InputTokens).To(Equal(int64(1)), "what the agent printed is kept beside, as reported")
		for _, k := range upstream.Keys() {
			Expect(k).To(Equal(key), "the upstream got the gateway's key on every call")
		}

		pods := loopPods(ns, "honest")
		Expect(pods).NotTo(BeEmpty())
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				for _, e := range c.Env {
					Expect(e.Value).NotTo(ContainSubstring(key))
					if e.ValueFrom != nil {
						Expect(e.ValueFrom.SecretKeyRef).To(BeNil(), "env %s of Pod %s comes from a Secret", e.Name, p.Name)
					}
				}
			}
			for _, v := range p.Spec.Volumes {
				Expect(v.Secret).To(BeNil(), "Pod %s mounts Secret volume %s", p.Name, v.Name)
			}
		}
		np := &networkingv1.NetworkPolicy{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: "honest-egress"}, np)).To(Succeed())
	})

	It("pauses a run whose budget runs out in the middle of a step, within one call", func() {
		ns := newNamespace()
		spec := agentLoop("json json json json json json json json")
		// A second state that spends: the run pauses before it.
		fix := spec.States["fix"]
		fix.Next = "check"
		spec.States["fix"] = fix
		spec.States["check"] = v1alpha1.State{Action: "json", ActionType: v1alpha1.ActionAgent, Next: "done"}
		// 2.5 calls' worth: the fourth call finds it spent.
		spec.Budget = &v1alpha1.Budget{MaxCostUSD: pricing.FormatUSD(callCost * 5 / 2)}
		before := upstream.Calls()
		key := create(ns, "spender", spec)
		dumpOnFailure(ns, "spender")
		var loop *v1alpha1.Loop
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhasePaused))
		}, 2*time.Minute, time.Second).Should(Succeed())
		Expect(upstream.Calls()-before).To(Equal(3), "three calls reached the model; the fourth was refused")
		Expect(loop.Status.Usage.CostMicroUSD).To(Equal(3 * callCost))
		out := loop.Status.Captured["agent"].Output
		Expect(out).To(And(ContainSubstring("4 json: API Error: 400"), ContainSubstring("budget")), out)
		Expect(out).NotTo(ContainSubstring("5 json"), "the agent stopped at the refusal")
	})

	It("binds a token to its Pod's step: not another Loop's, not after the step", func() {
		ns := newNamespace()
		holder := create(ns, "holder", agentLoop("hold"))
		Eventually(upstream.Held, 2*time.Minute).Should(Receive())
		other := create(ns, "other", v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "sleep 300", Next: "done"}, "done": {Terminal: true}}})
		var h, o *v1alpha1.Loop
		Eventually(func(g Gomega) {
			h, o = getLoop(g, holder), getLoop(g, other)
			g.Expect(h.Status.Action.PodUID).NotTo(BeEmpty())
			g.Expect(o.Status.Action).NotTo(BeNil())
			g.Expect(o.Status.Action.PodUID).NotTo(BeEmpty())
		}, time.Minute, time.Second).Should(Succeed())
		holderToken := podToken(ns, h.Status.Action.Pod, "looprun-gateway")

		// The holder's token is the holder's step, whatever the call says.
		Expect(gatewayCall(holderToken, "")).To(Equal(http.StatusOK))
		Expect(gatewayCall(holderToken, ns+"/other")).To(Equal(http.StatusOK))
		// The ledger follows the calls by a few milliseconds (the journal ships it).
		Eventually(func() int { return ledgerCalls(h.Status.Action.PodUID) }, 30*time.Second, 100*time.Millisecond).
			Should(Equal(3), "the held call and both of the host's, all the holder's")
		Expect(ledgerCalls(o.Status.Action.PodUID)).To(BeZero(), "nothing billed to the other Loop")

		// A token of the API server's audience, or garbage, is no key.
		Expect(gatewayCall(podToken(ns, h.Status.Action.Pod, ""), "")).To(Equal(http.StatusUnauthorized))
		Expect(gatewayCall(key, "")).To(Equal(http.StatusUnauthorized), "the real key is not a credential of the gateway")

		upstream.Release()
		h = waitFinished(holder, 2*time.Minute)
		Expect(h.Status.Usage.Calls).To(Equal(int64(3)))
		Expect(gatewayCall(holderToken, "")).To(BeElementOf(http.StatusUnauthorized, http.StatusForbidden), "a token outlived its step")
		Expect(k8sClient.Delete(bg, getLoopObj(other))).To(Succeed())
	})

	It("loses no finished response's usage and doubles none when the gateway is killed mid-stream", func() {
		ns := newNamespace()
		before := upstream.Calls()
		upstream.Rehold()
		killed := create(ns, "killed", agentLoop("json hold"))
		dumpOnFailure(ns, "killed")
		Eventually(upstream.Held, 2*time.Minute).Should(Receive())
		out, err := exec.Command("pkill", "-9", "-f", "^/gateway --listen").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		// The agent reports the cut stream as claude does ("API Error: …"),
		// which looprun takes as a failure of a known cause and runs the
		// step again: once that attempt is under way, let its calls finish.
		Eventually(func(g Gomega) { g.Expect(len(loopPods(ns, "killed"))).To(BeNumerically(">=", 2)) }, time.Minute, time.Second).Should(Succeed())
		upstream.Release()
		loop := waitFinished(killed, 2*time.Minute)
		Expect(upstream.Calls()-before).To(Equal(4), "two calls an attempt")
		u := loop.Status.Usage
		Expect(u.Calls).To(Equal(int64(4)), describe(loop))
		Expect(u.InputTokens).To(Equal(int64(4*fixture.MessagesInputTokens)),
			"the finished calls once each, the cut one's start once: nothing lost, nothing twice")
		Expect(u.OutputTokens).To(And(BeNumerically(">", 3*fixture.MessagesOutputTokens), BeNumerically("<", 4*fixture.MessagesOutputTokens)),
			"three finished calls' output and what the cut one had streamed")
		waitGatewayReady()
	})
})

// dumpOnFailure prints, when the spec fails, the Loop, its Pods' logs, the
// operator's and the gateway's.
func dumpOnFailure(ns, loop string) {
	DeferCleanup(func() {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, args := range [][]string{{"get", "loop", "-n", ns, loop, "-o", "yaml"}, {"get", "pods", "-o", "wide", "-n", ns},
			{"logs", "-n", ns, "-l", "looprun.io/loop=" + loop, "--tail", "40"},
			{"logs", "-n", operatorNS, "deploy/" + release, "--tail", "40"},
			{"logs", "-n", operatorNS, "deploy/" + release + "-gateway", "--tail", "40"},
			{"logs", "-n", operatorNS, "deploy/" + release + "-gateway", "--previous", "--tail", "40"}} {
			out, _ := exec.Command("kubectl", args...).CombinedOutput()
			GinkgoWriter.Printf("kubectl %s:\n%s\n", strings.Join(args, " "), out)
		}
	})
}

// agentLoop is a Loop of one agent state (gateway-agent with prompt), its
// output captured as "agent".
func agentLoop(prompt string) v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "fix",
		Agent: &v1alpha1.AgentSpec{Command: []string{"/usr/local/bin/gateway-agent"}},
		States: map[string]v1alpha1.State{
			"fix":  {Action: prompt, ActionType: v1alpha1.ActionAgent, Capture: "agent", Next: "done"},
			"done": {Terminal: true},
		}}
}

func getLoopObj(key client.ObjectKey) *v1alpha1.Loop {
	return &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
}

// routeGateway sends the gateway Service's address to its Pod (what
// kube-proxy would do), from Pods and from this machine.
func routeGateway() {
	ip := waitGatewayReady()
	rule := []string{"-d", gatewayIP + "/32", "-p", "tcp", "--dport", gatewayPort, "-j", "DNAT", "--to-destination", ip + ":" + gatewayPort}
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		run("iptables", append([]string{"-t", "nat", "-A", chain}, rule...)...)
		DeferCleanup(func() { run("iptables", append([]string{"-t", "nat", "-D", chain}, rule...)...) })
	}
}

// waitGatewayReady waits for the gateway's Pod to be ready and returns its
// address.
func waitGatewayReady() string {
	var ip string
	Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: release + "-gateway"}, d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(Equal(int32(1)))
		var pods corev1.PodList
		g.Expect(k8sClient.List(bg, &pods, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/name": "looprun-gateway"})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1))
		ip = pods.Items[0].Status.PodIP
		g.Expect(ip).NotTo(BeEmpty())
	}, 2*time.Minute, time.Second).Should(Succeed())
	return ip
}

// podToken is a token bound to a Pod, as its projected volume holds it
// (audience "": the API server's own).
func podToken(ns, podName, audience string) string {
	GinkgoHelper()
	p := &corev1.Pod{}
	Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: podName}, p)).To(Succeed())
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Spec.ServiceAccountName}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}
	if audience != "" {
		tr.Spec.Audiences = []string{audience}
	}
	Expect(k8sClient.SubResource("token").Create(bg, sa, tr)).To(Succeed())
	return tr.Status.Token
}

// gatewayCall makes one call through the gateway with credential (and an
// x-looprun-loop header, unless ""), and returns its status.
func gatewayCall(credential, loopHeader string) int {
	GinkgoHelper()
	req, err := http.NewRequest(http.MethodPost, gatewayURL+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("x-api-key", credential)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	if loopHeader != "" {
		req.Header.Set("x-looprun-loop", loopHeader)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	GinkgoWriter.Printf("gateway: %d %s\n", resp.StatusCode, body)
	return resp.StatusCode
}

// ledgerCalls counts the calls in the ledger of the step run by the Pod of uid.
func ledgerCalls(uid string) int {
	GinkgoHelper()
	cm := &corev1.ConfigMap{}
	err := k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: "usage-" + uid}, cm)
	if client.IgnoreNotFound(err) == nil && err != nil {
		return 0
	}
	Expect(err).NotTo(HaveOccurred())
	l, err := ledger.Parse(cm)
	Expect(err).NotTo(HaveOccurred())
	return len(l.Calls)
}
