package grafana_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulselb/pulselb/controller"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/proxy"
)

// grafanaDashboard is the part of Grafana's dashboard model the test reads.
type grafanaDashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// recorder is a Registerer that keeps the name of every metric
// registered, vectors without children included, which Gather would miss.
type recorder struct {
	reg   *prometheus.Registry
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.reg.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// registered returns the names of every metric pulselb's packages register.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	r := &recorder{reg: prometheus.NewPedanticRegistry(), names: map[string]bool{}}
	for name, register := range map[string]func(prometheus.Registerer) error{
		"controller": controller.NewMetrics().RegisterMetrics,
		"prober":     prober.NewMetrics().RegisterMetrics,
		"agent":      agent.NewMetrics().RegisterMetrics,
		"proxy":      proxy.NewMetrics().RegisterMetrics,
		"dnsexport":  dnsexport.NewMetrics().RegisterMetrics,
		"dashboard":  dashboard.NewMetrics().RegisterMetrics,
	} {
		if err := register(r); err != nil {
			t.Fatalf("registering the %s metrics: %v", name, err)
		}
	}
	if len(r.names) < 20 {
		t.Fatalf("only %d metrics registered: %v", len(r.names), r.names)
	}
	return r.names
}

func load(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile("pulselb.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parsing pulselb.json: %v", err)
	}
	return d
}

func walk(ps []panel, f func(panel)) {
	for _, p := range ps {
		f(p)
		walk(p.Panels, f)
	}
}

// metricName finds metric names in a PromQL expression: identifiers that
// start with pulselb_ and are not followed by "(" (a function).
var metricName = regexp.MustCompile(`\bpulselb_[a-zA-Z0-9_:]*`)

// TestMetricsExist: every metric an expression of the dashboard reads is
// registered by pulselb's code, so renaming a metric fails here rather
// than leaving an empty panel.
func TestMetricsExist(t *testing.T) {
	names := registered(t)
	d := load(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: both are needed for import", d.Title, d.UID)
	}
	used := map[string]bool{}
	exprs := 0
	walk(d.Panels, func(p panel) {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			found := metricName.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: expression %q reads no pulselb metric", p.Title, tg.Expr)
			}
			for _, m := range found {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(m, suffix); ok && names[s] {
						base = s
					}
				}
				if !names[base] {
					t.Errorf("panel %q: metric %s is not registered by any pulselb package", p.Title, m)
				}
				used[base] = true
			}
		}
	})
	if exprs == 0 {
		t.Fatal("the dashboard has no queries")
	}
	// The panels the operations docs promise.
	for _, m := range []string{
		"pulselb_controller_verdict_changes_total", "pulselb_controller_failover_duration_seconds",
		"pulselb_prober_probes_total", "pulselb_prober_probe_duration_seconds", "pulselb_prober_report_writes_total",
		"pulselb_dnsexport_queries_total", "pulselb_proxy_bytes_total", "pulselb_proxy_connections_total",
	} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
	var unused []string
	for n := range names {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	slices.Sort(unused)
	t.Logf("%d of %d metrics on the dashboard; not shown: %s", len(used), len(names), strings.Join(unused, ", "))
}

// TestMetricNamePattern guards the test itself: it must see histogram
// series and several metrics in one expression.
func TestMetricNamePattern(t *testing.T) {
	got := metricName.FindAllString(`histogram_quantile(0.9, sum by (le) (rate(pulselb_a_seconds_bucket[5m]))) / pulselb_b`, -1)
	if !slices.Equal(got, []string{"pulselb_a_seconds_bucket", "pulselb_b"}) {
		t.Errorf("found %v", got)
	}
}
