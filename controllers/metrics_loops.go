package controllers

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/looprun/looprun/api/v1alpha1"
)

// loopsByPhase counts, at each scrape, the Loops the operator's cache
// holds by phase, and the running ones that wait by why (an approval, a
// rate limit, a backoff): the numbers a dashboard shows, read from the
// objects rather than kept beside them.
type loopsByPhase struct {
	// reader is the cache of the manager set up last (tests start many).
	reader  atomic.Pointer[client.Reader]
	phases  *prometheus.Desc
	waiting *prometheus.Desc
}

var loopsCollector = &loopsByPhase{
	phases:  prometheus.NewDesc("looprun_loops", "Loops by phase, as the operator's cache holds them.", []string{"phase"}, nil),
	waiting: prometheus.NewDesc("looprun_loops_waiting", "Running Loops that wait, by why (AwaitingApproval, RateLimited, Backoff, BudgetExceeded).", []string{"reason"}, nil),
}

func init() { metrics.Registry.MustRegister(loopsCollector) }

// watch makes the collector read r.
func (c *loopsByPhase) watch(r client.Reader) { c.reader.Store(&r) }

func (c *loopsByPhase) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.phases
	ch <- c.waiting
}

// waitReasons are the Ready reasons of a Loop that waits for something.
var waitReasons = []string{v1alpha1.ReasonAwaitingApproval, v1alpha1.ReasonRateLimited, v1alpha1.ReasonBackoff, v1alpha1.ReasonBudgetExceeded}

func (c *loopsByPhase) Collect(ch chan<- prometheus.Metric) {
	r := c.reader.Load()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list v1alpha1.LoopList
	if err := (*r).List(ctx, &list); err != nil {
		return // the cache is not ready: no figures rather than wrong ones
	}
	phases := map[v1alpha1.Phase]int{}
	waiting := map[string]int{}
	for _, l := range list.Items {
		phase := l.Status.Phase
		if phase == "" {
			phase = v1alpha1.PhasePending
		}
		phases[phase]++
		if phase.IsFinished() {
			continue
		}
		if ready := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ReadyCondition); ready != nil {
			for _, w := range waitReasons {
				if ready.Reason == w {
					waiting[w]++
				}
			}
		}
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseRunning, v1alpha1.PhasePaused, v1alpha1.PhaseSuspended,
		v1alpha1.PhaseCompleted, v1alpha1.PhaseFailed, v1alpha1.PhaseInterrupted} {
		ch <- prometheus.MustNewConstMetric(c.phases, prometheus.GaugeValue, float64(phases[p]), string(p))
	}
	for _, w := range waitReasons {
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(waiting[w]), w)
	}
}
