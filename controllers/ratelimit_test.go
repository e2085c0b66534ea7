package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// rateLimitedAgentScript is refused once as claude is when rate-limited,
// then answers; it counts its calls in the file named by its first line's
// variable.
const rateLimitedAgentScript = `#!/bin/sh
n=$(cat %[1]s 2>/dev/null || echo 0)
echo $((n + 1)) > %[1]s
if [ "$n" -lt 1 ]; then
	printf '%%s\n' '{"type":"result","subtype":"error_during_execution","is_error":true,"result":"API Error: 429 rate_limit_error"}'
	exit 1
fi
printf '%%s\n' '{"type":"assistant","message":{"content":[{"type":"text","text":"done"}]}}'
`

var _ = Describe("A rate-limited agent action", func() {
	It("waits as a requeue: the one worker runs another Loop meanwhile, then the action runs again", func() {
		op := startOperator(Config{Workers: 1})
		DeferCleanup(op.stop)
		dir := GinkgoT().TempDir()
		agent := filepath.Join(dir, "agent")
		Expect(os.WriteFile(agent, fmt.Appendf(nil, rateLimitedAgentScript, filepath.Join(dir, "calls")), 0o755)).To(Succeed())

		ns := newNamespace()
		limited := createLoop(ns, "limited", v1alpha1.LoopSpec{Initial: "work",
			Agent: &v1alpha1.AgentSpec{Command: []string{agent}},
			States: map[string]v1alpha1.State{
				"work": {Action: "work on it", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode},
					RateLimit: &v1alpha1.RateLimit{Backoff: dur(10 * time.Second)},
					OnSuccess: "done", OnFailure: "failed"},
				"done":   {Terminal: true},
				"failed": {Terminal: true},
			}})
		var waitingUntil time.Time
		Eventually(func(g Gomega) {
			loop := getLoop(g, limited)
			ready := condition(loop, v1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonRateLimited))
			g.Expect(ready.Message).To(ContainSubstring("the action of state work hit a rate limit (1 short tries"))
			g.Expect(loop.Status.NextStepAt).NotTo(BeNil())
			g.Expect(loop.Status.Transient.Waiting).To(Equal(executor.WaitingRateLimit))
			waitingUntil = loop.Status.NextStepAt.Time
		}, "30s").Should(Succeed())
		Expect(time.Until(waitingUntil)).To(BeNumerically(">", 5*time.Second))

		// The only worker is free: another Loop runs to its end while the
		// first one waits.
		other := waitFinished(createLoop(ns, "other", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}))
		Expect(other.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(time.Now()).To(BeTemporally("<", waitingUntil), "the other Loop finished only after the wait")
		Expect(getLoop(Default, limited).Status.Phase).To(Equal(v1alpha1.PhaseRunning))

		loop := waitFinished(limited)
		Expect(loop.Status.CurrentState).To(Equal("done"))
		Expect(loop.Status.Transient).To(BeNil())
		types := strings.Join(eventTypes(loopEvents(loop)), ",")
		Expect(strings.Count(types, executor.EventActionStart)).To(Equal(2))
		Expect(strings.Count(types, executor.EventRateLimitWaiting)).To(Equal(1))
		var starts []time.Time
		for _, e := range loopEvents(loop) {
			if e.Type == executor.EventActionStart {
				starts = append(starts, e.Time)
			}
		}
		Expect(starts[1]).To(BeTemporally(">=", waitingUntil.Add(-time.Second)), "the second try started before its wait was over")
		Eventually(func(g Gomega) {
			g.Expect(eventNotes(g, ns, "RateLimited")).To(ContainElement(ContainSubstring("the action of state work hit a rate limit: short try 1 in")))
		}, "30s").Should(Succeed())
	})
})
