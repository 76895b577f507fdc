package browser

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/prober"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// producer feeds a dashboard from a prober.Scheduler, the way standalone
// mode does: one Service whose targets are the scheduler's, probed from
// one vantage, with the scheduler's transitions.
type producer struct {
	sched   *prober.Scheduler
	dash    *dashboard.Dashboard
	service string
	// meta describes each target key.
	meta map[string]targetMeta

	mu          sync.Mutex
	transitions []dashboard.Transition
	changed     chan struct{}
}

type targetMeta struct {
	node  string
	addr  netip.AddrPort
	probe string
}

const vantage = "test-runner"

func newProducer(service string, meta map[string]targetMeta) *producer {
	return &producer{service: service, meta: meta, changed: make(chan struct{}, 1)}
}

// onChange is the scheduler's OnChange: it records the transition and
// asks for a rebuild.
func (p *producer) onChange(tr prober.Transition) {
	m := p.meta[tr.Key]
	p.mu.Lock()
	p.transitions = append([]dashboard.Transition{{Time: tr.At, Service: p.service, Node: m.node,
		Address: m.addr.Addr().String(), Port: int(m.addr.Port()), From: tr.From.String(), To: tr.To.String(), Reason: tr.Result.Outcome.String() + " " + tr.Result.Message()}}, p.transitions...)
	p.mu.Unlock()
	p.poke()
}

func (p *producer) poke() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// state builds the dashboard State from the scheduler's snapshot.
func (p *producer) state() dashboard.State {
	st := dashboard.State{Role: "standalone", Instance: "browser-test", GeneratedAt: time.Now(), Vantages: []string{vantage}}
	svc := dashboard.Service{Name: p.service, DNSNames: []string{p.service + ".lb.example.test."}, Published: []string{}}
	for _, ts := range p.sched.Snapshot() {
		m := p.meta[ts.Key]
		t := dashboard.Target{Node: m.node, Address: ts.Addr.Addr().String(), Port: int(ts.Addr.Port()), Protocol: "TCP",
			Probe: m.probe, State: ts.State.String(), Since: ts.Since}
		if ts.State == prober.StateDown {
			// As standalone mode judges it alone: down by its one vantage,
			// failing since the first failed probe.
			t.FailingSince = ts.FailingSince
			t.Reason = "down by 1 of 1 probers: " + ts.Last.Outcome.String() + " " + ts.Last.Message()
		}
		if !ts.LastChange.IsZero() {
			t.Since = ts.LastChange
		}
		vr := dashboard.VantageResult{Vantage: vantage, State: ts.State.String(), LastChange: ts.LastChange}
		if !ts.LastAt.IsZero() {
			vr.Outcome, vr.Message, vr.LatencySeconds = ts.Last.Outcome.String(), ts.Last.Message(), ts.Last.Timings.Total.Seconds()
		}
		if ts.Last.TLS != nil {
			t.CertNotAfter = ts.Last.TLS.NotAfter
		}
		t.Vantages = []dashboard.VantageResult{vr}
		if ts.State == prober.StateUp {
			svc.Published = append(svc.Published, t.Address)
			svc.PublishedNodes = append(svc.PublishedNodes, m.node)
		}
		svc.Targets = append(svc.Targets, t)
	}
	slices.Sort(svc.PublishedNodes)
	svc.Healthy = len(svc.Published) > 0
	if !svc.Healthy {
		svc.AllDown = "publish-all"
	}
	st.Services = []dashboard.Service{svc}
	p.mu.Lock()
	st.Transitions = slices.Clone(p.transitions)
	p.mu.Unlock()
	return st
}

// run rebuilds the State on every transition and every interval, for the
// latencies, until ctx is done.
func (p *producer) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		p.dash.Update(p.state())
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
		case <-tick.C:
		}
	}
}

