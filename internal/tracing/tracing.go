// Package tracing makes OpenTelemetry traces of runs: one trace per run,
// a span per state visit, per action, per judge call, and a child Loop's
// run in its parent's trace. Spans are made from the run's events once the
// step that made them is known, with start and end times taken from the
// events, and with ids derived from the trace id kept in the run state
// (status.trace, the state file's trace): a run that goes on after an
// operator restart or a `looprun resume` adds to the same trace, its spans
// under the same run span. Nothing is traced unless an OTLP endpoint is
// configured.
package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// Tracer turns runs' events into spans and exports them over OTLP/HTTP. A
// nil Tracer traces nothing.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New exports spans to endpoint, an OTLP/HTTP base URL
// (http://collector:4318); empty, to $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// or $OTEL_EXPORTER_OTLP_ENDPOINT; with none set it returns nil: nothing
// is traced. service names the process (service.name).
func New(ctx context.Context, endpoint, service string) (*Tracer, error) {
	var opts []otlptracehttp.Option
	switch {
	case endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(endpoint, "/")+"/v1/traces"))
	case os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "":
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("the OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(chosenIDs{}),
	)
	return &Tracer{provider: provider, tracer: provider.Tracer("looprun.io")}, nil
}

// Shutdown sends what is left and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Flush sends what is buffered.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Run names the run a span is of.
type Run struct {
	Loop, Namespace string
}

// Begin gives the run its place in a trace unless it has one: under
// parent (a W3C traceparent: a parent Loop's state visit, or what the
// looprun.io/traceparent annotation says), or as a new trace.
func (t *Tracer) Begin(run *v1alpha1.RunState, parent string) {
	if t == nil || run.Trace != nil || run.RunID == "" {
		return
	}
	var traceID trace.TraceID
	var parentSpan trace.SpanID
	if sc, ok := ParseTraceParent(parent); ok {
		traceID, parentSpan = sc.TraceID(), sc.SpanID()
	} else {
		_, _ = rand.Read(traceID[:])
	}
	var span trace.SpanID
	_, _ = rand.Read(span[:])
	run.Trace = &v1alpha1.TraceState{TraceParent: traceParent(traceID, span)}
	if parentSpan.IsValid() {
		run.Trace.ParentSpanID = parentSpan.String()
	}
}

// StateParent is the traceparent of the run's present state visit (its
// iteration), for a child Loop that state starts; empty when the run is
// not traced.
func StateParent(run *v1alpha1.RunState) string {
	sc, ok := runSpan(run)
	if !ok {
		return ""
	}
	return traceParent(sc.TraceID(), derive(sc.TraceID(), "state", int64(run.Iteration)))
}

// For is the tracer as an executor.Observer of who's run.
func (t *Tracer) For(who Run) executor.Observer {
	return executor.ObserverFunc(func(run *v1alpha1.RunState, evs []executor.Event) { t.Observe(who, run, evs) })
}

// Observe makes the spans the events end, and keeps in run.Trace the state
// visit in progress. It is called with each step's events before the step
// is saved, so that what it keeps is saved with them.
func (t *Tracer) Observe(who Run, run *v1alpha1.RunState, evs []executor.Event) {
	if t == nil {
		return
	}
	sc, ok := runSpan(run)
	if !ok {
		return
	}
	o := &observer{t: t, who: who, run: run, tr: run.Trace, traceID: sc.TraceID(), root: sc.SpanID()}
	for _, e := range evs {
		o.event(e)
	}
}

type observer struct {
	t       *Tracer
	who     Run
	run     *v1alpha1.RunState
	tr      *v1alpha1.TraceState
	traceID trace.TraceID
	root    trace.SpanID
}

func (o *observer) event(e executor.Event) {
	switch e.Type {
	case executor.EventStateEnter:
		o.endVisit(e.Time, "", "")
		enter := executor.StateEnterOf(e)
		o.tr.State, o.tr.Iteration = enter.State, max(enter.Iteration, 0)
		o.tr.EnteredAt = &metav1.MicroTime{Time: e.Time}
	case executor.EventActionComplete:
		o.action(e)
	case executor.EventEvaluate:
		if ev := executor.EvaluateOf(e); ev.Type == "llm_structured" {
			o.judge(e, ev)
		}
	case executor.EventRoute:
		r := executor.RouteOf(e)
		o.endVisit(e.Time, r.Verdict, r.To)
	case executor.EventLoopComplete:
		if resumable(o.run) {
			return // its state visit and its run go on when it is resumed
		}
		o.endVisit(e.Time, "", "")
		o.endRun(e)
	}
}

