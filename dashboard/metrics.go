package dashboard

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	metricsNamespace = "pulselb"
	metricsSubsystem = "dashboard"
)

// Metrics are a Dashboard's metrics (Options.Metrics).
type Metrics struct {
	sseClients                                  prometheus.Gauge
	sseEvents, sseRejected, sseEvicted, updates prometheus.Counter
	renders                                     prometheus.Counter
	paced                                       *prometheus.CounterVec
}

// NewMetrics returns unregistered dashboard metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "sse_clients",
			Help: "Browsers and other clients connected to the server-sent event stream.",
		}),
		sseEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "sse_events_total",
			Help: "State change events sent to event stream clients; a slow client gets only the latest.",
		}),
		sseRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "sse_rejected_total",
			Help: "Event stream connections refused because MaxClients were connected, none of them long enough to give way.",
		}),
		sseEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "sse_evicted_total",
			Help: "Event streams ended to make room for a new client while MaxClients were connected.",
		}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "updates_total",
			Help: "States given to the dashboard that changed what it shows.",
		}),
		renders: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "renders_total",
			Help: "Renderings of the page or its live fragment; at most one per version and per page max age, however many clients ask.",
		}),
		paced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "paced_total",
			Help: "Requests for the page, its fragment or the JSON beyond the responses a second, by result: waited for their turn, or refused (503) when it was too far off.",
		}, []string{"result"}),
	}
}

// RegisterMetrics registers m with r.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.sseClients, m.sseEvents, m.sseRejected, m.sseEvicted, m.updates, m.renders, m.paced} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}
