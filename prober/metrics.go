package prober

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulselb/pulselb/api/probespec"
)

// Metrics are the prober's Prometheus metrics. Every label value comes from a
// closed set (protocol, outcome, state), never from a target, so the number
// of series does not grow with the number of targets.
//
// A Scheduler updates the Metrics given in its Config; several Schedulers may
// share one Metrics, since the targets gauge is only ever incremented and
// decremented.
type Metrics struct {
	// ProbeDuration is pulselb_prober_probe_duration_seconds{protocol, outcome}.
	ProbeDuration *prometheus.HistogramVec
	// Probes is pulselb_prober_probes_total{protocol, outcome}.
	Probes *prometheus.CounterVec
	// Targets is pulselb_prober_targets{state}: how many targets are in each state.
	Targets *prometheus.GaugeVec
	// StateChanges is pulselb_prober_state_changes_total{to}.
	StateChanges *prometheus.CounterVec

	// targets and changes are looked up once because they change under the
	// scheduler's lock.
	targets [stateCount]prometheus.Gauge
	changes [stateCount]prometheus.Counter
}

const (
	metricsNamespace = "pulselb"
	metricsSubsystem = "prober"
)

// probeDurationBuckets span a loopback connect (about 1 ms) to the largest
// adaptive timeout (2 s).
var probeDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2}

// NewMetrics returns unregistered prober metrics; register them with
// RegisterMetrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		ProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "probe_duration_seconds",
			Help:      "Duration of health probes by protocol and outcome.",
			Buckets:   probeDurationBuckets,
		}, []string{"protocol", "outcome"}),
		Probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "probes_total",
			Help:      "Health probes run, by protocol and outcome.",
		}, []string{"protocol", "outcome"}),
		Targets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "targets",
			Help:      "Probe targets by state.",
		}, []string{"state"}),
		StateChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "state_changes_total",
			Help:      "Target state changes, by the state changed to.",
		}, []string{"to"}),
	}
	// Every state's series exists from the start, so a dashboard shows 0
	// rather than no data.
	for st := range State(stateCount) {
		m.targets[st] = m.Targets.WithLabelValues(st.String())
		m.changes[st] = m.StateChanges.WithLabelValues(st.String())
	}
	return m
}

// RegisterMetrics registers every metric in m with r. It is called from main,
// never from init, so tests and embedders choose their own registry.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.ProbeDuration, m.Probes, m.Targets, m.StateChanges} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering prober metrics: %w", err)
	}
	return nil
}

// observeProbe records one finished probe.
func (m *Metrics) observeProbe(p probespec.Protocol, r Result, seconds float64) {
	if m == nil {
		return
	}
	proto := string(p)
	if proto == "" {
		proto = "unknown"
	}
	outcome := r.Outcome.String()
	m.Probes.WithLabelValues(proto, outcome).Inc()
	m.ProbeDuration.WithLabelValues(proto, outcome).Observe(seconds)
}

// addTarget counts a target entering state st (delta 1) or leaving it (-1).
func (m *Metrics) addTarget(st State, delta float64) {
	if m == nil || st >= stateCount {
		return
	}
	m.targets[st].Add(delta)
}

// observeChange records a state change of one target.
func (m *Metrics) observeChange(from, to State) {
	if m == nil || from >= stateCount || to >= stateCount {
		return
	}
	m.targets[from].Dec()
	m.targets[to].Inc()
	m.changes[to].Inc()
}
