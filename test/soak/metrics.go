package soak

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// component is a pulselb component whose goroutines and memory the soak
// samples from its /metrics (deploy/base's --metrics-address ports).
type component struct {
	name, selector string
	port           int
}

var components = []component{
	{"controller", scenario.ControllerSelector, 9471},
	{"prober", scenario.ProberSelector, 9473},
}

// watched are the series compared between the first and the last quarter
// of the run, with how much they may grow: the last quarter's median may
// be at most First*(1+Rel)+Abs. The tolerance is wide because a value
// moves without a leak: the leader's goroutines with its queues' work, the
// heap with the garbage collector's timing and the informers' caches, and
// a fault (a restart, an upgrade) replaces processes; a leak grows with
// the faults and the time, and an hour's run shows it well past this.
var watched = []struct {
	series   string
	rel, abs float64
}{
	{"go_goroutines", 0.5, 20},
	{"go_memstats_heap_inuse_bytes", 0.5, 16 << 20},
}

// metricsInterval is how often the components are sampled.
const metricsInterval = 5 * time.Second

// sample is one scrape of a component: each watched series' largest
// value among its pods (the leader's, the busiest prober's).
type sample struct {
	at     time.Time
	comp   string
	values map[string]float64
}

// Growth is a watched series of a component: its median in the first and
// in the last quarter of the run.
type Growth struct {
	Component, Series string
	First, Last       float64
	// Samples in the first and the last quarter.
	FirstN, LastN int
}

func (g Growth) String() string {
	return fmt.Sprintf("%s %s %s → %s", g.Component, g.Series, formatValue(g.Series, g.First), formatValue(g.Series, g.Last))
}

func formatValue(series string, v float64) string {
	if series == "go_goroutines" {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return fmt.Sprintf("%.1f MiB", v/(1<<20))
}

// sampleMetrics scrapes every controller and prober pod every
// metricsInterval until ctx ends. A pod that does not answer (on a node
// cut off, restarting) is left out of that sample.
func (s *state) sampleMetrics(ctx context.Context) {
	t := time.NewTicker(metricsInterval)
	defer t.Stop()
	for {
		for _, c := range components {
			if sm, ok := s.scrape(ctx, c); ok {
				s.mu.Lock()
				s.samples = append(s.samples, sm)
				s.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *state) scrape(ctx context.Context, c component) (sample, bool) {
	sm := sample{at: time.Now(), comp: c.name, values: map[string]float64{}}
	for _, p := range scenario.ListPods(ctx, s.e.c.Client, scenario.SystemNamespace, c.selector) {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := cluster.ScrapeMetricsContext(sctx, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(c.port))+"/metrics")
		cancel()
		if err != nil {
			continue
		}
		for _, w := range watched {
			if v, ok := m[w.series]; ok {
				sm.values[w.series] = max(sm.values[w.series], v)
			}
		}
	}
	return sm, len(sm.values) > 0
}

// checkGrowth compares each watched series of each component between the
// first and the last quarter of the run and fails InvFlat when it grew
// past its tolerance, or when a quarter has no sample to compare.
func (s *state) checkGrowth() []Growth {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	q := s.cfg.Duration / 4
	var out []Growth
	for _, c := range components {
		for _, w := range watched {
			var first, last []float64
			for _, sm := range samples {
				v, ok := sm.values[w.series]
				if sm.comp != c.name || !ok {
					continue
				}
				switch off := sm.at.Sub(s.start); {
				case off >= 0 && off < q:
					first = append(first, v)
				case off >= 3*q && off <= 4*q:
					last = append(last, v)
				}
			}
			g := Growth{Component: c.name, Series: w.series, FirstN: len(first), LastN: len(last)}
			if len(first) == 0 || len(last) == 0 {
				s.fail(InvFlat+"/"+c.name+"/"+w.series, InvFlat, fmt.Sprintf("%s %s: %d samples in the first quarter, %d in the last: nothing to compare",
					c.name, w.series, len(first), len(last)))
				continue
			}
			g.First, g.Last = median(first), median(last)
			out = append(out, g)
			if limit := g.First*(1+w.rel) + w.abs; g.Last > limit {
				s.fail(InvFlat+"/"+c.name+"/"+w.series, InvFlat, fmt.Sprintf("%s: the last quarter's median (%d samples) is above %s, the first quarter's (%d samples) plus %.0f%% and %s",
					g, len(last), formatValue(w.series, limit), len(first), 100*w.rel, formatValue(w.series, w.abs)))
			}
		}
	}
	return out
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
