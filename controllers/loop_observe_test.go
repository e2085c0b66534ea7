package controllers

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/api/v1alpha1"

	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// The metrics count the usage the engine priced in its events: an
// action's with the model its event names, the judge's with the model its
// answer reported; an event without usage counts nothing.
func TestUsageSeenIsWhatTheEngineRecorded(t *testing.T) {
	action := executor.EventUsage{InputTokens: 100, OutputTokens: 10, CacheReadTokens: 1000, CostUSD: 0.0004, Priced: true}
	judge := executor.EventUsage{InputTokens: 7, OutputTokens: 3}
	evs := []executor.Event{
		{Type: executor.EventActionStart, Data: executor.ActionStartEvent{Action: "fix it", IsPrompt: true}.Data()},
		{Type: executor.EventActionComplete, Data: executor.ActionCompleteEvent{IsPrompt: true, Model: "claude-sonnet-4-6-20260101", Usage: &action}.Data()},
		{Type: executor.EventActionComplete, Data: executor.ActionCompleteEvent{ExitCode: 1}.Data()},
		{Type: executor.EventEvaluate, Data: executor.EvaluateEvent{Type: "llm_structured", Verdict: "yes", Usage: &judge}.Data()},
	}
	res := &executor.ActionResult{Judgement: &evaluate.Result{Verdict: "yes", Usage: &agentstream.Usage{Model: "claude-haiku-4-5", InputTokens: 7, OutputTokens: 3}}}
	got := usageSeen(evs, res)
	want := []seenUsage{{EventUsage: action, model: "claude-sonnet-4-6-20260101"}, {EventUsage: judge, model: "claude-haiku-4-5"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("usage seen %+v, want %+v", got, want)
	}

	ns := "observe-usage-test"
	observeUsage(ns, "claude-sonnet-4-6", got[0].EventUsage)
	observeUsage(ns, "", got[1].EventUsage)
	if c := testutil.ToFloat64(agentCost.WithLabelValues(ns, "claude-sonnet-4-6")); c != 0.0004 {
		t.Errorf("cost %v, want the engine's 0.0004", c)
	}
	if n := testutil.ToFloat64(agentTokens.WithLabelValues(ns, "claude-sonnet-4-6", "cache_read")); n != 1000 {
		t.Errorf("cache read tokens %v", n)
	}
	if n := testutil.ToFloat64(agentCalls.WithLabelValues(ns, "other", "false")); n != 1 {
		t.Errorf("unpriced calls of a model the table does not list: %v", n)
	}
}

// "Loop finished" names the state and iteration the Loop ended in, not
// those the reconcile began in.
func TestLoopFinishedLogsWhereItEnded(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	ctx := context.WithValue(context.Background(), baseLoggerKey{}, base)
	ctx = log.IntoContext(ctx, base.WithValues("state", "", "iteration", 0))
	loop := &v1alpha1.Loop{}
	loop.Status.CurrentState, loop.Status.Iteration = "done", 5
	loop.Status.Phase, loop.Status.TerminatedBy = v1alpha1.PhaseCompleted, "terminal"
	s := &step{r: &LoopReconciler{}, loop: loop}
	s.announce(ctx, []executor.Event{{Type: executor.EventLoopComplete}})
	if len(lines) != 1 || !strings.Contains(lines[0], `"state"="done" "iteration"=5`) || strings.Contains(lines[0], `"state"=""`) {
		t.Fatalf("log lines %q", lines)
	}
}
