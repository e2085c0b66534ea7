package controllers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/cloudevents"
)

// received is what a sink got: the CloudEvents headers and the data.
type received struct {
	typ, source, subject, id, spec, contentType string
	data                                        map[string]any
}

var _ = Describe("CloudEvents out", func() {
	It("sends a Loop's start and end to the admin's sink, retries a failing sink, and never holds a reconcile for it", func() {
		var mu sync.Mutex
		var all []received
		failures := 2 // the sink fails the first two posts
		hang := make(chan struct{})
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			if r.Header.Get("Ce-Subject") == "stuck" {
				mu.Unlock()
				<-hang // a sink that never answers
				return
			}
			if failures > 0 {
				failures--
				mu.Unlock()
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			e := received{typ: r.Header.Get("Ce-Type"), source: r.Header.Get("Ce-Source"), subject: r.Header.Get("Ce-Subject"),
				id: r.Header.Get("Ce-Id"), spec: r.Header.Get("Ce-Specversion"), contentType: r.Header.Get("Content-Type")}
			_ = json.Unmarshal(body, &e.data)
			all = append(all, e)
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
		}))
		DeferCleanup(sink.Close)
		DeferCleanup(func() { close(hang) }) // before the sink closes: it waits for its handlers
		op := runOperator(Config{AllowLocalActions: true, LocalWorkdir: GinkgoT().TempDir(), CloudEventsSink: sink.URL}, func(r *LoopReconciler) {
			r.CloudEvents.Backoff = 20 * time.Millisecond
			r.CloudEvents.Client.Timeout = time.Minute
		})
		DeferCleanup(op.stop)
		failedBefore := testutil.ToFloat64(cloudevents.Failed.WithLabelValues(cloudevents.TypeFailed, "refused"))

		ns := newNamespace()
		loop := waitFinished(createLoop(ns, "announced", fixUntilClean()))
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Eventually(func(g Gomega) {
			mu.Lock()
			defer mu.Unlock()
			// The operator runs the other specs' Loops too: their events
			// reach this sink as well.
			var got []received
			for _, e := range all {
				if strings.HasPrefix(e.source, "/apis/looprun.io/v1alpha1/namespaces/"+ns+"/") {
					got = append(got, e)
				}
			}
			g.Expect(got).To(HaveLen(2))
			g.Expect(got[0].typ).To(Equal(cloudevents.TypeStarted))
			g.Expect(got[1].typ).To(Equal(cloudevents.TypeCompleted))
			for _, e := range got {
				g.Expect(e.spec).To(Equal("1.0"))
				g.Expect(e.contentType).To(Equal("application/json"))
				g.Expect(e.source).To(Equal("/apis/looprun.io/v1alpha1/namespaces/" + ns + "/loops/announced"))
				g.Expect(e.subject).To(Equal("announced"))
				g.Expect(e.id).To(HavePrefix(string(loop.UID) + "-"))
			}
			g.Expect(got[1].data).To(HaveKeyWithValue("phase", "Completed"))
			g.Expect(got[1].data).To(HaveKeyWithValue("state", "done"))
		}, "30s").Should(Succeed())

		// A sink that hangs holds no Loop: the next ones finish at once.
		stuck := waitFinished(createLoop(ns, "stuck", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "exit 1", OnSuccess: "done", OnFailure: "broken"}, "done": {Terminal: true}, "broken": {Terminal: true, Failure: ptrTo(true)}}}))
		Expect(stuck.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(waitFinished(createLoop(ns, "after", fixUntilClean())).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(testutil.ToFloat64(cloudevents.Failed.WithLabelValues(cloudevents.TypeFailed, "refused"))).To(Equal(failedBefore))
	})
})

func ptrTo[T any](v T) *T { return &v }
