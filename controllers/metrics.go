package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
)

func init() {
	metrics.Registry.MustRegister(transitions, actionDuration, runningLoops, reconcileErrors)
}

func observeAction(d time.Duration) { actionDuration.Observe(d.Seconds()) }

func recordReconcileError(where string) { reconcileErrors.WithLabelValues(where).Inc() }
