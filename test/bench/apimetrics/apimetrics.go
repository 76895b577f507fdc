// Package apimetrics reads the harness API server's own metrics for the
// benchmarks that count what they cost it (requests, bytes, watch events).
package apimetrics

import (
	"bytes"
	"context"
	"fmt"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Sample is one series of a metric: its labels and its value (a counter's,
// or a histogram's or summary's sum).
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Read fetches the API server's /metrics through cs and returns the
// samples of each metric by name.
func Read(ctx context.Context, cs kubernetes.Interface) (map[string][]Sample, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := map[string][]Sample{}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			s := Sample{Labels: map[string]string{}}
			for _, p := range m.GetLabel() {
				s.Labels[p.GetName()] = p.GetValue()
			}
			switch {
			case m.Counter != nil:
				s.Value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				s.Value = m.GetGauge().GetValue()
			case m.Histogram != nil:
				s.Value = m.GetHistogram().GetSampleSum()
			case m.Summary != nil:
				s.Value = m.GetSummary().GetSampleSum()
			default:
				s.Value = m.GetUntyped().GetValue()
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}
