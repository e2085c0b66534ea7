package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/pricing"
)

// CloudEvent types looprun sends (--cloudevents-sink).
const (
	CloudEventStarted   = "io.looprun.loop.started.v1"
	CloudEventCompleted = "io.looprun.loop.completed.v1"
	CloudEventFailed    = "io.looprun.loop.failed.v1"
	CloudEventPaused    = "io.looprun.loop.paused.v1"
	CloudEventApproval  = "io.looprun.loop.approval.requested.v1"
)

var (
	cloudEventsSent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_cloudevents_sent_total",
		Help: "CloudEvents delivered to the sink, by type.",
	}, []string{"type"})
	cloudEventsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_cloudevents_failed_total",
		Help: "CloudEvents not delivered, by type and why: refused (the sink kept failing), dropped (the queue was full).",
	}, []string{"type", "reason"})
)

func init() { metrics.Registry.MustRegister(cloudEventsSent, cloudEventsFailed) }

// cloudEvent is one event to send.
type cloudEvent struct {
	id, typ, source, subject string
	time                     time.Time
	data                     map[string]any
}

// CloudEventSink sends a Loop's milestones as CloudEvents (HTTP, binary
// content mode) to the sink the operator's admin configured. A bounded
// queue and one sender: a reconcile never waits for the sink, a full
// queue drops (counted), a failing sink is tried a few times with backoff.
type CloudEventSink struct {
	URL     string
	Client  *http.Client
	Tries   int
	Backoff time.Duration
	queue   chan cloudEvent
}

// NewCloudEventSink makes a sink of url with a queue of size events.
func NewCloudEventSink(url string, size int) *CloudEventSink {
	return &CloudEventSink{URL: url, Client: &http.Client{Timeout: 10 * time.Second, CheckRedirect: noRedirects}, Tries: 4, Backoff: time.Second,
		queue: make(chan cloudEvent, size)}
}

// Start sends until ctx ends (a manager Runnable).
func (s *CloudEventSink) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-s.queue:
			s.deliver(ctx, e)
		}
	}
}

// NeedLeaderElection says only the leader sends (it is the one that saw the
// step).
func (s *CloudEventSink) NeedLeaderElection() bool { return true }

func (s *CloudEventSink) enqueue(e cloudEvent) {
	select {
	case s.queue <- e:
	default:
		cloudEventsFailed.WithLabelValues(e.typ, "dropped").Inc()
	}
}

func (s *CloudEventSink) deliver(ctx context.Context, e cloudEvent) {
	body, err := json.Marshal(e.data)
	if err != nil {
		cloudEventsFailed.WithLabelValues(e.typ, "refused").Inc()
		return
	}
	wait := s.Backoff
	for try := 1; ; try++ {
		err = s.post(ctx, e, body)
		if err == nil {
			cloudEventsSent.WithLabelValues(e.typ).Inc()
			return
		}
		if try >= s.Tries || ctx.Err() != nil {
			log.FromContext(ctx).Info("CloudEvent not delivered", "type", e.typ, "subject", e.subject, "error", err.Error())
			cloudEventsFailed.WithLabelValues(e.typ, "refused").Inc()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (s *CloudEventSink) post(ctx context.Context, e cloudEvent, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", e.id)
	h.Set("Ce-Type", e.typ)
	h.Set("Ce-Source", e.source)
	h.Set("Ce-Subject", e.subject)
	h.Set("Ce-Time", e.time.UTC().Format(time.RFC3339Nano))
	resp, err := s.Client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the sink answered %s", resp.Status)
	}
	return nil
}

// cloudEventOf is the CloudEvent of a step's event, if it is a milestone:
// the run started, ended, paused on its budget, or waits for an approval.
func cloudEventOf(loop *v1alpha1.Loop, e executor.Event) (cloudEvent, bool) {
	run := loop.Status.RunState
	var typ string
	switch e.Type {
	case executor.EventLoopStart:
		typ = CloudEventStarted
	case executor.EventLoopComplete:
		typ = CloudEventFailed
		if run.Phase == v1alpha1.PhaseCompleted {
			typ = CloudEventCompleted
		}
	case executor.EventBudgetExceeded:
		if run.Phase != v1alpha1.PhasePaused {
			return cloudEvent{}, false
		}
		typ = CloudEventPaused
	case executor.EventApprovalRequested:
		typ = CloudEventApproval
	default:
		return cloudEvent{}, false
	}
	data := map[string]any{"name": loop.Name, "namespace": loop.Namespace, "uid": string(loop.UID), "runID": run.RunID,
		"phase": string(run.Phase), "state": run.CurrentState, "iteration": run.Iteration}
	if run.TerminatedBy != "" {
		data["terminatedBy"] = string(run.TerminatedBy)
	}
	if run.Message != "" {
		data["message"] = run.Message
	}
	if e.Type == executor.EventApprovalRequested {
		data["message"] = executor.ApprovalRequestedOf(e).Message
	}
	if u := run.Usage; u != nil {
		data["usage"] = map[string]any{"calls": u.Calls, "tokens": u.Tokens(), "costUSD": pricing.MicroToUSD(u.CostMicroUSD)}
	}
	return cloudEvent{
		id:      fmt.Sprintf("%s-%d", loop.UID, e.Seq),
		typ:     typ,
		source:  fmt.Sprintf("/apis/looprun.io/v1alpha1/namespaces/%s/loops/%s", loop.Namespace, loop.Name),
		subject: loop.Name,
		time:    e.Time,
		data:    data,
	}, true
}

// noRedirects keeps a sink's events at the sink the admin configured: a
// redirect is the sink's answer (a failure), never followed elsewhere.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
