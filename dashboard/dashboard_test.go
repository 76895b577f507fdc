package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulselb/pulselb/api/probespec"
)

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// testState is a State with one service on two nodes seen from three
// vantages, one target down.
func testState() State {
	return State{
		Role:        "controller",
		Instance:    "pulselb-controller-0",
		GeneratedAt: testNow.Add(-2 * time.Second),
		Vantages:    []string{"node-a", "node-b", "node-c"},
		Services: []Service{{
			Name:      "shop/web",
			DNSNames:  []string{"web.shop.lb.example.test."},
			Published: []string{"198.18.0.11"},
			Healthy:   true,
			Targets: []Target{
				{Node: "node-a", Address: "198.18.0.11", Port: 443, Protocol: "TCP", Probe: "https path=/healthz",
					State: "Up", Since: testNow.Add(-3 * time.Minute), CertNotAfter: testNow.Add(10 * 24 * time.Hour),
					Vantages: []VantageResult{
						{Vantage: "node-b", State: "Up", Outcome: "L7OK", LatencySeconds: 0.00123},
						{Vantage: "node-c", State: "Up", Outcome: "L7OK", LatencySeconds: 0.0456},
					}},
				{Node: "node-b", Address: "198.18.0.12", Port: 443, Protocol: "TCP", Probe: "https path=/healthz",
					State: "Down", Since: testNow.Add(-5 * time.Second), CertNotAfter: testNow.Add(40 * 24 * time.Hour),
					Vantages: []VantageResult{
						{Vantage: "node-a", State: "Down", Outcome: "L4CON", Message: "connection refused"},
						{Vantage: "node-c", State: "Down", Outcome: "L4CON", Message: "connection refused", Stale: true},
					}},
			},
		}},
		Transitions: []Transition{{Time: testNow.Add(-5 * time.Second), Service: "shop/web", Node: "node-b",
			Address: "198.18.0.12", Port: 443, From: "Up", To: "Down", Reason: "down by 2 of 2 probers"}},
	}
}

func newTestDashboard(opts Options) *Dashboard {
	if opts.Now == nil {
		opts.Now = func() time.Time { return testNow }
	}
	return New(opts)
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestPageRendersStateWithoutJavaScript(t *testing.T) {
	d := newTestDashboard(Options{Title: "pulselb test"})
	d.Update(testState())
	rec := get(t, d, http.MethodGet, "/")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET / = %d, want 200: %s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	for _, want := range []string{
		"<title>pulselb test</title>",
		`data-version="1"`,
		"pulselb-controller-0",
		// Services: published addresses, health and DNS names.
		`<td class="published"><code>198.18.0.11</code>`,
		`<td class="health state-up">Healthy</td>`,
		"<code>web.shop.lb.example.test.</code>",
		"1 up</span>", "1 down</span>",
		// Targets with state and since.
		`data-node="node-b" data-address="198.18.0.12" data-port="443"`,
		`<td class="state state-down">Down</td>`,
		`<td class="state state-up">Up</td>`,
		`<time datetime="2026-12-01T11:57:00Z">2026-12-01 11:57:00Z</time> (<span class="ago" data-since="2026-12-01T11:57:00Z">3m0s</span>)`,
		// Matrix: columns, state colour, outcome, latency, stale, unassigned.
		`<th class="vantage">node-c</th>`,
		`data-vantage="node-b" title="Up">L7OK<br><span class="latency">1.23 ms</span>`,
		`data-vantage="node-c" title="Up">L7OK<br><span class="latency">45.6 ms</span>`,
		`<td class="cell state-down stale" data-vantage="node-c" title="Down (stale report): connection refused">L4CON`,
		`<td class="cell unassigned">`,
		// Transitions.
		`data-from="Up" data-to="Down"`,
		`<span class="from state-up">Up</span>→<span class="to state-down">Down</span>`,
		"down by 2 of 2 probers",
		// Certificates: 10 days left warns, 40 does not.
		`<tr class="cert cert-warn">`,
		`<td class="days">10</td>`,
		`<tr class="cert cert-ok">`,
		`<td class="days">40</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Index(body, "cert-warn") > strings.Index(body, "cert-ok") {
		t.Error("certificates are not sorted soonest expiry first")
	}
}

func TestPageStates(t *testing.T) {
	expired := testState()
	expired.Services[0].Targets[0].CertNotAfter = testNow.Add(-time.Hour)
	allDown := testState()
	allDown.Services[0].Healthy = false
	allDown.Services[0].AllDown = "publish-none"
	allDown.Services[0].Published = nil
	extraVantage := testState()
	extraVantage.Vantages = []string{"node-a"}
	for _, tc := range []struct {
		name  string
		state *State
		want  []string
	}{
		{"empty", nil, []string{`data-version="0"`, "waiting for the first health data", "No services.", "No transitions yet."}},
		{"expired certificate", &expired, []string{`<tr class="cert cert-expired">`, `<td class="days">expired</td>`}},
		{"all down", &allDown, []string{`<td class="health state-down">All down (publish-none)</td>`, `<td class="published"><span class="none">none</span>`}},
		{"vantage missing from State.Vantages", &extraVantage, []string{`<th class="vantage">node-a</th><th class="vantage">node-b</th><th class="vantage">node-c</th>`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDashboard(Options{})
			if tc.state != nil {
				d.Update(*tc.state)
			}
			body := get(t, d, http.MethodGet, "/").Body.String()
			for _, want := range tc.want {
				if !strings.Contains(body, want) {
					t.Errorf("page lacks %q", want)
				}
			}
		})
	}
}

// TestShowsSecretNameOnly: a probe spec names a Secret; the page and the
// JSON show that name and nothing that looks like its value.
func TestShowsSecretNameOnly(t *testing.T) {
	spec, err := probespec.Parse("mysql user=monitor secret=db-cred database=shop")
	if err != nil {
		t.Fatal(err)
	}
	s := testState()
	s.Services[0].Targets[0].Probe = spec.String()
	d := newTestDashboard(Options{})
	d.Update(s)
	for _, path := range []string{"/", "/fragment", "/api/v1/state"} {
		body := get(t, d, http.MethodGet, path).Body.String()
		if !strings.Contains(body, "secret=db-cred") {
			t.Errorf("%s does not name the Secret db-cred", path)
		}
		if strings.Contains(strings.ToLower(body), "password") {
			t.Errorf("%s mentions a password:\n%s", path, body)
		}
	}
}

func TestEscapesProducerText(t *testing.T) {
	s := testState()
	s.Services[0].Name = `<script>alert(1)</script>`
	s.Services[0].Targets[1].Vantages[0].Message = `"><img src=x onerror=alert(2)>`
	d := newTestDashboard(Options{})
	d.Update(s)
	body := get(t, d, http.MethodGet, "/").Body.String()
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img") {
		t.Fatalf("producer text is not escaped:\n%s", body)
	}
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("service name is not shown escaped")
	}
}

