package controllers

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pricing"
)

// An agent CLI speaking stream-json, as claude --output-format stream-json.
const streamingAgentScript = `#!/bin/sh
printf '%s\n' '{"type":"system","subtype":"init","model":"claude-sonnet-4-6-20260101"}'
printf '%s\n' '{"type":"assistant","message":{"content":[{"type":"text","text":"on it"}]}}'
printf '%s\n' '{"type":"result","total_cost_usd":1,"usage":{"input_tokens":100,"output_tokens":10,"cache_read_input_tokens":1000,"cache_creation_input_tokens":0}}'
`

var _ = Describe("Agent usage", func() {
	It("sums what agent actions used and cost into status.usage, per state, and counts it in the metrics", func() {
		agent := startPricedOperator()

		ns := newNamespace()
		loop := waitFinished(createLoop(ns, "agentic", v1alpha1.LoopSpec{Initial: "plan",
			Agent: &v1alpha1.AgentSpec{Command: []string{agent}},
			States: map[string]v1alpha1.State{
				"plan": {Action: "plan it", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "fix"},
				"fix": {Action: "fix it", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode},
					MaxRetries: ptr.To[int32](1), OnRetryExhausted: "done", Next: "fix"},
				"done": {Terminal: true},
			}}))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		u := loop.Status.Usage
		Expect(u).NotTo(BeNil())
		// 100×2 + 10×10 + 1000×0.1 = 400 micro-dollars a call.
		Expect(u.UsageTotals).To(Equal(v1alpha1.UsageTotals{Calls: 3, InputTokens: 300, OutputTokens: 30, CacheReadTokens: 3000,
			CostMicroUSD: 1200, CLICostMicroUSD: 3000000, Model: "claude-sonnet-4-6-20260101"}))
		Expect(u.States).To(HaveLen(2))
		Expect(u.States["fix"].Calls).To(Equal(int64(2)))
		Expect(u.States["plan"].CostMicroUSD).To(Equal(int64(400)))

		Expect(testutil.ToFloat64(agentTokens.WithLabelValues(ns, "claude-sonnet-4-6", "cache_read"))).To(Equal(3000.0))
		Expect(testutil.ToFloat64(agentCost.WithLabelValues(ns, "claude-sonnet-4-6"))).To(BeNumerically("~", 0.0012, 1e-9))
		Expect(testutil.ToFloat64(agentCalls.WithLabelValues(ns, "claude-sonnet-4-6", "true"))).To(Equal(3.0))
		for _, e := range loopEvents(loop) {
			if e.Type == "action_complete" {
				Expect(e.Data).To(HaveKeyWithValue("model", "claude-sonnet-4-6-20260101"))
				Expect(e.Data).To(HaveKey("input_tokens"))
			}
		}
	})
})

// startPricedOperator starts an operator whose price table makes a call
// of the stub agent (streamingAgentScript) cost 100×2 + 10×10 + 1000×0.1 =
// 400 micro-dollars, and returns the stub agent's path.
func startPricedOperator() string {
	agent := filepath.Join(GinkgoT().TempDir(), "agent")
	Expect(os.WriteFile(agent, []byte(streamingAgentScript), 0o755)).To(Succeed())
	prices, err := pricing.Parse([]byte("models: {claude-sonnet-4-6: {input: 2, output: 10, cacheRead: 0.1, cacheCreation: 0}}"))
	Expect(err).NotTo(HaveOccurred())
	op := startOperator(Config{Prices: prices})
	DeferCleanup(op.stop)
	return agent
}
