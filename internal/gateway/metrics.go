package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a call (looprun_gateway_calls_total's outcome label).
const (
	outcomeOK       = "ok"             // answered and counted
	outcomeUpstream = "upstream_error" // the upstream answered an error (passed on, not counted)
	outcomeRefused  = "refused"        // the gateway refused it (see refusals)
	outcomeFailed   = "failed"         // the gateway failed it: upstream unreachable, bad usage, ledger write failed
	outcomeCutOff   = "cut_off"        // the stream broke (agent or upstream) before its end
)

// Reasons of a refusal (looprun_gateway_refusals_total's reason label).
const (
	reasonUnauthenticated = "unauthenticated"
	reasonForbidden       = "forbidden"
	reasonBudget          = "budget_spent"
	reasonTooLarge        = "too_large"
	reasonNotFound        = "not_found"
	reasonUnavailable     = "unavailable" // identity, budget or ledger could not be read
)

type metrics struct {
	calls    *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	refusals *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "looprun_gateway_calls_total",
			Help: "Calls through the model gateway, by route and outcome.",
		}, []string{"route", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "looprun_gateway_tokens_total",
			Help: "Tokens counted from the upstream's responses, by kind (input, output, cache_read, cache_creation).",
		}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "looprun_gateway_refusals_total",
			Help: "Calls the gateway refused, by reason.",
		}, []string{"reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.calls, m.tokens, m.refusals} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) counted(input, output, cacheRead, cacheCreation int64) {
	m.tokens.WithLabelValues("input").Add(float64(input))
	m.tokens.WithLabelValues("output").Add(float64(output))
	m.tokens.WithLabelValues("cache_read").Add(float64(cacheRead))
	m.tokens.WithLabelValues("cache_creation").Add(float64(cacheCreation))
}