func TestSecurityHeadersAndNoInlineScript(t *testing.T) {
	d := newTestDashboard(Options{})
	d.Update(testState())
	for _, path := range []string{"/", "/fragment", "/api/v1/state", "/static/dashboard.js", "/static/dashboard.css", "/nope"} {
		rec := get(t, d, http.MethodGet, path)
		if got := rec.Header().Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy = %q", path, got)
		}
		if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options = %q", path, got)
		}
	}
	body := get(t, d, http.MethodGet, "/").Body.String()
	for _, re := range []string{`<script(\s[^>]*)?>[^<]`, `<script>`, `\sstyle=`, `\son[a-z]+=`, `https?://`} {
		if m := regexp.MustCompile(re).FindString(body); m != "" {
			t.Errorf("page has %q (%s), which the policy forbids or which loads from elsewhere", m, re)
		}
	}
	if !strings.Contains(body, `<script src="static/dashboard.js" defer></script>`) {
		t.Error("page does not load the embedded script")
	}
}

func TestReadOnlyAndPaths(t *testing.T) {
	d := newTestDashboard(Options{})
	d.Update(testState())
	d.Close() // end the event stream at once
	for _, tc := range []struct {
		method, path string
		code         int
		contentType  string
	}{
		{http.MethodGet, "/", 200, "text/html; charset=utf-8"},
		{http.MethodHead, "/", 200, "text/html; charset=utf-8"},
		{http.MethodGet, "/fragment", 200, "text/html; charset=utf-8"},
		{http.MethodGet, "/api/v1/state", 200, "application/json"},
		{http.MethodHead, "/api/v1/events", 200, "text/event-stream"},
		{http.MethodGet, "/static/dashboard.js", 200, "text/javascript; charset=utf-8"},
		{http.MethodGet, "/static/dashboard.css", 200, "text/css; charset=utf-8"},
		{http.MethodGet, "/static/favicon.svg", 200, "image/svg+xml"},
		{http.MethodGet, "/static/page.html", 404, ""},
		{http.MethodGet, "/index.html", 404, ""},
		{http.MethodPost, "/", 405, ""},
		{http.MethodPut, "/api/v1/state", 405, ""},
		{http.MethodDelete, "/api/v1/state", 405, ""},
		{http.MethodPatch, "/", 405, ""},
		{http.MethodPost, "/api/v1/events", 405, ""},
		{http.MethodOptions, "/", 405, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := get(t, d, tc.method, tc.path)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d", rec.Code, tc.code)
			}
			if tc.code == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow = %q", rec.Header().Get("Allow"))
			}
			if tc.contentType != "" && rec.Header().Get("Content-Type") != tc.contentType {
				t.Errorf("Content-Type = %q, want %q", rec.Header().Get("Content-Type"), tc.contentType)
			}
		})
	}
}

