package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

const (
	metricsNamespace = "pulselb"
	metricsSubsystem = "controller"
)

// Metrics are the controller's metrics, its work queues' included. Each
// Controller has its own (Config.Metrics); main registers them.
type Metrics struct {
	syncDuration    *prometheus.HistogramVec
	syncErrors      *prometheus.CounterVec
	writes          *prometheus.CounterVec
	managedServices prometheus.Gauge
	verdictChanges  *prometheus.CounterVec
	flappingTargets prometheus.Gauge
	judgedTargets   *prometheus.CounterVec
	// externalVantages counts external vantages by state; externalDown
	// counts Service nodes that a majority of them cannot reach.
	externalVantages *prometheus.GaugeVec
	externalDown     prometheus.Gauge
	failoverDuration prometheus.Histogram
	proxyRestarts    prometheus.Counter
	leaseTakeovers   prometheus.Counter
	fencedWrites     prometheus.Counter
	queueDepth       *prometheus.GaugeVec
	queueAdds        *prometheus.CounterVec
	queueLatency     *prometheus.HistogramVec
	queueWork        *prometheus.HistogramVec
	queueUnfinished  *prometheus.GaugeVec
	queueLongest     *prometheus.GaugeVec
	queueRetries     *prometheus.CounterVec
}

// NewMetrics returns unregistered controller metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name:    "sync_duration_seconds",
			Help:    "Time to reconcile one object, by queue and result.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"queue", "result"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "sync_errors_total",
			Help: "Reconciles that failed and were retried, by queue.",
		}, []string{"queue"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "writes_total",
			Help: "Writes to the API server, by resource and verb.",
		}, []string{"resource", "verb"}),
		managedServices: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "managed_services",
			Help: "LoadBalancer Services this controller serves.",
		}),

		verdictChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "verdict_changes_total",
			Help: "Quorum verdict changes, by kind (target or beacon) and the verdict changed to.",
		}, []string{"kind", "to"}),
		flappingTargets: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "flapping_targets",
			Help: "Targets and beacons whose verdict flap damping holds Down while a majority says Up.",
		}),
		judgedTargets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "judged_targets_total",
			Help: "Targets and beacons judged, by round: full (the targets changed, every one is judged) or changed (only those whose reports, vantages or timers changed).",
		}, []string{"round"}),
		externalVantages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "external_vantages",
			Help: "External vantages with a report, by state: usable, stale, or cutOff (fresh, saying every address is down).",
		}, []string{"state"}),
		externalDown: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "external_unreachable_nodes",
			Help: "Service proxy nodes (one per Service and node) that a majority of the usable external vantages cannot reach.",
		}),
		failoverDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name:    "failover_duration_seconds",
			Help:    "Time from the first failed probe of a Down verdict to the Service status written without the node.",
			Buckets: []float64{0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 20, 30, 60},
		}),
		proxyRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "proxy_restarts_total",
			Help: "Proxy pods deleted because a port was down on a node that is up.",
		}),
		leaseTakeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "leader_takeovers_total",
			Help: "Leader Leases this replica took before they lapsed, from a leader whose node its probers judged failed.",
		}),
		fencedWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "fenced_writes_total",
			Help: "Writes to the API server refused before they were sent, because this replica did not hold the leader Lease or had not renewed it lately.",
		}),

		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_depth", Help: "Items waiting in the work queue.",
		}, []string{"queue"}),
		queueAdds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_adds_total", Help: "Items added to the work queue.",
		}, []string{"queue"}),
		queueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_queue_duration_seconds", Help: "Time an item waits in the work queue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"queue"}),
		queueWork: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_work_duration_seconds", Help: "Time to process an item from the work queue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"queue"}),
		queueUnfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration.",
		}, []string{"queue"}),
		queueLongest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor has been running.",
		}, []string{"queue"}),
		queueRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "workqueue_retries_total", Help: "Items requeued after an error.",
		}, []string{"queue"}),
	}
}

// RegisterMetrics registers m with r.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.syncDuration, m.syncErrors, m.writes, m.managedServices, m.verdictChanges, m.flappingTargets, m.judgedTargets, m.externalVantages, m.externalDown,
		m.failoverDuration, m.proxyRestarts, m.leaseTakeovers, m.fencedWrites, m.queueDepth, m.queueAdds, m.queueLatency, m.queueWork, m.queueUnfinished, m.queueLongest, m.queueRetries} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

// TookOverLease counts a leader Lease taken from a leader whose node
// failed.
func (m *Metrics) TookOverLease() { m.leaseTakeovers.Inc() }

// Fenced counts a write refused because this replica may not write.
func (m *Metrics) Fenced() { m.fencedWrites.Inc() }

// queueMetrics gives the work queues the controller's metrics, labelled by
// queue name, instead of client-go's global provider.
type queueMetrics struct{ m *Metrics }

var _ workqueue.MetricsProvider = queueMetrics{}

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.m.queueDepth.WithLabelValues(name)
}
func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.m.queueAdds.WithLabelValues(name)
}
func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.m.queueLatency.WithLabelValues(name)
}
func (q queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.m.queueWork.WithLabelValues(name)
}
func (q queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.m.queueUnfinished.WithLabelValues(name)
}
func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.m.queueLongest.WithLabelValues(name)
}
func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.m.queueRetries.WithLabelValues(name)
}
