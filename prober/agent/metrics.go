package agent

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

var reportWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "pulselb", Subsystem: "prober",
	Name: "report_writes_total",
	Help: "Writes of this prober's ProbeReport, by verb (create, update) and result.",
}, []string{"verb", "result"})

// RegisterMetrics registers the agent's metrics with r.
func RegisterMetrics(r prometheus.Registerer) error {
	return errors.Join(r.Register(reportWrites))
}
