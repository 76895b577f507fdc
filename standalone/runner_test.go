package standalone

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/status"
)

var threeHosts = []string{"a=127.0.0.31", "b=127.0.0.32", "c=127.0.0.33"}

// TestHostDownLeavesDNS stops host b and measures how long its address
// stays in the DNS answer. The bound is the configured detection time:
// up to one interval until the next probe, fall-1 fast re-probes, and
// slack for a busy test machine.
func TestHostDownLeavesDNS(t *testing.T) {
	h := startHosts(t, "127.0.0.31", "127.0.0.32", "127.0.0.33")
	in := instance{name: "solo", hosts: threeHosts, interval: 300 * time.Millisecond}
	cfg := in.load(t, t.TempDir(), h.port)
	r := start(t, cfg)

	all := []string{"127.0.0.31", "127.0.0.32", "127.0.0.33"}
	waitFor(t, 10*time.Second, "all hosts up and in DNS", func() bool { return allUp(r.Runner, "a", "b", "c")() && slices.Equal(answer(t, r.Runner), all) })

	srv := query(t, r.Runner, "_"+strconv.Itoa(int(h.port))+"._tcp.web.lb.example.test.", dns.TypeSRV)
	if len(srv) != 1 || srv[0].(*dns.SRV).Target != "web.lb.example.test." || srv[0].(*dns.SRV).Port != h.port {
		t.Errorf("SRV answer %v", srv)
	}
	serial := query(t, r.Runner, "lb.example.test.", dns.TypeSOA)[0].(*dns.SOA).Serial

	h.stop("127.0.0.32")
	took := waitFor(t, 10*time.Second, "b gone from DNS", func() bool {
		return slices.Equal(answer(t, r.Runner), []string{"127.0.0.31", "127.0.0.33"})
	})
	jitter := 1 + prober.DefaultJitter
	limit := time.Duration(float64(cfg.Interval)*jitter) + time.Duration(float64(cfg.Fall-1)*float64(min(prober.DefaultFastInterval, cfg.Interval))*jitter) + 750*time.Millisecond
	t.Logf("host down left DNS after %s (interval %s, fall %d, limit %s)", took.Round(time.Millisecond), cfg.Interval, cfg.Fall, limit)
	if took > limit {
		t.Errorf("host down left DNS after %s, more than the detection time %s", took, limit)
	}
	if now := query(t, r.Runner, "lb.example.test.", dns.TypeSOA)[0].(*dns.SOA).Serial; now <= serial {
		t.Errorf("SOA serial %d after the change, was %d", now, serial)
	}
	if tg := target(r.Runner, "b"); tg.State != "Down" || tg.Vantages[0].Outcome != "L4CON" {
		t.Errorf("dashboard shows b as %+v", tg)
	}
	st := r.State()
	if st.Role != "standalone" || st.Instance != "solo" || !slices.Equal(st.Vantages, []string{"solo"}) {
		t.Errorf("state = %+v", st)
	}
	if len(st.Transitions) == 0 || st.Transitions[0].Node != "b" || st.Transitions[0].To != "Down" {
		t.Errorf("newest transition = %+v", st.Transitions)
	}
	if got := st.Services[0].PublishedNodes; !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("published hosts %v, want [a c]", got)
	}
	// The dashboard's history logs the failover, timed from b's first
	// failed probe to its address leaving the answer.
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, dashboard.PathHistory, nil))
	var hist dashboard.History
	if err := json.Unmarshal(rec.Body.Bytes(), &hist); err != nil {
		t.Fatalf("GET %s: %v: %s", dashboard.PathHistory, err, rec.Body)
	}
	if len(hist.Services) != 1 || len(hist.Services[0].Failovers) != 1 {
		t.Fatalf("history %s, want one failover", rec.Body)
	}
	if fo := hist.Services[0].Failovers[0]; !slices.Equal(fo.Nodes, []string{"b"}) || !slices.Equal(fo.Addresses, []string{"127.0.0.32"}) ||
		fo.DurationSeconds <= 0 || fo.DurationSeconds > took.Seconds()+0.1 {
		t.Errorf("failover %+v, want b's 127.0.0.32 after at most the %s it took to leave DNS", fo, took)
	}

	if err := h.start("127.0.0.32"); err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, 10*time.Second, "b back in DNS", func() bool { return slices.Equal(answer(t, r.Runner), all) })
	t.Logf("host back in DNS after %s", took.Round(time.Millisecond))
}

