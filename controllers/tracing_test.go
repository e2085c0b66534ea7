package controllers

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/tracing"
	"github.com/looprun/looprun/test/fixture"
)

var _ = Describe("Traces of runs (OpenTelemetry)", func() {
	It("makes one trace of a run across an operator restart, with its child Loop's run in it", func() {
		recv := fixture.StartOTLPReceiver()
		DeferCleanup(recv.Close)
		newTracer := func() *tracing.Tracer {
			tr, err := tracing.New(context.Background(), recv.URL, "looprun-operator")
			Expect(err).NotTo(HaveOccurred())
			return tr
		}
		tr := newTracer()
		op := startOperator(Config{Tracer: tr})
		ns := newNamespace()
		dir := gateDir()
		createTemplate(ns, "child", v1alpha1.LoopSpec{Initial: "inner", States: map[string]v1alpha1.State{
			"inner": {Action: "true", Next: "end"}, "end": {Terminal: true}}}, nil)
		key := createLoop(ns, "traced", v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "until [ -f " + dir + "/go ]; do sleep 0.1; done", Next: "sub"},
			"sub":  {Loop: "child", OnSuccess: "done", OnFailure: "done"},
			"done": {Terminal: true},
		}})
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Trace).NotTo(BeNil())
			g.Expect(getLoop(g, key).Status.Trace.State).To(Equal("wait"))
		}, "30s").Should(Succeed())
		op.stop()
		Expect(tr.Shutdown(context.Background())).To(Succeed())

		// A new operator process (a new tracer) takes the run on.
		tr = newTracer()
		op = startOperator(Config{Tracer: tr})
		DeferCleanup(op.stop)
		Expect(os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)).To(Succeed())
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), "%s in %s: %s %+v", loop.Status.TerminatedBy, loop.Status.CurrentState, loop.Status.Message, loop.Status.LastResult)
		Expect(tr.Flush(context.Background())).To(Succeed())

		sc, ok := tracing.ParseTraceParent(loop.Status.Trace.TraceParent)
		Expect(ok).To(BeTrue())
		byName := map[string]fixture.Span{}
		Eventually(func(g Gomega) {
			byName = map[string]fixture.Span{}
			for _, s := range recv.Spans() {
				if s.TraceID != sc.TraceID().String() {
					continue // another spec's Loop, which this operator runs too
				}
				g.Expect(byName).NotTo(HaveKey(s.Name), "span %s sent twice", s.Name)
				byName[s.Name] = s
			}
			g.Expect(byName).To(HaveKey("RUN traced"))
			g.Expect(byName).To(HaveKey("RUN " + childName(loop))) // the child's run
		}, "30s").Should(Succeed())
		run := byName["RUN traced"]
		Expect(run.TraceID).To(Equal(sc.TraceID().String()))
		Expect(run.SpanID).To(Equal(sc.SpanID().String()))
		Expect(run.Start).To(BeEquivalentTo(loop.Status.StartedAt.UnixNano()))
		Expect(run.Attributes).To(HaveKeyWithValue("cicd.pipeline.result", "success"))
		Expect(run.Attributes).To(HaveKeyWithValue("k8s.namespace.name", ns))
		for _, state := range []string{"wait", "sub"} {
			Expect(byName).To(HaveKey(state))
			Expect(byName[state].ParentSpanID).To(Equal(run.SpanID), "state %s", state)
		}
		Expect(byName["action wait"].ParentSpanID).To(Equal(byName["wait"].SpanID))
		// The child's run hangs under the state that ran it, in the same trace.
		child := byName["RUN "+childName(loop)]
		Expect(child.ParentSpanID).To(Equal(byName["sub"].SpanID))
		for name, s := range byName {
			Expect(s.TraceID).To(Equal(run.TraceID), "span %s", name)
		}
		Expect(byName["inner"].ParentSpanID).To(Equal(child.SpanID))
	})
})

// childName is the child Loop of the run's sub state (its second).
func childName(loop *v1alpha1.Loop) string {
	return executor.ChildName(loop.Name, loop.Status.RunID, "sub", 2)
}
