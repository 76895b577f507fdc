package httpserver

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	metricsNamespace = "pulselb"
	metricsSubsystem = "http"
)

// Metrics are the metrics of the servers New builds (Options.Metrics),
// labelled by Options.Name.
type Metrics struct {
	connections *prometheus.GaugeVec
	limited     *prometheus.CounterVec
}

// NewMetrics returns unregistered server metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "connections",
			Help: "Connections an HTTP server holds open now, by server.",
		}, []string{"server"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "connections_limited_total",
			Help: "Connections accepted while an HTTP server held its maximum; each waited for another to close, by server.",
		}, []string{"server"}),
	}
}

// RegisterMetrics registers m with r.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.connections, m.limited} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering http server metrics: %w", err)
	}
	return nil
}