func TestStateJSON(t *testing.T) {
	d := newTestDashboard(Options{})
	rec := get(t, d, http.MethodGet, "/api/v1/state")
	var empty State
	if err := json.Unmarshal(rec.Body.Bytes(), &empty); err != nil || rec.Header().Get(VersionHeader) != "0" {
		t.Fatalf("empty state: %v, version %q: %s", err, rec.Header().Get(VersionHeader), rec.Body)
	}
	if !strings.Contains(rec.Body.String(), `"services":[]`) {
		t.Errorf("empty state %s: want empty lists, not null", rec.Body)
	}

	want := testState()
	d.Update(want)
	rec = get(t, d, http.MethodGet, "/api/v1/state")
	var got State
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if string(wantJSON) != string(gotJSON) {
		t.Errorf("state round trip:\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if rec.Header().Get(VersionHeader) != "1" {
		t.Errorf("version header %q, want 1", rec.Header().Get(VersionHeader))
	}
}

func TestUpdateVersions(t *testing.T) {
	d := newTestDashboard(Options{})
	s := testState()
	d.Update(s)
	if d.Version() != 1 {
		t.Fatalf("version %d after the first Update, want 1", d.Version())
	}
	// Rebuilt but unchanged: no new version, but the newer build time is served.
	again := testState()
	again.GeneratedAt = s.GeneratedAt.Add(time.Second)
	d.Update(again)
	if d.Version() != 1 {
		t.Errorf("version %d after an unchanged Update, want 1", d.Version())
	}
	if body := get(t, d, http.MethodGet, "/api/v1/state").Body.String(); !strings.Contains(body, again.GeneratedAt.Format(time.RFC3339)) {
		t.Error("the newer build time is not served")
	}
	changed := testState()
	changed.Services[0].Targets[0].State = "Down"
	d.Update(changed)
	if d.Version() != 2 {
		t.Errorf("version %d after a change, want 2", d.Version())
	}
	// A non-finite latency cannot be encoded as JSON; it shows as none.
	bad := testState()
	bad.Services[0].Targets[0].Vantages[0].LatencySeconds = math.NaN()
	d.Update(bad)
	if d.Version() != 3 {
		t.Errorf("version %d after a NaN latency, want 3", d.Version())
	}
	if !math.IsNaN(bad.Services[0].Targets[0].Vantages[0].LatencySeconds) {
		t.Error("Update changed the caller's State")
	}
	if rec := get(t, d, http.MethodGet, "/api/v1/state"); rec.Code != 200 || !json.Valid(rec.Body.Bytes()) {
		t.Errorf("state with a NaN latency: %d %s", rec.Code, rec.Body)
	}
}

// sseReader reads events and comments from an event stream.
type sseReader struct {
	r *bufio.Reader
}

// next returns the next event's type and data, or a comment as type ":".
func (s sseReader) next() (typ, data string, err error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if typ != "" {
				return typ, data, nil
			}
		case strings.HasPrefix(line, ":"):
			if typ == "" {
				typ = ":"
				data = strings.TrimSpace(line[1:])
			}
		case strings.HasPrefix(line, "event: "):
			typ = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

// nextVersion skips comments and returns the version of the next event.
func (s sseReader) nextVersion(t *testing.T) uint64 {
	t.Helper()
	for {
		typ, data, err := s.next()
		if err != nil {
			t.Fatalf("reading events: %v", err)
		}
		if typ == ":" {
			continue
		}
		if typ != "state" {
			t.Fatalf("event %q, want state", typ)
		}
		var e Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("event data %q: %v", data, err)
		}
		return e.Version
	}
}

func openEvents(t *testing.T, ctx context.Context, url string) (*http.Response, sseReader) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, sseReader{bufio.NewReader(resp.Body)}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEvents(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	d := newTestDashboard(Options{KeepAlive: 20 * time.Millisecond, MaxClients: 2, Metrics: m})
	srv := httptest.NewServer(d)
	defer srv.Close()
	defer d.Close() // end the streams first, or srv.Close waits for them
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	resp, events := openEvents(t, ctx, srv.URL)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if v := events.nextVersion(t); v != 0 {
		t.Fatalf("first event version %d, want 0 before any Update", v)
	}
	if got := testutil.ToFloat64(d.opts.Metrics.sseClients); got != 1 {
		t.Errorf("sse_clients = %v, want 1", got)
	}
	d.Update(testState())
	if v := events.nextVersion(t); v != 1 {
		t.Fatalf("event version %d after Update, want 1", v)
	}

	// Keep-alive comments flow while nothing changes.
	for {
		typ, data, err := events.next()
		if err != nil {
			t.Fatal(err)
		}
		if typ == ":" && data == "keep-alive" {
			break
		}
	}

	// A second client gets the current version at once; a third is refused.
	ctx2, cancel2 := context.WithCancel(t.Context())
	_, events2 := openEvents(t, ctx2, srv.URL)
	if v := events2.nextVersion(t); v != 1 {
		t.Fatalf("second client's first version %d, want 1", v)
	}
	if resp3, _ := openEvents(t, t.Context(), srv.URL); resp3.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("third client: status %d, want 503", resp3.StatusCode)
	}
	// A client that goes away is removed.
	cancel2()
	waitFor(t, "the second client to be removed", func() bool { return d.Clients() == 1 })

	// Close ends the stream.
	d.Close()
	for {
		if _, _, err := events.next(); err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() != nil {
				t.Fatalf("stream ended with %v", err)
			}
			break
		}
	}
	waitFor(t, "every client to be removed", func() bool { return d.Clients() == 0 })
	if got := testutil.ToFloat64(d.opts.Metrics.sseClients); got != 0 {
		t.Errorf("sse_clients = %v after every client left, want 0", got)
	}
}