// requireChromium returns the browser's path, or skips the test without
// one; under CI=true a missing browser fails it.
func requireChromium(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (%v); install the Debian package chromium", chromiumPath, err)
		}
		t.Skipf("%s is missing (%v); install the Debian package chromium to run the browser tests", chromiumPath, err)
	}
	return chromiumPath
}

// artifactsDir is where screenshots are kept after the test.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PULSELB_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating artifacts directory: %v", err)
	}
	return dir
}

// docsImagesDir is where the screenshots in docs/ live, relative to this
// package.
const docsImagesDir = "../../docs/images"

// saveScreenshot writes png as name into the artifacts directory and, with
// PULSELB_DOCS_SCREENSHOTS=1, into docs/images, so that the screenshots in
// the documentation come from this test.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dirs := []string{artifactsDir(t)}
	if os.Getenv("PULSELB_DOCS_SCREENSHOTS") == "1" {
		dirs = append(dirs, docsImagesDir)
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("creating %s: %v", dir, err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatalf("saving the screenshot: %v", err)
		}
		t.Logf("screenshot: %s", path)
	}
}

// serve runs h on a fresh loopback port and returns its base URL and a
// function that stops it, closing its connections.
func serve(t *testing.T, h http.Handler) (string, func()) {
	t.Helper()
	return serveOn(t, "127.0.0.1:0", h)
}

