package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/test/fixture"
)

func ev(seq int64, typ string, at time.Time, data map[string]any) executor.Event {
	return executor.Event{Seq: seq, Type: typ, Time: at, Data: data}
}

// A run traced by two processes (an operator restarted between its steps)
// is one trace: the spans of both hang under one run span.
func TestOneTraceAcrossProcesses(t *testing.T) {
	recv := fixture.StartOTLPReceiver()
	defer recv.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	run := &v1alpha1.RunState{RunID: "r1", StartedAt: &metav1.Time{Time: t0}, Phase: v1alpha1.PhaseRunning}
	who := Run{Loop: "fix", Namespace: "team"}

	first, err := New(ctx, recv.URL, "test")
	if err != nil || first == nil {
		t.Fatalf("New: %v %v", first, err)
	}
	first.Begin(run, "")
	parent := run.Trace.TraceParent
	first.Observe(who, run, []executor.Event{
		ev(1, executor.EventLoopStart, t0, nil),
		ev(2, executor.EventStateEnter, t0.Add(time.Second), map[string]any{"state": "fix", "iteration": 1}),
		ev(3, executor.EventActionComplete, t0.Add(6*time.Second), map[string]any{"exit_code": 0, "duration_ms": int64(5000), "is_prompt": true,
			"model": "claude-sonnet-4-6", "input_tokens": int64(1000), "output_tokens": int64(100)}),
	})
	run.Iteration = 1
	child := StateParent(run) // a sub-loop the state would start
	must(t, first.Shutdown(ctx))

	second, err := New(ctx, recv.URL, "test")
	must(t, err)
	second.Begin(run, "") // already has its place: kept
	if run.Trace.TraceParent != parent {
		t.Fatalf("Begin replaced the run's trace: %s -> %s", parent, run.Trace.TraceParent)
	}
	run.Phase, run.TerminatedBy, run.CurrentState, run.Iteration = v1alpha1.PhaseCompleted, v1alpha1.TerminatedTerminal, "done", 2
	second.Observe(who, run, []executor.Event{
		ev(4, executor.EventEvaluate, t0.Add(7*time.Second), map[string]any{"type": "llm_structured", "verdict": "yes", "llm_model": "claude-haiku-4-5",
			"input_tokens": int64(300), "output_tokens": int64(20)}),
		ev(5, executor.EventRoute, t0.Add(7*time.Second), map[string]any{"from": "fix", "to": "done", "verdict": "yes"}),
		ev(6, executor.EventStateEnter, t0.Add(7*time.Second), map[string]any{"state": "done", "iteration": 2}),
		ev(7, executor.EventLoopComplete, t0.Add(8*time.Second), map[string]any{"terminated_by": "terminal"}),
	})
	must(t, second.Shutdown(ctx))

	spans := map[string]fixture.Span{}
	for _, s := range recv.Spans() {
		if _, dup := spans[s.Name]; dup {
			t.Fatalf("span %s sent twice", s.Name)
		}
		spans[s.Name] = s
	}
	root, ok := spans["RUN fix"]
	if !ok || len(spans) != 5 {
		t.Fatalf("spans: %v", names(spans))
	}
	sc, _ := ParseTraceParent(parent)
	if root.TraceID != sc.TraceID().String() || root.SpanID != sc.SpanID().String() || root.ParentSpanID != "" ||
		root.Start != uint64(t0.UnixNano()) || root.End != uint64(t0.Add(8*time.Second).UnixNano()) {
		t.Fatalf("run span %+v", root)
	}
	if root.Attributes["cicd.pipeline.name"] != "fix" || root.Attributes["cicd.pipeline.result"] != "success" || root.Attributes["k8s.namespace.name"] != "team" {
		t.Fatalf("run span attributes %v", root.Attributes)
	}
	state := spans["fix"]
	if state.ParentSpanID != root.SpanID || state.Start != uint64(t0.Add(time.Second).UnixNano()) || state.End != uint64(t0.Add(7*time.Second).UnixNano()) ||
		state.Attributes["cicd.pipeline.task.name"] != "fix" || state.Attributes["looprun.verdict"] != "yes" {
		t.Fatalf("state span %+v", state)
	}
	agent := spans["invoke_agent claude-sonnet-4-6"]
	if agent.ParentSpanID != state.SpanID || agent.Attributes["gen_ai.usage.input_tokens"] != int64(1000) || agent.Attributes["gen_ai.operation.name"] != "invoke_agent" ||
		agent.Start != uint64(t0.Add(time.Second).UnixNano()) {
		t.Fatalf("agent span %+v", agent)
	}
	judge := spans["chat claude-haiku-4-5"]
	if judge.ParentSpanID != state.SpanID || judge.Attributes["gen_ai.usage.output_tokens"] != int64(20) || judge.Attributes["gen_ai.request.model"] != "claude-haiku-4-5" {
		t.Fatalf("judge span %+v", judge)
	}
	if done := spans["done"]; done.ParentSpanID != root.SpanID {
		t.Fatalf("final state's span %+v", done)
	}
	for name, s := range spans {
		if s.TraceID != root.TraceID {
			t.Errorf("span %s is in trace %s, the run in %s", name, s.TraceID, root.TraceID)
		}
	}

	// A child Loop's run goes in its parent's trace, under the state that started it.
	sub := &v1alpha1.RunState{RunID: "c1"}
	(&Tracer{}).Begin(sub, child)
	csc, _ := ParseTraceParent(sub.Trace.TraceParent)
	if csc.TraceID().String() != root.TraceID || sub.Trace.ParentSpanID != state.SpanID {
		t.Fatalf("child trace %+v, parent state span %s", sub.Trace, state.SpanID)
	}
}

