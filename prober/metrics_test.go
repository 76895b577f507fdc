package prober

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pulselb/pulselb/api/probespec"
)

func TestMetricsRegister(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatalf("RegisterMetrics: %v", err)
	}
	if err := m.RegisterMetrics(reg); err == nil {
		t.Error("registering the same metrics twice succeeded")
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// Every state has a series before any target exists.
	if got := testutil.CollectAndCount(m.Targets); got != 3 {
		t.Errorf("targets gauge has %d series, want 3", got)
	}
}

func TestMetricsScheduler(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	m := NewMetrics()
	s := NewScheduler(Config{Interval: time.Second, Rise: 1, Fall: 1, Jitter: -1, Clock: clk, Metrics: m})
	scripted := func(r Result) Prober {
		return Func(func(context.Context, netip.AddrPort) Result { return r })
	}
	up := resUp
	up.Timings.Total = 3 * time.Millisecond
	down := Result{Outcome: L7STS, Err: errors.New("HTTP 503"), Timings: Timings{Total: 300 * time.Millisecond}}
	s.Set([]Target{
		{Key: "a", Protocol: probespec.TCP, Prober: scripted(up), Timeout: time.Minute},
		{Key: "b", Protocol: probespec.HTTP, Prober: scripted(down), Timeout: time.Minute},
		{Key: "c", Protocol: probespec.HTTP, Prober: scripted(down), Timeout: time.Minute},
	})
	wantTargets := func(unknown, upN, downN float64) {
		t.Helper()
		for st, want := range map[State]float64{StateUnknown: unknown, StateUp: upN, StateDown: downN} {
			if got := testutil.ToFloat64(m.Targets.WithLabelValues(st.String())); got != want {
				t.Errorf("targets{state=%q} = %v, want %v", st, got, want)
			}
		}
	}
	wantTargets(3, 0, 0)

	runScheduler(t, s)

	clk.Step(time.Second)
	waitFor(t, "three results", func() bool { return probesRun(t, m) == 3 })
	clk.Step(time.Second)
	waitFor(t, "six results", func() bool { return probesRun(t, m) == 6 })

	const want = `
# HELP pulselb_prober_probe_duration_seconds Duration of health probes by protocol and outcome.
# TYPE pulselb_prober_probe_duration_seconds histogram
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.001"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.0025"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.005"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.01"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.025"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.05"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.1"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.25"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="0.5"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="1"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="2"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L4OK",protocol="tcp",le="+Inf"} 2
pulselb_prober_probe_duration_seconds_sum{outcome="L4OK",protocol="tcp"} 0.006
pulselb_prober_probe_duration_seconds_count{outcome="L4OK",protocol="tcp"} 2
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.001"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.0025"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.005"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.01"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.025"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.05"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.1"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.25"} 0
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="0.5"} 4
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="1"} 4
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="2"} 4
pulselb_prober_probe_duration_seconds_bucket{outcome="L7STS",protocol="http",le="+Inf"} 4
pulselb_prober_probe_duration_seconds_sum{outcome="L7STS",protocol="http"} 1.2
pulselb_prober_probe_duration_seconds_count{outcome="L7STS",protocol="http"} 4
# HELP pulselb_prober_probes_total Health probes run, by protocol and outcome.
# TYPE pulselb_prober_probes_total counter
pulselb_prober_probes_total{outcome="L4OK",protocol="tcp"} 2
pulselb_prober_probes_total{outcome="L7STS",protocol="http"} 4
# HELP pulselb_prober_state_changes_total Target state changes, by the state changed to.
# TYPE pulselb_prober_state_changes_total counter
pulselb_prober_state_changes_total{to="Down"} 2
pulselb_prober_state_changes_total{to="Unknown"} 0
pulselb_prober_state_changes_total{to="Up"} 1
`
	reg := prometheus.NewPedanticRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"pulselb_prober_probe_duration_seconds", "pulselb_prober_probes_total", "pulselb_prober_state_changes_total"); err != nil {
		t.Error(err)
	}
	wantTargets(0, 1, 2)

	// Removed targets leave the gauge, whatever their state.
	s.Set([]Target{{Key: "a", Protocol: probespec.TCP, Prober: scripted(up)}})
	wantTargets(0, 1, 0)
	s.Set(nil)
	wantTargets(0, 0, 0)
}
