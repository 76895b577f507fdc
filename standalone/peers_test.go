package standalone

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/v1alpha1"
)

// TestPeerRedirectNotFollowed: a peer that answers with a redirect gets
// an error naming it, and the redirect's target never sees a request,
// let alone the token, whatever the status and even on the same host.
func TestPeerRedirectNotFollowed(t *testing.T) {
	var mu sync.Mutex
	var seen []string // what reached the target: Authorization and Referer
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, "Authorization="+r.Header.Get("Authorization")+" Referer="+r.Header.Get("Referer"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"metadata":{"name":"b"}}`))
	}))
	defer target.Close()
	// The peer redirects with the status its URL's first path segment
	// names, to the same path on the target: another port of 127.0.0.1.
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.Split(r.URL.Path, "/")[1])
		http.Redirect(w, r, target.URL+r.URL.Path, code)
	}))
	defer peer.Close()

	h := startHosts(t, "127.0.0.63")
	in := instance{name: "a", hosts: []string{"a=127.0.0.63"}, peers: []Peer{{Name: "b", URL: peer.URL + "/302"}}}
	r := start(t, in.load(t, t.TempDir(), h.port))
	polled := func() (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ps := r.peers["b"]; ps != nil {
			return true, ps.err
		}
		return false, nil
	}
	waitFor(t, 5*time.Second, "a poll of b", func() bool { done, _ := polled(); return done })
	if _, err := polled(); !errors.Is(err, ErrRedirected) || !strings.Contains(err.Error(), "polling peer b") {
		t.Errorf("polling a peer that redirects: %v, want ErrRedirected naming peer b", err)
	}

	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		p := Peer{Name: "b", URL: peer.URL + "/" + strconv.Itoa(code)}
		_, _, err := fetchReport(t.Context(), r.client, p, testToken, time.Second, time.Now)
		if !errors.Is(err, ErrRedirected) || !strings.Contains(err.Error(), strconv.Itoa(code)) {
			t.Errorf("HTTP %d: error %v, want ErrRedirected naming the status", code, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Errorf("the redirect's target got %d requests, the first with %s", len(seen), seen[0])
	}
}

// TestPeerReportChecked: a peer's report with a value no instance writes
// is refused whole, with an error naming the field, before any of it
// reaches the verdicts or the dashboard.
func TestPeerReportChecked(t *testing.T) {
	now := time.Now()
	good := func() v1alpha1.ProbeReport {
		return v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Status: v1alpha1.ProbeReportStatus{Targets: 1,
			Results: []v1alpha1.ProbeResult{{Service: "web", Port: 80, PortProtocol: "TCP", Protocol: "tcp", Observation: v1alpha1.Observation{
				Node: "a", Address: "127.0.0.1:80", State: v1alpha1.StateUp, Outcome: "L4OK", Since: metav1.NewTime(now.Add(-time.Hour)),
				Latency: &metav1.Duration{Duration: time.Millisecond}, Message: "connected"}}}}}
	}
	in := func(mutate func(*v1alpha1.ProbeReport)) v1alpha1.ProbeReport {
		rep := good()
		mutate(&rep)
		return rep
	}
	obs := func(rep *v1alpha1.ProbeReport) *v1alpha1.Observation { return &rep.Status.Results[0].Observation }
	tests := []struct {
		name string
		rep  v1alpha1.ProbeReport
		want string // empty: accepted
	}{
		{"good", good(), ""},
		{"negative latency", in(func(r *v1alpha1.ProbeReport) { obs(r).Latency.Duration = -5 * time.Second }), "status.results[0].latency: -5s is outside 0 to 1m0s"},
		{"huge latency", in(func(r *v1alpha1.ProbeReport) { obs(r).Latency.Duration = 999999 * time.Hour }), "status.results[0].latency: 999999h0m0s is outside 0 to 1m0s"},
		{"unknown state", in(func(r *v1alpha1.ProbeReport) { obs(r).State = "Maybe" }), `status.results[0].state: "Maybe" is not Up or Down`},
		{"unknown outcome", in(func(r *v1alpha1.ProbeReport) { obs(r).Outcome = "<b>L9OK</b>" }), `status.results[0].outcome: "<b>L9OK</b>" is not a probe outcome`},
		{"long message", in(func(r *v1alpha1.ProbeReport) { obs(r).Message = strings.Repeat("x", 5000) }), "status.results[0].message: 5000 bytes, more than 256"},
		{"no port", in(func(r *v1alpha1.ProbeReport) { r.Status.Results[0].Port = 0 }), "status.results[0].port: 0 is not a port"},
		{"bad protocol", in(func(r *v1alpha1.ProbeReport) { r.Status.Results[0].PortProtocol = "SCTP" }), `status.results[0].portProtocol: "SCTP" is not TCP or UDP`},
		{"bad address", in(func(r *v1alpha1.ProbeReport) { obs(r).Address = "somewhere" }), `status.results[0].address: "somewhere" is not an address and port`},
		{"bad node", in(func(r *v1alpha1.ProbeReport) { obs(r).Node = "A B" }), `status.results[0].node: "A B" is not a host name`},
		{"failing since the future", in(func(r *v1alpha1.ProbeReport) { obs(r).FailingSince = &metav1.Time{Time: now.Add(48 * time.Hour)} }),
			"status.results[0].failingSince: " + now.Add(48*time.Hour).UTC().Format(time.RFC3339) + " is more than 24h0m0s ahead"},
		{"a day of clock skew is fine", in(func(r *v1alpha1.ProbeReport) { obs(r).LastChange = &metav1.Time{Time: now.Add(23 * time.Hour)} }), ""},
		{"beacons", in(func(r *v1alpha1.ProbeReport) {
			r.Status.Beacons = []v1alpha1.BeaconResult{{Observation: v1alpha1.Observation{Node: "a", State: v1alpha1.StateDown}}}
		}), "status.beacons: standalone instances send no node beacons"},
		{"external", in(func(r *v1alpha1.ProbeReport) { r.Status.External = true }), "status.external: a peer is no external vantage"},
		{"negative count", in(func(r *v1alpha1.ProbeReport) { r.Status.Down = -1 }), "status: a negative count"},
		{"bad name", in(func(r *v1alpha1.ProbeReport) { r.Name = "" }), `metadata.name "" is not an instance name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(tt.rep)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
			defer srv.Close()
			rep, remote, err := fetchReport(t.Context(), newPeerClient(), Peer{Name: "peer-b", URL: srv.URL}, testToken, time.Second, time.Now)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("a good report refused: %v", err)
			case tt.want == "" && (rep.Name != "peer-b" || remote != "b"):
				t.Errorf("report named %q, remote %q; want peer-b and b", rep.Name, remote)
			case tt.want != "" && (!errors.Is(err, ErrInvalidReport) || !strings.Contains(err.Error(), "polling peer peer-b: peer sent an invalid report: "+tt.want)):
				t.Errorf("err = %v\nwant ErrInvalidReport naming %q", err, tt.want)
			}
		})
	}
}

