// Package cloudevents sends a Loop's milestones (started, completed,
// failed, paused on its budget, waiting for an approval) as CloudEvents
// over HTTP to the sink the operator's admin configured.
package cloudevents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"strings"
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
	TypeStarted   = "io.looprun.loop.started.v1"
	TypeCompleted = "io.looprun.loop.completed.v1"
	TypeFailed    = "io.looprun.loop.failed.v1"
	TypePaused    = "io.looprun.loop.paused.v1"
	TypeApproval  = "io.looprun.loop.approval.requested.v1"
)

// The sink's metrics.
var (
	// Sent counts the CloudEvents delivered, by type.
	Sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_cloudevents_sent_total",
		Help: "CloudEvents delivered to the sink, by type.",
	}, []string{"type"})
	// Failed counts the CloudEvents not delivered, by type and why.
	Failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_cloudevents_failed_total",
		Help: "CloudEvents not delivered, by type and why: refused (the sink kept failing), dropped (the queue was full).",
	}, []string{"type", "reason"})
)

func init() { metrics.Registry.MustRegister(Sent, Failed) }

// Event is one CloudEvent to send: its attributes and its JSON data.
type Event struct {
	ID, Type, Source, Subject string
	Time                      time.Time
	Data                      map[string]any
}

// Sink sends a Loop's milestones as CloudEvents (HTTP, binary
// content mode) to the sink the operator's admin configured. A bounded
// queue and one sender: a reconcile never waits for the sink, a full
// queue drops (counted), a failing sink is tried a few times with backoff.
type Sink struct {
	URL string
	// HeadersFile, when set, holds headers sent with every event (the
	// sink's credentials: a mounted Secret), read afresh for each one so
	// that a rotated Secret is used without a restart (ReadHeaders).
	HeadersFile string
	Client      *http.Client
	Tries       int
	Backoff     time.Duration
	queue       chan Event
}

// NewSink makes a sink of url with a queue of size events.
func NewSink(url string, size int) *Sink {
	return &Sink{URL: url, Client: &http.Client{Timeout: 10 * time.Second, CheckRedirect: noRedirects}, Tries: 4, Backoff: time.Second,
		queue: make(chan Event, size)}
}

// Start sends until ctx ends (a manager Runnable).
func (s *Sink) Start(ctx context.Context) error {
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
func (s *Sink) NeedLeaderElection() bool { return true }

// Enqueue queues e to be sent; a full queue drops it (counted).
func (s *Sink) Enqueue(e Event) {
	select {
	case s.queue <- e:
	default:
		Failed.WithLabelValues(e.Type, "dropped").Inc()
	}
}

func (s *Sink) deliver(ctx context.Context, e Event) {
	body, err := json.Marshal(e.Data)
	if err != nil {
		Failed.WithLabelValues(e.Type, "refused").Inc()
		return
	}
	wait := s.Backoff
	for try := 1; ; try++ {
		err = s.post(ctx, e, body)
		if err == nil {
			Sent.WithLabelValues(e.Type).Inc()
			return
		}
		if try >= s.Tries || ctx.Err() != nil {
			log.FromContext(ctx).Info("CloudEvent not delivered", "type", e.Type, "subject", e.Subject, "error", err.Error())
			Failed.WithLabelValues(e.Type, "refused").Inc()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (s *Sink) post(ctx context.Context, e Event, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	h := req.Header
	if s.HeadersFile != "" {
		extra, err := ReadHeaders(s.HeadersFile)
		if err != nil {
			return err
		}
		for name, values := range extra {
			h[name] = values
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", e.ID)
	h.Set("Ce-Type", e.Type)
	h.Set("Ce-Source", e.Source)
	h.Set("Ce-Subject", e.Subject)
	h.Set("Ce-Time", e.Time.UTC().Format(time.RFC3339Nano))
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

// ReadHeaders reads a file of HTTP headers, one "Name: value" a line
// (blank lines and lines starting with # are skipped), such as
// "Authorization: Bearer TOKEN". The event's own headers (Ce-*,
// Content-Type) and Host cannot be set.
func ReadHeaders(path string) (http.Header, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || name == "" || strings.ContainsFunc(name, notTokenChar):
			return nil, fmt.Errorf("%s: line %d: not a header (Name: value)", path, i+1)
		case strings.ContainsFunc(value, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }):
			return nil, fmt.Errorf("%s: line %d: the value of %s is not a header value", path, i+1, name)
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
		if strings.HasPrefix(name, "Ce-") || name == "Content-Type" || name == "Content-Length" || name == "Host" {
			return nil, fmt.Errorf("%s: line %d: %s is the event's own header", path, i+1, name)
		}
		h.Add(name, value)
	}
	if len(h) == 0 {
		return nil, errors.New(path + ": no header")
	}
	return h, nil
}

// notTokenChar: r cannot be in a header's name (RFC 9110 token).
func notTokenChar(r rune) bool {
	return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}

// Of is the CloudEvent of one of a Loop's events, if it is a milestone:
// the run started, ended, paused on its budget, or waits for an approval.
// loop is the Loop as the step that wrote e leaves it.
func Of(loop *v1alpha1.Loop, e executor.Event) (Event, bool) {
	run := loop.Status.RunState
	var typ string
	switch e.Type {
	case executor.EventLoopStart:
		typ = TypeStarted
	case executor.EventLoopComplete:
		typ = TypeFailed
		if run.Phase == v1alpha1.PhaseCompleted {
			typ = TypeCompleted
		}
	case executor.EventBudgetExceeded:
		if run.Phase != v1alpha1.PhasePaused {
			return Event{}, false
		}
		typ = TypePaused
	case executor.EventApprovalRequested:
		typ = TypeApproval
	default:
		return Event{}, false
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
	return Event{
		ID:      fmt.Sprintf("%s-%d", loop.UID, e.Seq),
		Type:    typ,
		Source:  fmt.Sprintf("/apis/looprun.io/v1alpha1/namespaces/%s/loops/%s", loop.Namespace, loop.Name),
		Subject: loop.Name,
		Time:    e.Time,
		Data:    data,
	}, true
}

// noRedirects keeps a sink's events at the sink the admin configured: a
// redirect is the sink's answer (a failure), never followed elsewhere.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