// A run stopped to be resumed sends no run span yet, nor its state
// visit's: both end when the resumed run goes on and ends.
func TestAStoppedRunKeepsItsRunSpanOpen(t *testing.T) {
	recv := fixture.StartOTLPReceiver()
	defer recv.Close()
	ctx := context.Background()
	tr, err := New(ctx, recv.URL, "test")
	must(t, err)
	now := time.Now()
	run := &v1alpha1.RunState{RunID: "r1", StartedAt: &metav1.Time{Time: now}, Phase: v1alpha1.PhaseInterrupted, TerminatedBy: v1alpha1.TerminatedStopped}
	tr.Begin(run, "")
	tr.Observe(Run{Loop: "x"}, run, []executor.Event{
		ev(1, executor.EventStateEnter, now, map[string]any{"state": "a", "iteration": 1}),
		ev(2, executor.EventLoopComplete, now.Add(time.Second), map[string]any{"terminated_by": "stopped"}),
	})
	must(t, tr.Shutdown(ctx))
	if got := recv.Spans(); len(got) != 0 {
		t.Fatalf("spans %+v", got)
	}
	if run.Trace.State != "a" {
		t.Fatalf("the state visit in progress was dropped: %+v", run.Trace)
	}
}

func TestNothingTracedWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := New(context.Background(), "", "test")
	if tr != nil || err != nil {
		t.Fatalf("New: %v %v", tr, err)
	}
	run := &v1alpha1.RunState{RunID: "r"}
	tr.Begin(run, "")
	tr.Observe(Run{}, run, nil)
	if run.Trace != nil {
		t.Fatal("an untraced run got a trace")
	}
}

// The collector's credentials come as OpenTelemetry's own variable
// (OTEL_EXPORTER_OTLP_TRACES_HEADERS, which the chart sets from a Secret),
// also beside an endpoint given on the command line.
func TestCollectorHeadersFromTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "Authorization=Bearer%20tok,X-Scope-OrgID=team")
	got := make(chan http.Header, 8)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	ctx := context.Background()
	tr, err := New(ctx, collector.URL, "test")
	if err != nil || tr == nil {
		t.Fatalf("New: %v %v", tr, err)
	}
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	run := &v1alpha1.RunState{RunID: "r1", StartedAt: &metav1.Time{Time: t0}, Phase: v1alpha1.PhaseCompleted, TerminatedBy: v1alpha1.TerminatedTerminal}
	tr.Begin(run, "")
	tr.Observe(Run{Loop: "fix", Namespace: "team"}, run, []executor.Event{
		ev(1, executor.EventLoopStart, t0, nil),
		ev(2, executor.EventLoopComplete, t0.Add(time.Second), map[string]any{"terminated_by": "terminal"}),
	})
	must(t, tr.Shutdown(ctx))
	select {
	case h := <-got:
		if h.Get("Authorization") != "Bearer tok" || h.Get("X-Scope-OrgID") != "team" {
			t.Fatalf("the collector got %v", h)
		}
	default:
		t.Fatal("nothing exported")
	}
}

func names(m map[string]fixture.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