// TestSlowClientDoesNotBlockUpdate: a client that reads nothing cannot
// hold up Update, and when it reads again it skips to the latest version.
func TestSlowClientDoesNotBlockUpdate(t *testing.T) {
	d := newTestDashboard(Options{KeepAlive: time.Hour})
	srv := httptest.NewServer(d)
	defer srv.Close()
	defer d.Close() // end the streams first, or srv.Close waits for them
	_, events := openEvents(t, t.Context(), srv.URL)
	if v := events.nextVersion(t); v != 0 {
		t.Fatalf("first version %d", v)
	}

	const updates = 5000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range updates {
			s := testState()
			s.Services[0].Targets[0].Since = testNow.Add(time.Duration(i) * time.Second)
			d.Update(s)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Update blocked on a client that does not read")
	}
	// The client sees increasing versions and reaches the last one without
	// receiving one event per Update.
	var seen, last uint64
	for last != updates {
		v := events.nextVersion(t)
		if v <= last {
			t.Fatalf("version %d after %d", v, last)
		}
		last = v
		seen++
	}
	if seen == updates {
		t.Logf("the client kept up with all %d updates", updates)
	}
}

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{42 * time.Second, "42s"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{2*time.Hour + 5*time.Minute + 9*time.Second, "2h5m"},
		{4*24*time.Hour + 3*time.Hour + 59*time.Minute, "4d3h"},
	} {
		if got := age(tc.d); got != tc.want {
			t.Errorf("age(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestExternalVantageColumns: external vantages are columns of their own,
// after the in-cluster ones, marked external, in the page and the JSON.
func TestExternalVantageColumns(t *testing.T) {
	st := testState()
	st.ExternalVantages = []string{"external-vps"}
	targets := st.Services[0].Targets
	targets[0].Vantages = append(targets[0].Vantages, VantageResult{Vantage: "external-vps", External: true, State: "Down", Outcome: "L4TOUT", Message: "connect timeout"})
	// A vantage named like a node, but external, is another column.
	targets[1].Vantages = append(targets[1].Vantages, VantageResult{Vantage: "node-a", External: true, State: "Up", Outcome: "L4OK"})
	d := newTestDashboard(Options{})
	d.Update(st)
	body := get(t, d, http.MethodGet, "/").Body.String()
	head := regexp.MustCompile(`<th class="vantage[^"]*"[^>]*>([^<]*)</th>`).FindAllStringSubmatch(body, -1)
	var cols []string
	for _, m := range head {
		cols = append(cols, m[0])
	}
	if len(cols) != 5 || !strings.Contains(cols[2], ">node-c<") || !strings.Contains(cols[3], `class="vantage external"`) || !strings.Contains(cols[3], ">external-vps<") ||
		!strings.Contains(cols[4], `class="vantage external"`) || !strings.Contains(cols[4], ">node-a<") {
		t.Errorf("matrix columns %q, want node-a, node-b, node-c, then the external external-vps and node-a", cols)
	}
	for _, want := range []string{
		`<td class="cell state-down external" data-vantage="external-vps" data-external="true" title="Down: connect timeout">L4TOUT`,
		`<td class="cell state-up external" data-vantage="node-a" data-external="true" title="Up">L4OK`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	var got State
	if err := json.Unmarshal(get(t, d, http.MethodGet, "/api/v1/state").Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.ExternalVantages) != 1 || !got.Services[0].Targets[0].Vantages[2].External {
		t.Errorf("JSON external vantages %v, results %+v", got.ExternalVantages, got.Services[0].Targets[0].Vantages)
	}
}
