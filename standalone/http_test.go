package standalone

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulselb/pulselb/dashboard"
)

// gathered returns the value of the metric name with label server=server
// in reg, and whether reg has it.
func gathered(t *testing.T, reg prometheus.Gatherer, name, server string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "server" && l.GetValue() == server {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue(), true
					}
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestHTTPConnectionLimit fills http.max-connections with clients that
// say nothing and checks that the next client waits, is counted, and is
// served once one of them leaves.
func TestHTTPConnectionLimit(t *testing.T) {
	const limit = 8
	h := startHosts(t, "127.0.0.61")
	in := instance{name: "solo", hosts: []string{"a=127.0.0.61"}, maxConns: limit}
	r := start(t, in.load(t, t.TempDir(), h.port))
	metric := func(name string) float64 {
		v, _ := gathered(t, r.Registry(), name, "standalone")
		return v
	}

	quiet := make([]net.Conn, limit)
	for i := range quiet {
		c, err := net.Dial("tcp", r.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		quiet[i] = c
	}
	waitFor(t, 5*time.Second, "every connection taken", func() bool { return metric("pulselb_http_connections") == limit })
	next, err := net.Dial("tcp", r.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := io.WriteString(next, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the next connection counted", func() bool { return metric("pulselb_http_connections_limited_total") == 1 })
	_ = next.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := next.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a connection beyond http.max-connections: %d was served at once", limit)
	}

	quiet[0].Close()
	_ = next.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(next), nil)
	if err != nil {
		t.Fatalf("after a connection left, the waiting one: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `pulselb_http_connections_limited_total{server="standalone"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// TestHTTPHeaderLimit: a request whose headers pass the limit is refused
// before any handler runs.
func TestHTTPHeaderLimit(t *testing.T) {
	h := startHosts(t, "127.0.0.62")
	in := instance{name: "solo", hosts: []string{"a=127.0.0.62"}}
	r := start(t, in.load(t, t.TempDir(), h.port))
	for size, want := range map[int]int{1 << 10: http.StatusOK, 100 << 10: http.StatusRequestHeaderFieldsTooLarge} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.HTTPAddr()+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("a", size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("a %d-byte header: %s, want %d", size, resp.Status, want)
		}
	}
}

// TestReloadKeepsHTTPSettings: the HTTP server's settings are bound at
// start; a reload that changes them says so and keeps the running ones.
func TestReloadKeepsHTTPSettings(t *testing.T) {
	cur := &Config{HTTP: HTTPConfig{Listen: "127.0.0.1:9471", MaxConnections: 256}}
	next := &Config{HTTP: HTTPConfig{Listen: "127.0.0.1:9471", MaxConnections: 512}}
	var changed []string
	got := withFixed(cur, next, func(field string) { changed = append(changed, field) })
	if got.HTTP.MaxConnections != 256 || len(changed) != 1 || changed[0] != "http.max-connections" {
		t.Errorf("reload to max-connections 512: running %d, reported %v; want 256 and [http.max-connections]", got.HTTP.MaxConnections, changed)
	}
}

// TestDashboardLimits: http.dashboard-rows bounds the page's tables and
// http.dashboard-rate paces its responses; by default 200 rows and 20 a
// second.
func TestDashboardLimits(t *testing.T) {
	hosts := []string{}
	for i := range 12 {
		hosts = append(hosts, fmt.Sprintf("h%d=127.0.3.%d", i, i+1))
	}
	in := instance{name: "solo", hosts: hosts, httpExtra: ", dashboard-rows: 10, dashboard-rate: 2"}
	cfg := in.load(t, t.TempDir(), 1)
	if cfg.HTTP.DashboardRows != 10 || cfg.HTTP.DashboardRate != 2 {
		t.Fatalf("http = %+v", cfg.HTTP)
	}
	r := start(t, cfg)
	waitFor(t, 10*time.Second, "every host judged", func() bool {
		st := r.State()
		return len(st.Services) == 1 && len(st.Services[0].Targets) == 12 && !slices.ContainsFunc(st.Services[0].Targets, func(tg dashboard.Target) bool { return tg.State == "Unknown" })
	})
	codes := map[int]int{}
	var body string
	for range 8 {
		resp, err := http.Get("http://" + r.HTTPAddr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusOK {
			body = string(b)
		}
	}
	if n := strings.Count(body, `<tr class="target"`); n != 10 || !strings.Contains(body, "Showing 10 of 12 targets") {
		t.Errorf("the page shows %d target rows, want 10 and a note on the other 2", n)
	}
	// A burst of 4, then one each 500ms: 8 requests in a row cannot all
	// be answered at once; they wait (up to 5s) rather than fail.
	if codes[http.StatusOK] != 8 {
		t.Errorf("answers %v, want 8 OK after waiting their turn", codes)
	}
	if n := counterVec(t, r.Runner, "pulselb_dashboard_paced_total", "result", "waited"); n < 1 {
		t.Errorf("paced_total{result=waited} = %v, want some of 8 requests at 2 a second to have waited", n)
	}
}

// counterVec is the counter name{label=value} of r's registry.
func counterVec(t *testing.T, r *Runner, name, label, value string) float64 {
	t.Helper()
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