// serveOn is serve on addr.
func serveOn(t *testing.T, addr string, h http.Handler) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop := func() { once.Do(func() { _ = srv.Close() }) }
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// TestDashboardShowsFailover loads the dashboard in Chromium while a real
// scheduler probes two loopback targets, stops one, and reads from the
// page, without reloading it, that the target is Down, that it went from
// Up to Down, that its timeline has a down band, that the failover log
// has an entry with its duration, and that the latency sparklines are
// drawn. Its screenshots are the ones in docs/dashboard.md. Each step is a
// method of dashboardEnv.
func TestDashboardShowsFailover(t *testing.T) {
	e := newDashboardEnv(t)
	e.showsHostAUp(t)
	e.screenshot(t, "dashboard-healthy.png")
	// A mark that a reload would wipe.
	if err := chromedp.Do(e.tab, evaluate(`window.pulselbNotReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	versionBefore := e.prod.dash.Version()
	e.failHostA(t)
	e.showsFailover(t, versionBefore)
	e.screenshot(t, "dashboard-failover.png")
	e.noConsoleErrors(t)
}

// dashboardEnv is TestDashboardShowsFailover's setting: two loopback
// backends, host-a's plain HTTP (the one that fails) and host-b's HTTPS, a
// scheduler probing them, the dashboard it feeds, and a Chromium tab on the
// dashboard that records console errors. Everything stops when the test
// ends.
type dashboardEnv struct {
	prod *producer
	tab  context.Context
	// webURL is host-a's backend; stopWeb stops it.
	webURL  string
	stopWeb func()
	webAddr netip.AddrPort

	consoleMu     sync.Mutex
	consoleErrors []string
}

// upCell is the script that finds host-a's state cell.
const upCell = `document.querySelector('tr.target[data-node="host-a"] td.state')`

// newDashboardEnv starts the backends, the scheduler, the dashboard and the
// browser, and registers their stops, in the reverse order, with t.
func newDashboardEnv(t *testing.T) *dashboardEnv {
	browserPath := requireChromium(t)
	// Made first, so removed last: after the browser has stopped.
	userData := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &dashboardEnv{}

	// Backends: plain HTTP (the one that fails) and HTTPS, whose
	// certificate shows in the certificates table.
	health := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// host-a on its own loopback address, so that its address leaving the
	// published set is visible.
	e.webURL, e.stopWeb = serveOn(t, "127.0.0.2:0", health)
	tlsSrv := httptest.NewTLSServer(health)
	t.Cleanup(tlsSrv.Close)

	httpSpec, tlsSpec := probespec.MustParse("http path=/healthz"), probespec.MustParse("https path=/healthz verify=false")
	httpProber, err := prober.New(httpSpec, prober.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tlsProber, err := prober.New(tlsSpec, prober.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr := addrPort(t, tlsSrv.URL)
	e.webAddr = addrPort(t, e.webURL)
	prod := newProducer("web", map[string]targetMeta{
		"web@host-a": {node: "host-a", addr: e.webAddr, probe: httpSpec.String()},
		"web@host-b": {node: "host-b", addr: tlsAddr, probe: tlsSpec.String()},
	})
	sched := prober.NewScheduler(prober.Config{Interval: 200 * time.Millisecond, FastInterval: 100 * time.Millisecond,
		Rise: 2, Fall: 2, OnChange: prod.onChange})
	sched.Set([]prober.Target{
		{Key: "web@host-a", Addr: e.webAddr, Protocol: httpSpec.Protocol, Prober: httpProber},
		{Key: "web@host-b", Addr: tlsAddr, Protocol: tlsSpec.Protocol, Prober: tlsProber},
	})
	prod.sched = sched
	// The default window; a latency sample every 250 ms, so that the
	// seconds of this test draw a sparkline.
	prod.dash = dashboard.New(dashboard.Options{Title: "pulselb browser test", KeepAlive: time.Second,
		History: dashboard.HistoryOptions{LatencyEvery: 250 * time.Millisecond}})
	t.Cleanup(prod.dash.Close)
	e.prod = prod

	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	runCtx, stopRun := context.WithCancel(ctx)
	t.Cleanup(stopRun)
	wg.Go(func() {
		if err := sched.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("scheduler: %v", err)
		}
	})
	wg.Go(func() { prod.run(runCtx, 500*time.Millisecond) })
	dashURL, _ := serve(t, prod.dash)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browserPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(userData),
		chromedp.WindowSize(1280, 1024),
	)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab) // ends the console loop before wg.Wait
	e.tab = tab

	// Every console error or uncaught exception fails the test: a script
	// the Content-Security-Policy blocks would show here.
	messages := chromedp.Console(tab)
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				e.consoleMu.Lock()
				e.consoleErrors = append(e.consoleErrors, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
				e.consoleMu.Unlock()
			}
		}
	})
	if err := chromedp.Do(tab, chromedp.Navigate(dashURL+"/")); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	return e
}

// showsHostAUp waits until the page shows host-a Up with a few latency
// samples and is live, and checks that its zero down count is neutral.
func (e *dashboardEnv) showsHostAUp(t *testing.T) {
	sparkPoints := func(node string) string {
		return `Number(document.querySelector('tr.target[data-node="` + node + `"] svg.sparkline')?.getAttribute('data-points') ?? 0)`
	}
	if err := chromedp.Do(e.tab,
		chromedp.Poll[chromedp.Void](upCell+`?.textContent === "Up"`, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#live')?.textContent === "live"`, chromedp.WithPollingTimeout(15*time.Second)),
		// A few latency samples of host-a before it fails.
		chromedp.Poll[chromedp.Void](sparkPoints("host-a")+` >= 4`, chromedp.WithPollingTimeout(30*time.Second)),
	); err != nil {
		t.Fatalf("waiting for the page to show host-a Up with latencies and go live: %v", err)
	}
	// Before the failure: a zero count is neutral, not in the down colour.
	zero, err := chromedp.Run(e.tab, chromedp.Evaluate[string](
		`[...document.querySelectorAll('tr.service[data-service="web"] .count')].find(e => e.textContent === "0 down")?.className ?? "missing"`))
	if err != nil {
		t.Fatal(err)
	}
	if zero != "count count-zero" {
		t.Errorf("\"0 down\" has class %q, want the neutral count count-zero", zero)
	}
}

// screenshot saves a screenshot of the whole page as name.
func (e *dashboardEnv) screenshot(t *testing.T, name string) {
	png, err := chromedp.Run(e.tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("taking a screenshot: %v", err)
	}
	saveScreenshot(t, name, png)
}

