package agent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are an Agent's own metrics (Config.Metrics); its probes' are the
// prober package's.
type Metrics struct {
	reportWrites  *prometheus.CounterVec
	reportReasons *prometheus.CounterVec
	leaseWrites   *prometheus.CounterVec
	refreshes     prometheus.Counter
}

// NewMetrics returns unregistered agent metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		reportWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pulselb", Subsystem: "prober",
			Name: "report_writes_total",
			Help: "Writes of this prober's ProbeReport, by verb (create, update) and result (ok, error).",
		}, []string{"verb", "result"}),
		reportReasons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pulselb", Subsystem: "prober",
			Name: "report_write_reasons_total",
			Help: "Writes of this prober's ProbeReport it attempted, by reason: start, heartbeat (without a Lease), retry (after a failed write), or what changed: targets, state or detail.",
		}, []string{"reason"}),
		leaseWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pulselb", Subsystem: "prober",
			Name: "lease_writes_total",
			Help: "Writes of this prober's Lease (its heartbeat), by verb (create, update) and result (ok, error).",
		}, []string{"verb", "result"}),
		refreshes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pulselb", Subsystem: "prober",
			Name: "target_refreshes_total",
			Help: "Recomputations of this prober's targets, each set off by a change of a Service, a Node's addresses, Ready condition or zone, a pulselb pod or a probe Secret.",
		}),
	}
}

// RegisterMetrics registers every metric in m with r. It is called from
// main, never from init.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.reportWrites, m.reportReasons, m.leaseWrites, m.refreshes} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering agent metrics: %w", err)
	}
	return nil
}