// pollErr is the error of the last poll of peer name, and whether one
// happened.
func pollErr(r *Runner, name string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ps := r.peers[name]; ps != nil {
		return ps.err, true
	}
	return nil, false
}

// TestPeerThatIsThisInstance: a peer entry whose URL reaches this instance
// (here its own port, which --check cannot know with port 0; in general a
// host name of this host) is refused when its report comes back under
// this instance's name. Before, the instance voted twice: alone behind a
// partition (it probes host a where nothing listens) it failed a "down by
// 2 of 3" with the third peer unreachable.
func TestPeerThatIsThisInstance(t *testing.T) {
	h := startHosts(t, "127.0.0.64")
	dir := t.TempDir()
	in := instance{name: "a1", hosts: []string{"a=127.0.0.64"}, override: map[string]string{"a": "127.0.0.65"}}
	r, ctx, logs := startLogged(t, in.load(t, dir, h.port))
	in.peers = []Peer{{Name: "b", URL: "http://" + r.HTTPAddr()}, {Name: "c", URL: "http://127.0.0.1:1"}}
	if err := r.Reload(ctx, in.load(t, dir, h.port)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "own vote on a Down and b polled", func() bool {
		_, polled := pollErr(r.Runner, "b")
		vs := target(r.Runner, "a").Vantages
		return polled && len(vs) == 3 && vs[0].Vantage == "a1" && vs[0].State == "Down"
	})
	// Several rounds of polls and judgements.
	polls := func() float64 {
		return counter(t, r.Runner, "pulselb_standalone_peer_polls_total", "self") + counter(t, r.Runner, "pulselb_standalone_peer_polls_total", "ok")
	}
	rounds := polls() + 5
	waitFor(t, 10*time.Second, "five more polls of b", func() bool { return polls() >= rounds })
	if v := verdict(r.Runner, "a"); v == "Down" {
		t.Errorf("a is Down (%s): the instance counted its own vote twice", target(r.Runner, "a").Reason)
	}
	if err, _ := pollErr(r.Runner, "b"); !errors.Is(err, ErrSelf) || !strings.Contains(err.Error(), `its report is named "a1", as this instance`) {
		t.Errorf("poll of b: %v, want ErrSelf", err)
	}
	if n := strings.Count(logs(), "peer is this instance"); n != 1 {
		t.Errorf("the self peer logged %d times, want once", n)
	}
}