// stateSpan is the span of the state visit in progress.
func (o *observer) stateSpan() trace.SpanID {
	return derive(o.traceID, "state", int64(o.tr.Iteration))
}

// endVisit ends the state visit in progress, if any, at end.
func (o *observer) endVisit(end time.Time, verdict, next string) {
	if o.tr.State == "" || o.tr.EnteredAt == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("cicd.pipeline.name", o.who.Loop),
		attribute.String("cicd.pipeline.run.id", o.run.RunID),
		attribute.String("cicd.pipeline.task.name", o.tr.State),
		attribute.String("cicd.pipeline.task.run.id", fmt.Sprintf("%s/%d", o.run.RunID, o.tr.Iteration)),
		attribute.Int("looprun.iteration", int(o.tr.Iteration)),
	}
	if verdict != "" {
		attrs = append(attrs, attribute.String("looprun.verdict", verdict))
	}
	if next != "" {
		attrs = append(attrs, attribute.String("looprun.next_state", next))
	}
	result := "success"
	switch verdict {
	case "error", "failure":
		result = verdict
	}
	attrs = append(attrs, attribute.String("cicd.pipeline.task.run.result", result))
	o.t.emit(span{trace: o.traceID, id: o.stateSpan(), parent: o.root, name: o.tr.State, start: o.tr.EnteredAt.Time, end: end,
		kind: trace.SpanKindInternal, attrs: attrs, failed: result == "error"})
	o.tr.State, o.tr.EnteredAt = "", nil
}

// action makes the span of the action that completed, in its state visit.
func (o *observer) action(e executor.Event) {
	a := executor.ActionCompleteOf(e)
	dur := time.Duration(a.DurationMs) * time.Millisecond
	attrs := []attribute.KeyValue{
		attribute.String("cicd.pipeline.task.name", o.tr.State),
		attribute.Int64("process.exit.code", int64(a.ExitCode)),
	}
	name := "action " + o.tr.State
	if a.IsPrompt {
		name = strings.TrimSpace("invoke_agent " + a.Model)
		attrs = append(attrs, genAI("invoke_agent", a.Model, a.Usage)...)
	}
	failure := ""
	if a.Failure != nil {
		failure = a.Failure.Message
	}
	o.t.emit(span{trace: o.traceID, id: derive(o.traceID, "action", int64(o.tr.Iteration), e.Seq), parent: o.stateSpan(), name: name,
		start: e.Time.Add(-dur), end: e.Time, kind: trace.SpanKindInternal, attrs: attrs, failed: failure != "", message: failure})
}

// judge makes the span of the LLM judge's call (ev), in its state visit.
func (o *observer) judge(e executor.Event, ev executor.EvaluateEvent) {
	model, _ := ev.Details["llm_model"].(string) // as the judge (internal/llm) records it
	o.t.emit(span{trace: o.traceID, id: derive(o.traceID, "judge", int64(o.tr.Iteration), e.Seq), parent: o.stateSpan(),
		name: strings.TrimSpace("chat " + model), start: e.Time, end: e.Time, kind: trace.SpanKindClient,
		attrs: append(genAI("chat", model, ev.Usage), attribute.String("looprun.verdict", ev.Verdict))})
}

// genAI are the GenAI attributes of an agent's turn or a judge's call
// (what it used: nil when it reported nothing).
func genAI(op, model string, u *executor.EventUsage) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", op), attribute.String("gen_ai.provider.name", "anthropic")}
	if model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", model), attribute.String("gen_ai.response.model", model))
	}
	if u != nil {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens),
			attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.CacheReadTokens),
			attribute.Int64("gen_ai.usage.cache_creation.input_tokens", u.CacheCreationTokens))
	}
	return attrs
}

// resumable reports whether the run was stopped (by a person, a signal or
// a handoff) to be resumed: its span, and its state visit's, end when it
// ends, covering it all.
func resumable(run *v1alpha1.RunState) bool {
	by := run.TerminatedBy
	return by == v1alpha1.TerminatedStopped || by == v1alpha1.TerminatedInterrupted || by == v1alpha1.TerminatedHandoff
}