// TestAllDown checks both all-down policies: publish-all keeps every
// address (fail-open), publish-none empties the answer.
func TestAllDown(t *testing.T) {
	for _, policy := range []string{"publish-all", "publish-none"} {
		t.Run(policy, func(t *testing.T) {
			h := startHosts(t, "127.0.0.34", "127.0.0.35")
			in := instance{name: "solo", hosts: []string{"a=127.0.0.34", "b=127.0.0.35"}, extra: "all-down: " + policy + "\n"}
			r := start(t, in.load(t, t.TempDir(), h.port))
			waitFor(t, 10*time.Second, "both up", allUp(r.Runner, "a", "b"))
			h.stop("127.0.0.34")
			h.stop("127.0.0.35")
			waitFor(t, 10*time.Second, "both down", func() bool { return verdict(r.Runner, "a") == "Down" && verdict(r.Runner, "b") == "Down" })
			want := []string{"127.0.0.34", "127.0.0.35"}
			if policy == "publish-none" {
				want = []string{}
			}
			waitFor(t, 5*time.Second, "answer "+strings.Join(want, " "), func() bool { return slices.Equal(answer(t, r.Runner), want) })
			svc := r.State().Services[0]
			if svc.Healthy || svc.AllDown != policy {
				t.Errorf("service = %+v", svc)
			}
		})
	}
}

// TestReloadKeepsState reloads a configuration that adds a host: the
// verdicts and since-times of the targets that remain do not change.
func TestReloadKeepsState(t *testing.T) {
	h := startHosts(t, "127.0.0.36", "127.0.0.37", "127.0.0.38")
	dir := t.TempDir()
	in := instance{name: "solo", hosts: []string{"a=127.0.0.36", "b=127.0.0.37"}}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "a and b up", allUp(r.Runner, "a", "b"))
	h.stop("127.0.0.37")
	waitFor(t, 10*time.Second, "b down", func() bool { return verdict(r.Runner, "b") == "Down" })
	before := map[string]time.Time{"a": target(r.Runner, "a").Since, "b": target(r.Runner, "b").Since}

	in.hosts = append(in.hosts, "c=127.0.0.38")
	if err := r.Reload(t.Context(), in.load(t, dir, h.port)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "c up after the reload", allUp(r.Runner, "c"))
	for host, want := range map[string]string{"a": "Up", "b": "Down"} {
		tg := target(r.Runner, host)
		if tg.State != want || !tg.Since.Equal(before[host]) {
			t.Errorf("after reload %s is %s since %v, want %s since %v", host, tg.State, tg.Since, want, before[host])
		}
	}
	for _, tr := range r.State().Transitions {
		if tr.Node != "c" && tr.Time.After(before["b"]) {
			t.Errorf("transition after the reload: %+v", tr)
		}
	}
	if got := answer(t, r.Runner); !slices.Equal(got, []string{"127.0.0.36", "127.0.0.38"}) {
		t.Errorf("answer %v", got)
	}

	// Removing a host forgets it.
	in.hosts = in.hosts[:1]
	if err := r.Reload(t.Context(), in.load(t, dir, h.port)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b and c gone", func() bool { return slices.Equal(answer(t, r.Runner), []string{"127.0.0.36"}) })
	if tg := target(r.Runner, "b"); tg.Node != "" {
		t.Errorf("b still shown: %+v", tg)
	}
}

