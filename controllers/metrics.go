package controllers

import (
	"cmp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/looprun/looprun/internal/executor"
)

var (
	transitions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "looprun_transitions_total",
		Help: "State transitions taken by all Loops.",
	})
	actionDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "looprun_action_duration_seconds",
		Help:    "How long actions ran.",
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
	})
	runningLoops = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "looprun_loops_running",
		Help: "Loops in progress (not finished) seen by this operator.",
	})
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_reconcile_errors_total",
		Help: "Reconciles that failed, by where: step, event-log, status.",
	}, []string{"where"})
	// Agent usage, named after OpenTelemetry's GenAI conventions
	// (gen_ai.usage.*, gen_ai.token.type, gen_ai.response.model): counters,
	// since Prometheus sums them across Loops and operators.
	agentTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_gen_ai_usage_tokens_total",
		Help: "Tokens agent actions reported, by namespace, model and token type (input, output, cache_read, cache_creation).",
	}, []string{"namespace", "gen_ai_response_model", "gen_ai_token_type"})
	agentCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_gen_ai_cost_usd_total",
		Help: "What agent actions cost by looprun's price table, in US dollars, by namespace and model.",
	}, []string{"namespace", "gen_ai_response_model"})
	agentCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "looprun_gen_ai_calls_total",
		Help: "Agent actions that reported their usage, by namespace, model and whether the price table priced them.",
	}, []string{"namespace", "gen_ai_response_model", "priced"})
)

func init() {
	metrics.Registry.MustRegister(transitions, actionDuration, runningLoops, reconcileErrors, agentTokens, agentCost, agentCalls)
}

// observeUsage counts what one agent action or judge call used, and its
// cost as the engine priced it. model is the price table's name for the
// model ("" for one it does not list): the model an agent reports is its
// own text, and a label must not take any value.
func observeUsage(namespace, model string, u executor.EventUsage) {
	model = cmp.Or(model, "other")
	for kind, n := range map[string]int64{"input": u.InputTokens, "output": u.OutputTokens, "cache_read": u.CacheReadTokens, "cache_creation": u.CacheCreationTokens} {
		if n > 0 {
			agentTokens.WithLabelValues(namespace, model, kind).Add(float64(n))
		}
	}
	if u.Priced && u.CostUSD > 0 {
		agentCost.WithLabelValues(namespace, model).Add(u.CostUSD)
	}
	agentCalls.WithLabelValues(namespace, model, strconv.FormatBool(u.Priced)).Inc()
}

func observeAction(d time.Duration) { actionDuration.Observe(d.Seconds()) }

func recordReconcileError(where string) { reconcileErrors.WithLabelValues(where).Inc() }
