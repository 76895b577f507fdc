package standalone

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are standalone mode's own metrics; the probes' are the prober
// package's and the DNS server's are dnsexport's, so every role exports
// the same names for the same things.
type metrics struct {
	peerPolls      *prometheus.CounterVec
	reportRequests *prometheus.CounterVec
	verdicts       *prometheus.CounterVec
	published      *prometheus.GaugeVec
	reloads        *prometheus.CounterVec
	stateSaves     *prometheus.CounterVec
}

func newMetrics() *metrics {
	const ns, sub = "pulselb", "standalone"
	return &metrics{
		peerPolls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "peer_polls_total", Help: "Polls of peers' reports, by result (ok, error, unauthorized, invalid: a value no instance writes, self: the url reaches this instance)."}, []string{"result"}),
		reportRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "report_requests_total", Help: "Requests for this instance's report, by result (ok, unauthorized)."}, []string{"result"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "verdict_changes_total", Help: "Changes of target verdicts, by kind (target) and the verdict changed to."}, []string{"kind", "to"}),
		published: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "published_addresses", Help: "Addresses each configured service publishes in DNS now."}, []string{"service"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "reloads_total", Help: "Configuration reloads, by result (ok, error)."}, []string{"result"}),
		stateSaves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "state_saves_total", Help: "Writes of the state file, by result (ok, error); a failed write is retried at every evaluation."}, []string{"result"}),
	}
}

// RegisterMetrics registers every metric in m with r.
func (m *metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.peerPolls, m.reportRequests, m.verdicts, m.published, m.reloads, m.stateSaves} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering standalone metrics: %w", err)
	}
	return nil
}