// TestRestartKeepsState stops an instance with a state file and starts a
// new one with a probe interval too long to conclude soon: its first DNS
// answer already leaves out the host that was down, and keeps the
// since-times.
func TestRestartKeepsState(t *testing.T) {
	h := startHosts(t, "127.0.0.39", "127.0.0.40")
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	in := instance{name: "solo", hosts: []string{"a=127.0.0.39", "b=127.0.0.40"}, extra: "state-file: state.json\n"}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "a and b up", allUp(r.Runner, "a", "b"))
	h.stop("127.0.0.40")
	waitFor(t, 10*time.Second, "b down", func() bool { return verdict(r.Runner, "b") == "Down" })
	since := target(r.Runner, "b").Since
	r.stop()

	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"web:TCP/`+strconv.Itoa(int(h.port))+`@b"`) || strings.Contains(string(b), testToken) {
		t.Errorf("state file:\n%s", b)
	}

	in.interval = time.Hour
	r2 := start(t, in.load(t, dir, h.port))
	var first []string
	waitFor(t, 5*time.Second, "a first answer", func() bool { first = answer(t, r2.Runner); return first != nil })
	if !slices.Equal(first, []string{"127.0.0.39"}) {
		t.Errorf("first answer after restart = %v, want only a", first)
	}
	if tg := target(r2.Runner, "b"); tg.State != "Down" || !tg.Since.Equal(since) {
		t.Errorf("after restart b = %s since %v, want Down since %v", tg.State, tg.Since, since)
	}

	// A corrupt state file is reported and ignored, not fatal.
	r2.stop()
	if err := os.WriteFile(state, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	r3 := start(t, in.load(t, dir, h.port))
	if v := verdict(r3.Runner, "b"); v != "" && v != "Unknown" {
		t.Errorf("with a corrupt state file b = %q", v)
	}
}

func TestReportAuth(t *testing.T) {
	h := startHosts(t, "127.0.0.41")
	in := instance{name: "solo", hosts: []string{"a=127.0.0.41"}}
	r := start(t, in.load(t, t.TempDir(), h.port))
	waitFor(t, 10*time.Second, "a up", allUp(r.Runner, "a"))
	url := "http://" + r.HTTPAddr() + ReportPath
	tests := []struct {
		name   string
		header string
		code   int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer " + strings.ToUpper(testToken), http.StatusUnauthorized},
		{"token prefix", "Bearer " + testToken[:10], http.StatusUnauthorized},
		{"not bearer", "Basic " + testToken, http.StatusUnauthorized},
		{"right token", "Bearer " + testToken, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.code {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tt.code, body)
			}
			if strings.Contains(string(body), testToken) {
				t.Error("the response shows the token")
			}
			if tt.code != http.StatusOK {
				return
			}
			var rep v1alpha1.ProbeReport
			if err := json.Unmarshal(body, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Name != "solo" || len(rep.Status.Results) != 1 || rep.Status.Results[0].State != v1alpha1.StateUp || rep.Status.Results[0].Node != "a" {
				t.Errorf("report = %s", body)
			}
		})
	}
	for path, want := range map[string]string{"/metrics": "pulselb_prober_probes_total", "/healthz": "ok", "/api/v1/state": `"role":"standalone"`} {
		resp, err := http.Get("http://" + r.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: HTTP %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

// startPeers starts one instance per entry of ins, then reloads each with
// the others as peers (their HTTP ports are known only once they listen).
func startPeers(t *testing.T, dir string, port uint16, ins []instance) []*running {
	t.Helper()
	var rs []*running
	for i := range ins {
		d := filepath.Join(dir, ins[i].name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, start(t, ins[i].load(t, d, port)))
	}
	for i := range ins {
		ins[i].peers = nil
		for j := range ins {
			if j != i {
				ins[i].peers = append(ins[i].peers, Peer{Name: ins[j].name, URL: "http://" + rs[j].HTTPAddr()})
			}
		}
		if err := rs[i].Reload(t.Context(), ins[i].load(t, filepath.Join(dir, ins[i].name), port)); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// TestPeersQuorum runs three instances. Instance p3 is partitioned from
// host a: it probes a at a probe-address where nothing listens, which from
// its side looks exactly like a network partition (the probe fails with
// the host itself healthy). Its lone Down vote must not fail a, while a
// real failure of b, seen by all three, must.
func TestPeersQuorum(t *testing.T) {
	h := startHosts(t, "127.0.0.42", "127.0.0.43")
	hostList := []string{"a=127.0.0.42", "b=127.0.0.43"}
	ins := []instance{
		{name: "p1", hosts: hostList},
		{name: "p2", hosts: hostList},
		{name: "p3", hosts: hostList, override: map[string]string{"a": "127.0.0.49"}},
	}
	rs := startPeers(t, t.TempDir(), h.port, ins)
	both := []string{"127.0.0.42", "127.0.0.43"}
	for _, r := range rs {
		waitFor(t, 10*time.Second, r.config().Instance+": a and b up and in DNS", func() bool {
			return allUp(r.Runner, "a", "b")() && slices.Equal(answer(t, r.Runner), both)
		})
	}
	// p3 itself sees a down; the quorum does not.
	waitFor(t, 10*time.Second, "p3's own vote on a is Down", func() bool {
		vs := target(rs[2].Runner, "a").Vantages
		return len(vs) == 3 && vs[2].Vantage == "p3" && vs[2].State == "Down" && vs[0].State == "Up" && vs[1].State == "Up"
	})
	for _, r := range rs {
		if v := verdict(r.Runner, "a"); v != "Up" {
			t.Errorf("%s: a is %s; a partitioned peer failed it", r.config().Instance, v)
		}
		if st := r.State(); !slices.Equal(st.Vantages, []string{"p1", "p2", "p3"}) {
			t.Errorf("%s: vantages %v", r.config().Instance, st.Vantages)
		}
	}

	h.stop("127.0.0.43")
	stopped := time.Now()
	for _, r := range rs {
		waitFor(t, 10*time.Second, r.config().Instance+": b down by quorum", func() bool {
			return verdict(r.Runner, "b") == "Down" && slices.Equal(answer(t, r.Runner), []string{"127.0.0.42"})
		})
		t.Logf("%s: b left DNS by quorum of 3 within %s of stopping", r.config().Instance, time.Since(stopped).Round(time.Millisecond))
	}

	// A peer that stops counts as stale after three missed polls: p1 and
	// p2 keep judging, and b returning is seen by both (a majority of the
	// fresh ones).
	rs[2].stop()
	if err := h.start("127.0.0.43"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs[:2] {
		waitFor(t, 10*time.Second, r.config().Instance+": b up again without p3", func() bool { return verdict(r.Runner, "b") == "Up" })
	}
	waitFor(t, 10*time.Second, "p3 stale on p1's dashboard", func() bool {
		vs := target(rs[0].Runner, "b").Vantages
		return len(vs) == 3 && vs[2].Stale
	})
}

// TestTwoPeers runs two instances: both must see a failure (with peers a
// single vantage never fails a host), and when one of them is partitioned
// from a host later (a reload gives it an unreachable probe-address), the
// tie keeps the verdict Up.
func TestTwoPeers(t *testing.T) {
	h := startHosts(t, "127.0.0.44", "127.0.0.45")
	hostList := []string{"a=127.0.0.44", "b=127.0.0.45"}
	dir := t.TempDir()
	ins := []instance{{name: "p1", hosts: hostList}, {name: "p2", hosts: hostList}}
	rs := startPeers(t, dir, h.port, ins)
	for _, r := range rs {
		waitFor(t, 10*time.Second, "a and b up", allUp(r.Runner, "a", "b"))
	}
	ins[1].override = map[string]string{"a": "127.0.0.49"}
	if err := rs[1].Reload(t.Context(), ins[1].load(t, filepath.Join(dir, "p2"), h.port)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "p2's own vote on a is Down", func() bool {
		vs := target(rs[0].Runner, "a").Vantages
		return len(vs) == 2 && vs[1].State == "Down" && !vs[1].Stale
	})
	for _, r := range rs {
		if v := verdict(r.Runner, "a"); v != "Up" {
			t.Errorf("%s: a is %s after one of two peers lost it", r.config().Instance, v)
		}
		if got := answer(t, r.Runner); !slices.Equal(got, []string{"127.0.0.44", "127.0.0.45"}) {
			t.Errorf("%s: answer %v", r.config().Instance, got)
		}
	}
	h.stop("127.0.0.45")
	for _, r := range rs {
		waitFor(t, 10*time.Second, "b down by both", func() bool {
			return verdict(r.Runner, "b") == "Down" && slices.Equal(answer(t, r.Runner), []string{"127.0.0.44"})
		})
	}
}

// TestWrongPeerToken: a peer with another token is refused, so its report
// never counts and the instance cannot reach a quorum to fail a host.
func TestWrongPeerToken(t *testing.T) {
	h := startHosts(t, "127.0.0.46")
	dir := t.TempDir()
	ins := []instance{{name: "p1", hosts: []string{"a=127.0.0.46"}}, {name: "p2", hosts: []string{"a=127.0.0.46"}}}
	rs := startPeers(t, dir, h.port, ins)
	// p2 now holds another token: p1 refuses it and p2 refuses p1.
	d2 := filepath.Join(dir, "p2")
	if err := os.WriteFile(filepath.Join(d2, "token"), []byte("another-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(filepath.Join(d2, "p2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rs[1].Reload(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "p1 counts refused polls", func() bool {
		return counter(t, rs[0].Runner, "pulselb_standalone_peer_polls_total", "unauthorized") > 0 &&
			counter(t, rs[0].Runner, "pulselb_standalone_report_requests_total", "unauthorized") > 0
	})
	waitFor(t, 10*time.Second, "p2 stale for p1", func() bool {
		vs := target(rs[0].Runner, "a").Vantages
		return len(vs) == 2 && vs[1].Stale
	})
	waitFor(t, 10*time.Second, "a up on p1's own vote", allUp(rs[0].Runner, "a"))
	h.stop("127.0.0.46")
	waitFor(t, 10*time.Second, "p1's own vote Down", func() bool { return target(rs[0].Runner, "a").Vantages[0].State == "Down" })
	if v := verdict(rs[0].Runner, "a"); v != "Up" {
		t.Errorf("a is %s: p1 failed it alone although it has a peer", v)
	}
}

func counter(t *testing.T, r *Runner, name, result string) float64 {
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
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestPublishWhen stops one of host b's two ports: with all-ports b leaves
// the answer, with any-port it stays.
func TestPublishWhen(t *testing.T) {
	for _, tt := range []struct {
		policy string
		want   []string
	}{
		{contract.PublishAllPorts, []string{"127.0.0.47"}},
		{contract.PublishAnyPort, []string{"127.0.0.47", "127.0.0.48"}},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			p1 := startHosts(t, "127.0.0.47", "127.0.0.48")
			p2 := startHosts(t, "127.0.0.47", "127.0.0.48")
			in := instance{name: "solo", hosts: []string{"a=127.0.0.47", "b=127.0.0.48"}, extra: "publish-when: " + tt.policy + "\n"}
			dir := t.TempDir()
			in.load(t, dir, p1.port)
			file := filepath.Join(dir, "solo.yaml")
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			text = append(text, []byte("      - {port: "+strconv.Itoa(int(p2.port))+", protocol: TCP, probe: tcp}\n")...)
			if err := os.WriteFile(file, text, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(file)
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, cfg)
			waitFor(t, 10*time.Second, "all four targets up", func() bool {
				n := 0
				for _, tg := range allTargets(r.Runner) {
					if tg.State == "Up" {
						n++
					}
				}
				return n == 4
			})
			p2.stop("127.0.0.48")
			waitFor(t, 10*time.Second, "b's second port down", func() bool {
				for _, tg := range allTargets(r.Runner) {
					if tg.Node == "b" && int(tg.Port) == int(p2.port) {
						return tg.State == "Down"
					}
				}
				return false
			})
			waitFor(t, 5*time.Second, "answer "+strings.Join(tt.want, " "), func() bool { return slices.Equal(answer(t, r.Runner), tt.want) })
		})
	}
}

func allTargets(r *Runner) []dashboard.Target {
	var out []dashboard.Target
	for _, svc := range r.State().Services {
		out = append(out, svc.Targets...)
	}
	return out
}

// TestStaleStateTempsRemoved: temporary files that a kill -9 left behind
// in the middle of a state write are removed at start; files that only
// look alike are left alone.
func TestStaleStateTempsRemoved(t *testing.T) {
	h := startHosts(t, "127.0.0.50")
	dir := t.TempDir()
	stale := []string{".state.json.tmp-123456", ".state.json.tmp-4294967295"}
	kept := []string{"state.json.tmp-1", ".state.json.tmp-", ".state.json.tmp-12x", ".other.json.tmp-1", ".state.json.tmp-1.keep"}
	for _, name := range append(slices.Clone(stale), kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	in := instance{name: "solo", hosts: []string{"a=127.0.0.50"}, extra: "state-file: state.json\n"}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "a up", allUp(r.Runner, "a"))
	r.stop()
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there (%v)", name, err)
		}
	}
	for _, name := range append(kept, "state.json") {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestHTTPListenLogged: the start-up log says where the dashboard, state
// API and metrics listen, and warns when that is not a loopback address,
// since they have no authentication.
func TestHTTPListenLogged(t *testing.T) {
	tests := []struct {
		addr string
		warn bool
	}{
		{"127.0.0.1:9471", false},
		{"[::1]:9471", false},
		{"0.0.0.0:9471", true},
		{"[::]:9471", true},
		{"192.0.2.1:9471", true},
		{"[2001:db8::1]:9471", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			logHTTPListen(logger, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tt.addr)))
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(logs, "Serving the dashboard, state API and metrics") || !strings.Contains(logs, tt.addr) {
				t.Errorf("log does not say where HTTP listens:\n%s", logs)
			}
			if warned := strings.Contains(logs, "without authentication"); warned != tt.warn {
				t.Errorf("warned %v, want %v:\n%s", warned, tt.warn, logs)
			}
		})
	}
}

// TestTwoInstancesWarned: with exactly one peer (two instances) a Down
// verdict needs both, so one dead instance stops every failover; start-up
// and every reload into that shape say so, other shapes do not.
func TestTwoInstancesWarned(t *testing.T) {
	const warning = "Warning: with exactly two instances"
	h := startHosts(t, "127.0.0.51")
	dir := t.TempDir()
	// Nothing listens there; each peer has its own port, since one URL
	// twice is an error.
	peer := func(name string) Peer { return Peer{Name: name, URL: "http://127.0.0.1:" + strconv.Itoa(int(name[1]))} }
	in := instance{name: "p1", hosts: []string{"a=127.0.0.51"}, peers: []Peer{peer("p2")}}
	r, ctx, logs := startLogged(t, in.load(t, dir, h.port))
	if n := strings.Count(logs(), warning); n != 1 {
		t.Errorf("start-up with one peer logged the warning %d times, want once:\n%s", n, logs())
	}
	for _, tt := range []struct {
		peers []Peer
		warn  bool
	}{
		{[]Peer{peer("p2"), peer("p3")}, false},
		{nil, false},
		{[]Peer{peer("p3")}, true},
	} {
		in.peers = tt.peers
		before := strings.Count(logs(), warning)
		if err := r.Reload(ctx, in.load(t, dir, h.port)); err != nil {
			t.Fatal(err)
		}
		if warned := strings.Count(logs(), warning) > before; warned != tt.warn {
			t.Errorf("reload to %d peers: warned %v, want %v", len(tt.peers), warned, tt.warn)
		}
	}
}

// startLogged is start with the logs kept: ctx carries the logger, and
// logs returns what it logged so far.
func startLogged(t *testing.T, cfg *Config) (r *running, ctx context.Context, logs func() string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx = klog.NewContext(t.Context(), logger)
	return startCtx(t, ctx, cfg), ctx, func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
}

// TestReloadChangedAddress reloads a configuration that gives host a,
// Up by verdict, another address. With a probe interval of an hour, the
// new address must not be published on the old address's verdict: it is
// probed at once, stays out while it is down, and is published as soon
// as it is probed Up.
func TestReloadChangedAddress(t *testing.T) {
	h := startHosts(t, "127.0.0.52", "127.0.0.53", "127.0.0.55")
	dir := t.TempDir()
	// Both hosts Up from a previous run; the hour-long interval makes
	// every probe after a reload's immediate one come too late to matter.
	var port Port
	port.Port, port.Protocol = h.port, "TCP"
	now := time.Now()
	if err := saveState(filepath.Join(dir, "state.json"), "solo", now, map[string]savedVerdict{
		Key("web", port, "a"): {status.VerdictUp, now, netip.MustParseAddrPort("127.0.0.52:" + strconv.Itoa(int(h.port))), []netip.Addr{netip.MustParseAddr("127.0.0.52")}},
		Key("web", port, "b"): {status.VerdictUp, now, netip.MustParseAddrPort("127.0.0.53:" + strconv.Itoa(int(h.port))), []netip.Addr{netip.MustParseAddr("127.0.0.53")}},
	}); err != nil {
		t.Fatal(err)
	}
	in := instance{name: "solo", interval: time.Hour, hosts: []string{"a=127.0.0.52", "b=127.0.0.53"}, extra: "state-file: state.json\n"}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 5*time.Second, "both restored hosts in DNS", func() bool {
		return slices.Equal(answer(t, r.Runner), []string{"127.0.0.52", "127.0.0.53"})
	})

	// Nothing listens on 127.0.0.54.
	in.hosts = []string{"a=127.0.0.54", "b=127.0.0.53"}
	if err := r.Reload(t.Context(), in.load(t, dir, h.port)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for verdict(r.Runner, "a") != "Down" {
		if got := answer(t, r.Runner); slices.Contains(got, "127.0.0.54") {
			t.Fatalf("the new, never probed address is published: %v (a is %s)", got, verdict(r.Runner, "a"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("a at its new address not probed within 5s of the reload (interval 1h): %+v", target(r.Runner, "a"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := answer(t, r.Runner); !slices.Equal(got, []string{"127.0.0.53"}) {
		t.Errorf("answer with a down at its new address: %v", got)
	}

	in.hosts = []string{"a=127.0.0.55", "b=127.0.0.53"}
	if err := r.Reload(t.Context(), in.load(t, dir, h.port)); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, 5*time.Second, "a published at its new, listening address", func() bool {
		return slices.Equal(answer(t, r.Runner), []string{"127.0.0.53", "127.0.0.55"})
	})
	t.Logf("a's new address published %s after the reload (interval 1h)", took.Round(time.Millisecond))
	if tg := target(r.Runner, "a"); tg.State != "Up" || tg.Address != "127.0.0.55" {
		t.Errorf("a = %s at %s, want Up at 127.0.0.55", tg.State, tg.Address)
	}
}

// TestAllDownAtStartStaysFailedOpen starts with 70 hosts that are all
// down (a closed port) and no state file. The service fails open at once
// (every host is Unknown) and must stay failed open while the hosts are
// probed Down one after another: the answer never narrows onto the hosts
// not probed yet and then jumps back to all 70.
func TestAllDownAtStartStaysFailedOpen(t *testing.T) {
	const n = 70
	ln, err := net.Listen("tcp", "127.0.1.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	in := instance{name: "solo", interval: 500 * time.Millisecond}
	for i := 1; i <= n; i++ {
		in.hosts = append(in.hosts, "h"+strconv.Itoa(i)+"=127.0.1."+strconv.Itoa(i))
	}
	r := start(t, in.load(t, t.TempDir(), port))
	var sizes []int
	waitFor(t, 20*time.Second, "every host probed Down", func() bool {
		st := r.State()
		if len(st.Services) == 0 {
			return false
		}
		if size := len(st.Services[0].Published); len(sizes) == 0 || sizes[len(sizes)-1] != size {
			sizes = append(sizes, size)
		}
		for _, tg := range st.Services[0].Targets {
			if tg.State != "Down" {
				return false
			}
		}
		return true
	})
	if !slices.Equal(sizes, []int{n}) {
		t.Errorf("published address counts while the hosts were probed down: %v, want only %d (failed open throughout)", sizes, n)
	}
}

// TestSpecialStateFilesAtStart: a state file or serial file that turned
// into a named pipe or /dev/zero after the check never hangs the start
// nor fills memory. A state file is then ignored, as any unreadable one;
// a serial file stops the start with an error naming it.
func TestSpecialStateFilesAtStart(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	within := func(what string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not return within 5s", what)
			return nil
		}
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		err := within("loading state from "+path, func() error { _, err := loadState(path); return err })
		if err == nil || !strings.Contains(err.Error(), path+" is not a regular file") {
			t.Errorf("loadState(%s) = %v; want an error naming it", path, err)
		}
	}
	in := instance{name: "solo", hosts: []string{"a=127.0.0.1"}}
	cfg := in.load(t, dir, 1)
	cfg.DNS.SerialFile = fifo
	err := within("New with a serial file that is a pipe", func() error {
		r, err := New(t.Context(), cfg, Options{})
		if err == nil {
			r.httpLn.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "dns.serial-file: "+fifo+" is not a regular file but a named pipe") {
		t.Errorf("New = %v; want an error naming the serial file", err)
	}
}

// TestReloadRefusesNewZone: a reload that changes zone is refused with an
// error that says so, and the running zone keeps being served; before,
// the new file's hostnames were checked against the new zone, which was
// never applied, and silently not served.
func TestReloadRefusesNewZone(t *testing.T) {
	h := startHosts(t, "127.0.0.56")
	dir := t.TempDir()
	in := instance{name: "solo", hosts: []string{"a=127.0.0.56"}}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "a in DNS", func() bool { return slices.Equal(answer(t, r.Runner), []string{"127.0.0.56"}) })

	text := strings.Replace(in.yaml(h.port), "zone: lb.example.test.", "zone: other.example.test.", 1)
	text = strings.Replace(text, "  - name: web\n", "  - name: web\n    hostnames: [www.other.example.test]\n", 1)
	file := filepath.Join(dir, "new-zone.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.ReloadFile(t.Context(), file)
	if err == nil || !strings.Contains(err.Error(), "zone: changed from lb.example.test. to other.example.test., which takes a restart; the reload is refused") {
		t.Fatalf("ReloadFile = %v; want the new zone refused", err)
	}
	if n := counter(t, r.Runner, "pulselb_standalone_reloads_total", "error"); n != 1 {
		t.Errorf("reloads_total{result=error} = %v, want 1", n)
	}
	if got := answer(t, r.Runner); !slices.Equal(got, []string{"127.0.0.56"}) {
		t.Errorf("after the refused reload web.lb.example.test. = %v", got)
	}
	if got := r.State().Services[0].DNSNames; !slices.Equal(got, []string{"web.lb.example.test."}) {
		t.Errorf("names served after the refused reload %v, want the running zone's only", got)
	}
}

// TestStateSaveFailureLoggedOnce: while the state file cannot be written
// (here its directory became a file; on a full disk likewise) every
// evaluation retries, but "Saving verdicts failed" is logged once, each
// failed write is counted, and the recovery is logged.
func TestStateSaveFailureLoggedOnce(t *testing.T) {
	h := startHosts(t, "127.0.0.57")
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	in := instance{name: "solo", hosts: []string{"a=127.0.0.57"}, interval: 100 * time.Millisecond, extra: "state-file: state/state.json\n"}
	r, _, logs := startLogged(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "a up and saved", func() bool {
		return allUp(r.Runner, "a")() && counter(t, r.Runner, "pulselb_standalone_state_saves_total", "ok") >= 1
	})
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stateDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.stop("127.0.0.57")
	waitFor(t, 10*time.Second, "ten failed saves", func() bool { return counter(t, r.Runner, "pulselb_standalone_state_saves_total", "error") >= 10 })
	if n := strings.Count(logs(), "Saving verdicts failed"); n != 1 {
		t.Errorf("%q logged %d times over 10 failed saves, want once", "Saving verdicts failed", n)
	}
	if err := os.Remove(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the recovery logged", func() bool { return strings.Contains(logs(), "Saving verdicts works again") })
	if _, err := os.Stat(filepath.Join(stateDir, "state.json")); err != nil {
		t.Errorf("state file not written after the recovery: %v", err)
	}
}

// TestRestartForgetsMovedHost: host a is Up at one address when the
// instance stops, and the file gives it another one before the restart.
// Its saved verdict was reached at the old address: with a probe interval
// of an hour (no probe concludes during the test), the new, never probed
// address must not be published on it. Host b, unchanged, keeps its
// verdict.
func TestRestartForgetsMovedHost(t *testing.T) {
	h := startHosts(t, "127.0.0.58", "127.0.0.60")
	dir := t.TempDir()
	in := instance{name: "solo", hosts: []string{"a=127.0.0.58", "b=127.0.0.60"}, extra: "state-file: state.json\n"}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "a and b up", allUp(r.Runner, "a", "b"))
	r.stop()

	// Nothing listens on 127.0.0.59.
	in.hosts, in.interval = []string{"a=127.0.0.59", "b=127.0.0.60"}, time.Hour
	r2 := start(t, in.load(t, dir, h.port))
	var got []string
	waitFor(t, 5*time.Second, "a first answer", func() bool { got = answer(t, r2.Runner); return got != nil })
	deadline := time.Now().Add(time.Second)
	for {
		if !slices.Equal(got, []string{"127.0.0.60"}) {
			t.Fatalf("answer after the restart %v, want only b's 127.0.0.60: a's new address was never probed", got)
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
		got = answer(t, r2.Runner)
	}
	if v := verdict(r2.Runner, "a"); v != "Unknown" {
		t.Errorf("a at its new address is %s, want Unknown until probed", v)
	}
	if v := verdict(r2.Runner, "b"); v != "Up" {
		t.Errorf("b, unchanged, is %s after the restart, want its saved Up", v)
	}
}

// TestPlanPublish: what a Service publishes from its verdicts, without a
// Runner: the healthy hosts, every host when none is (publish-all, until
// one is Up again), nothing with publish-none.
func TestPlanPublish(t *testing.T) {
	port := Port{Name: "http", Port: 80, Protocol: "TCP"}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	svc := Service{Name: "web", PublishWhen: contract.PublishAllPorts, AllDown: contract.AllDownPublishAll, Ports: []Port{port},
		Hosts: []Host{{Name: "a", Addresses: []netip.Addr{a}}, {Name: "b", Addresses: []netip.Addr{b}}}}
	verdicts := func(states map[string]status.Verdict) func(string) status.Judgement {
		return func(key string) status.Judgement {
			for host, v := range states {
				if key == Key("web", port, host) {
					return status.Judgement{Verdict: v}
				}
			}
			return status.Judgement{}
		}
	}
	up, down := status.VerdictUp, status.VerdictDown
	prev := map[string][]netip.Addr{"a": {a}, "b": {b}}
	for _, tc := range []struct {
		name        string
		states      map[string]status.Verdict
		allDown     string
		failingOpen bool
		want        []netip.Addr
		healthy     bool
		failOpen    bool
	}{
		{name: "both up", states: map[string]status.Verdict{"a": up, "b": up}, want: []netip.Addr{a, b}, healthy: true},
		{name: "b down", states: map[string]status.Verdict{"a": up, "b": down}, want: []netip.Addr{a}, healthy: true},
		{name: "all down: publish-all", states: map[string]status.Verdict{"a": down, "b": down}, want: []netip.Addr{a, b}, failOpen: true},
		{name: "all down: publish-none", states: map[string]status.Verdict{"a": down, "b": down}, allDown: contract.AllDownPublishNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := svc
			if tc.allDown != "" {
				s.AllDown = tc.allDown
			}
			plan := planPublish(s, verdicts(tc.states), prev, tc.failingOpen)
			if !slices.Equal(plan.ips, tc.want) || plan.healthy != tc.healthy || plan.failOpen != tc.failOpen {
				t.Errorf("published %v healthy %v failing open %v, want %v %v %v", plan.ips, plan.healthy, plan.failOpen, tc.want, tc.healthy, tc.failOpen)
			}
			if wantAllDown := map[bool]string{true: "", false: s.AllDown}[tc.healthy]; plan.allDown != wantAllDown {
				t.Errorf("all-down %q, want %q", plan.allDown, wantAllDown)
			}
		})
	}
}