// failHostA stops host-a's backend and waits until the page shows host-a
// Down, its Up→Down transition and its failover, and a down band of 3 s.
func (e *dashboardEnv) failHostA(t *testing.T) {
	e.stopWeb()
	t.Logf("stopped the backend of host-a at %s", e.webURL)
	downSince := time.Now()
	if err := chromedp.Do(e.tab,
		chromedp.Poll[chromedp.Void](upCell+`?.textContent === "Down"`, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr.transition[data-node="host-a"][data-from="Up"][data-to="Down"]') !== null`,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr.failover[data-service="web"][data-nodes="host-a"]') !== null`,
			chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("waiting for the page to show host-a Down and its failover: %v", err)
	}
	t.Logf("the page showed host-a Down %v after its backend stopped", time.Since(downSince).Round(time.Millisecond))
	// The down band grows as the page follows the events: wait until host-a
	// has been down for 3 s, for a band one can see in the screenshot.
	if err := chromedp.Do(e.tab, chromedp.Poll[chromedp.Void](
		`/^Down now for ([3-9]|[1-9][0-9]+)s/.test(document.querySelector('tr.target[data-node="host-a"] .timeline .summary')?.textContent ?? "")`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("waiting for host-a's down band to grow: %v", err)
	}
}

// showsFailover reads what a user sees after host-a failed and checks it:
// host-a Down in the down colour with its transition, outcome, down band
// and sparkline, host-b and the service still up, the failover entry with
// host-a's address and its duration, a certificate, a live page that was
// not reloaded, and a dashboard version past versionBefore.
func (e *dashboardEnv) showsFailover(t *testing.T, versionBefore uint64) {
	tab, prod, webAddr := e.tab, e.prod, e.webAddr
	type seen struct {
		State      string `json:"state"`
		StateClass string `json:"stateClass"`
		Change     string `json:"change"`
		Cell       string `json:"cell"`
		Other      string `json:"other"`
		Health     string `json:"health"`
		Cert       string `json:"cert"`
		Reloaded   bool   `json:"reloaded"`
		// The history: host-a's bands, its timeline's text, the failover
		// log and the sparklines.
		Bands           []string `json:"bands"`
		DownBandWidth   float64  `json:"downBandWidth"`
		TimelineText    string   `json:"timelineText"`
		Failover        string   `json:"failover"`
		FailoverAddress string   `json:"failoverAddress"`
		Duration        string   `json:"duration"`
		SparkPointsA    string   `json:"sparkPointsA"`
		ServiceBands    []string `json:"serviceBands"`
		Live            string   `json:"live"`
	}
	got, err := chromedp.Run(tab, chromedp.Evaluate[seen](`(() => {
		const q = (s) => document.querySelector(s);
		return {
			state: q('tr.target[data-node="host-a"] td.state').textContent,
			stateClass: q('tr.target[data-node="host-a"] td.state').className,
			change: q('tr.transition[data-node="host-a"][data-from="Up"][data-to="Down"] td.change').textContent,
			cell: q('tr.matrix-row[data-node="host-a"] td.cell').textContent,
			other: q('tr.target[data-node="host-b"] td.state').textContent,
			health: q('tr.service[data-service="web"] td.health').textContent,
			cert: q('tr.cert td.days')?.textContent ?? "",
			reloaded: window.pulselbNotReloaded !== true,
			bands: [...document.querySelectorAll('tr.target[data-node="host-a"] svg.bands rect')].map(r => r.getAttribute('data-state')),
			downBandWidth: q('tr.target[data-node="host-a"] svg.bands rect.band-down')?.getBoundingClientRect().width ?? 0,
			timelineText: q('tr.target[data-node="host-a"] .timeline .summary')?.textContent ?? "",
			failover: q('tr.failover[data-nodes="host-a"]')?.textContent ?? "",
			failoverAddress: q('tr.failover[data-nodes="host-a"] td code')?.textContent ?? "",
			duration: q('tr.failover[data-nodes="host-a"] td.duration')?.textContent ?? "",
			sparkPointsA: q('tr.target[data-node="host-a"] svg.sparkline polyline')?.getAttribute('points') ?? "",
			serviceBands: [...document.querySelectorAll('tr.service[data-service="web"] svg.bands rect')].map(r => r.getAttribute('data-state')),
			live: q('#live').textContent,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page: %+v", got)
	if got.State != "Down" || got.StateClass != "state state-down" {
		t.Errorf("host-a shows %q (class %q), want Down in the down colour", got.State, got.StateClass)
	}
	if got.Change != "Up→Down" {
		t.Errorf("host-a's transition reads %q, want Up→Down", got.Change)
	}
	if !strings.HasPrefix(got.Cell, "L4CON") {
		t.Errorf("host-a's matrix cell reads %q, want the outcome L4CON first", got.Cell)
	}
	if got.Other != "Up" || got.Health != "Healthy" {
		t.Errorf("host-b shows %q and the service %q, want Up and Healthy", got.Other, got.Health)
	}
	if got.Cert == "" {
		t.Error("the certificates table shows no days left for host-b's HTTPS probe")
	}
	if got.Reloaded {
		t.Error("the page was reloaded; it must update from the event stream")
	}
	if v := prod.dash.Version(); v <= versionBefore {
		t.Errorf("dashboard version %d, want more than %d", v, versionBefore)
	}
	if got.Live != "live" {
		t.Errorf("the live indicator reads %q, want live", got.Live)
	}
	if len(got.Bands) < 2 || got.Bands[len(got.Bands)-2] != "Up" || got.Bands[len(got.Bands)-1] != "Down" || got.DownBandWidth < 10 {
		t.Errorf("host-a's timeline bands %v (down band %.1f px wide), want Up then a visible Down band", got.Bands, got.DownBandWidth)
	}
	if !strings.HasPrefix(got.TimelineText, "Down now for ") || !strings.Contains(got.TimelineText, " · 1 outage ") {
		t.Errorf("host-a's timeline reads %q, want it to say in words that it is down after 1 outage", got.TimelineText)
	}
	if n := len(got.ServiceBands); n < 2 || got.ServiceBands[n-2] != "Up" || got.ServiceBands[n-1] != "Degraded" {
		t.Errorf("the service's bands %v, want Up then Degraded", got.ServiceBands)
	}
	if got.FailoverAddress != webAddr.Addr().String() {
		t.Errorf("the failover removed %q, want host-a's %s", got.FailoverAddress, webAddr.Addr())
	}
	// From the first failed probe to the address leaving: at least the
	// fast re-probe that confirmed the failure, at most the detection time.
	if d, err := time.ParseDuration(got.Duration); err != nil || d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("failover duration %q (%v), want between 50ms and 5s", got.Duration, err)
	} else {
		t.Logf("failover: %s", strings.Join(strings.Fields(got.Failover), " "))
	}
	if pts := strings.Fields(got.SparkPointsA); len(pts) < 4 {
		t.Errorf("host-a's sparkline has points %q, want at least 4", got.SparkPointsA)
	}
}

// noConsoleErrors fails t for every console error or uncaught exception the
// page has had.
func (e *dashboardEnv) noConsoleErrors(t *testing.T) {
	e.consoleMu.Lock()
	defer e.consoleMu.Unlock()
	for _, msg := range e.consoleErrors {
		t.Errorf("browser console: %s", msg)
	}
}

// evaluate runs js in the page, ignoring its value.
func evaluate(js string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[bool](js)(ctx, t)
		return chromedp.Void{}, err
	}
}

func addrPort(t *testing.T, rawURL string) netip.AddrPort {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		t.Fatalf("address of %s: %v", rawURL, err)
	}
	return ap
}