// endRun makes the run's span.
func (o *observer) endRun(e executor.Event) {
	by := o.run.TerminatedBy
	start := e.Time
	if o.run.StartedAt != nil {
		start = o.run.StartedAt.Time
	}
	result := "success"
	switch {
	case by == v1alpha1.TerminatedTimeout:
		result = "timeout"
	case o.run.Phase == v1alpha1.PhaseFailed && by == v1alpha1.TerminatedTerminal:
		result = "failure"
	case o.run.Phase != v1alpha1.PhaseCompleted:
		result = "error"
	}
	attrs := []attribute.KeyValue{
		attribute.String("cicd.pipeline.name", o.who.Loop),
		attribute.String("cicd.pipeline.run.id", o.run.RunID),
		attribute.String("cicd.pipeline.action.name", "RUN"),
		attribute.String("cicd.pipeline.result", result),
		attribute.String("looprun.terminated_by", string(by)),
		attribute.String("looprun.final_state", o.run.CurrentState),
		attribute.Int("looprun.iterations", int(o.run.Iteration)),
	}
	if o.who.Namespace != "" {
		attrs = append(attrs, attribute.String("k8s.namespace.name", o.who.Namespace))
	}
	if u := o.run.Usage; u != nil {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens))
	}
	var parent trace.SpanID
	if p, err := trace.SpanIDFromHex(o.tr.ParentSpanID); err == nil {
		parent = p
	}
	o.t.emit(span{trace: o.traceID, id: o.root, parent: parent, name: "RUN " + o.who.Loop, start: start, end: e.Time,
		kind: trace.SpanKindServer, attrs: attrs, failed: result != "success", message: o.run.Message})
}

type span struct {
	trace      trace.TraceID
	id, parent trace.SpanID
	name       string
	start, end time.Time
	kind       trace.SpanKind
	attrs      []attribute.KeyValue
	failed     bool
	message    string
}

// emit exports one finished span with the ids and times given.
func (t *Tracer) emit(s span) {
	ctx := context.WithValue(context.Background(), idsKey{}, chosen{trace: s.trace, span: s.id})
	if s.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: s.trace, SpanID: s.parent, TraceFlags: trace.FlagsSampled, Remote: true}))
	}
	_, sp := t.tracer.Start(ctx, s.name, trace.WithTimestamp(s.start), trace.WithSpanKind(s.kind), trace.WithAttributes(s.attrs...))
	if s.failed {
		sp.SetStatus(codes.Error, s.message)
	}
	sp.End(trace.WithTimestamp(s.end))
}

// chosenIDs gives a span the ids emit chose for it.
type chosenIDs struct{}

type idsKey struct{}

type chosen struct {
	trace trace.TraceID
	span  trace.SpanID
}

func (chosenIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	c, _ := ctx.Value(idsKey{}).(chosen)
	return c.trace, c.span
}

func (chosenIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	c, _ := ctx.Value(idsKey{}).(chosen)
	return c.span
}

// derive is the id of a span of the trace: the same kind and numbers give
// the same id, whichever process makes it.
func derive(traceID trace.TraceID, kind string, n ...int64) trace.SpanID {
	h := sha256.New()
	h.Write(traceID[:])
	h.Write([]byte(kind))
	for _, v := range n {
		_ = binary.Write(h, binary.BigEndian, v)
	}
	var id trace.SpanID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// runSpan is the run's span context, from run.Trace.
func runSpan(run *v1alpha1.RunState) (trace.SpanContext, bool) {
	if run.Trace == nil {
		return trace.SpanContext{}, false
	}
	return ParseTraceParent(run.Trace.TraceParent)
}

func traceParent(t trace.TraceID, s trace.SpanID) string {
	return "00-" + t.String() + "-" + s.String() + "-01"
}

// ParseTraceParent reads a W3C traceparent (00-TRACE-SPAN-FLAGS).
func ParseTraceParent(s string) (trace.SpanContext, bool) {
	parts := strings.Split(strings.TrimSpace(s), "-")
	if len(parts) != 4 || parts[0] != "00" {
		return trace.SpanContext{}, false
	}
	t, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sp, err := trace.SpanIDFromHex(parts[2])
	if err != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: t, SpanID: sp, TraceFlags: trace.FlagsSampled}), true
}