// TestPeerListedTwice: two peer entries that reach one instance (here b
// directly and through a proxy) count as one vantage. Before, b's Down
// vote about host a, behind a partition only b has, counted twice and
// outvoted this instance's Up.
func TestPeerListedTwice(t *testing.T) {
	h := startHosts(t, "127.0.0.66")
	dir := t.TempDir()
	ins := []instance{{name: "a1", hosts: []string{"a=127.0.0.66"}}, {name: "b", hosts: []string{"a=127.0.0.66"}}}
	rs := startPeers(t, dir, h.port, ins)
	waitFor(t, 10*time.Second, "a up", allUp(rs[0].Runner, "a"))
	// Now b is cut off from a: it probes a where nothing listens.
	ins[1].override = map[string]string{"a": "127.0.0.67"}
	if err := rs[1].Reload(t.Context(), ins[1].load(t, filepath.Join(dir, "b"), h.port)); err != nil {
		t.Fatal(err)
	}
	bURL, err := url.Parse("http://" + rs[1].HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(bURL))
	defer proxy.Close()
	in := ins[0]
	in.peers = []Peer{{Name: "b", URL: bURL.String()}, {Name: "c", URL: proxy.URL}}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	if err := rs[0].Reload(klog.NewContext(t.Context(), logger), in.load(t, filepath.Join(dir, "a1"), h.port)); err != nil {
		t.Fatal(err)
	}
	r := rs[0].Runner
	waitFor(t, 10*time.Second, "b's vote on a Down, a1's Up, c polled", func() bool {
		_, polled := pollErr(r, "c")
		vs := target(r, "a").Vantages
		return polled && len(vs) == 3 && vs[0].Vantage == "a1" && vs[0].State == "Up" && vs[1].Vantage == "b" && vs[1].State == "Down"
	})
	polls := counter(t, r, "pulselb_standalone_peer_polls_total", "ok") + 10
	waitFor(t, 10*time.Second, "five more rounds of polls", func() bool { return counter(t, r, "pulselb_standalone_peer_polls_total", "ok") >= polls })
	if v := verdict(r, "a"); v != "Up" {
		t.Errorf("a is %s (%s): b, listed twice, voted twice", v, target(r, "a").Reason)
	}
	if vs := target(r, "a").Vantages; vs[2].State != "Unknown" {
		t.Errorf("c, the same instance as b, shows %+v; want its report left out", vs[2])
	}
}
