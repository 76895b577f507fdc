package dnsexport

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"
)

const testOrigin = "lb.example.test."

var (
	testSecret  = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	otherSecret = base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
)

func testServices() []Service {
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}))
	}
	return []Service{
		{Namespace: "default", Name: "web", IPs: addrs("192.0.2.10", "192.0.2.11", "2001:db8::10"),
			Ports:     []Port{{Name: "http", Port: 80, Protocol: "TCP"}},
			Hostnames: []string{"www.lb.example.test", "shop.example.com"}},
		{Namespace: "default", Name: "big", IPs: many},
		{Namespace: "default", Name: "empty"},
	}
}

// startServer runs a server on a free loopback port, serving services,
// until the test ends.
func startServer(t testing.TB, cfg Config, services []Service) *Server {
	t.Helper()
	if cfg.Zone.Origin == "" {
		cfg.Zone = testZoneConfig
	}
	cfg.Listen = "127.0.0.1:0"
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if services != nil {
		if _, err := srv.Update(services); err != nil {
			t.Fatal(err)
		}
	}
	runServer(t, srv)
	return srv
}

// runServer runs srv until the test ends.
func runServer(t testing.TB, srv *Server) {
	t.Helper()
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if tt, ok := t.(*testing.T); ok {
		// A *testing.F's logger may not be used once fuzzing started.
		_, ctx = ktesting.NewTestContext(tt)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = false
	return m
}

// exchange sends m over network (udp or tcp) and fails the test on error.
func exchange(t testing.TB, network string, addr netip.AddrPort, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr.String())
	if err != nil {
		t.Fatalf("%s query %s: %v", network, m.Question[0].String(), err)
	}
	if r.Id != m.Id {
		t.Fatalf("response id %d, query id %d", r.Id, m.Id)
	}
	return r
}

func answerText(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		out = append(out, rr.String())
	}
	slices.Sort(out)
	return out
}

func TestServerAnswers(t *testing.T) {
	srv := startServer(t, Config{}, testServices())
	serial := srv.Zone().Serial()
	type check struct {
		rcode  int
		answer []string
		// aa: authoritative; ns: SOA in authority (negative answer).
		aa, ns bool
		extra  int
	}
	rd := func(m *dns.Msg) *dns.Msg { m.RecursionDesired = true; return m }
	edns := func(v uint8) func(*dns.Msg) *dns.Msg {
		return func(m *dns.Msg) *dns.Msg {
			m.SetEdns0(1232, false)
			m.IsEdns0().SetVersion(v)
			return m
		}
	}
	tests := []struct {
		name string
		q    *dns.Msg
		want check
	}{
		{"A", query("web.default.lb.example.test.", dns.TypeA), check{aa: true, answer: []string{
			"web.default.lb.example.test.\t5\tIN\tA\t192.0.2.10", "web.default.lb.example.test.\t5\tIN\tA\t192.0.2.11"}}},
		{"AAAA", query("web.default.lb.example.test.", dns.TypeAAAA), check{aa: true, answer: []string{
			"web.default.lb.example.test.\t5\tIN\tAAAA\t2001:db8::10"}}},
		{"SRV with addresses in additional", query("_http._tcp.web.default.lb.example.test.", dns.TypeSRV), check{aa: true, extra: 3, answer: []string{
			"_http._tcp.web.default.lb.example.test.\t5\tIN\tSRV\t0 100 80 web.default.lb.example.test."}}},
		{"SOA", query(testOrigin, dns.TypeSOA), check{aa: true, answer: []string{
			fmt.Sprintf("lb.example.test.\t60\tIN\tSOA\tns1.lb.example.test. hostmaster.lb.example.test. %d 60 10 86400 5", serial)}}},
		{"NS with glue", query(testOrigin, dns.TypeNS), check{aa: true, extra: 1, answer: []string{
			"lb.example.test.\t60\tIN\tNS\tns1.lb.example.test.", "lb.example.test.\t60\tIN\tNS\tns2.example.net."}}},
		{"hostname annotation", query("www.lb.example.test.", dns.TypeA), check{aa: true, answer: []string{
			"www.lb.example.test.\t5\tIN\tA\t192.0.2.10", "www.lb.example.test.\t5\tIN\tA\t192.0.2.11"}}},
		{"case is echoed", query("WWW.Lb.Example.TEST.", dns.TypeA), check{aa: true, answer: []string{
			"WWW.Lb.Example.TEST.\t5\tIN\tA\t192.0.2.10", "WWW.Lb.Example.TEST.\t5\tIN\tA\t192.0.2.11"}}},
		{"NXDOMAIN", query("nope.default.lb.example.test.", dns.TypeA), check{aa: true, ns: true, rcode: dns.RcodeNameError}},
		{"NODATA for a missing type", query("web.default.lb.example.test.", dns.TypeTXT), check{aa: true, ns: true}},
		{"NODATA for an empty non-terminal", query("default.lb.example.test.", dns.TypeA), check{aa: true, ns: true}},
		{"NODATA for a service without IPs", query("empty.default.lb.example.test.", dns.TypeA), check{aa: true, ns: true}},
		{"ANY gets a minimal answer", query("web.default.lb.example.test.", dns.TypeANY), check{aa: true, answer: []string{
			"web.default.lb.example.test.\t5\tIN\tHINFO\t\"RFC8482\" \"\""}}},
		{"REFUSED outside the zone", query("example.com.", dns.TypeA), check{rcode: dns.RcodeRefused}},
		{"REFUSED for a hostname outside the zone", query("shop.example.com.", dns.TypeA), check{rcode: dns.RcodeRefused}},
		{"REFUSED for the parent zone", query("example.test.", dns.TypeSOA), check{rcode: dns.RcodeRefused}},
		{"RD set: still no recursion", rd(query("www.example.org.", dns.TypeA)), check{rcode: dns.RcodeRefused}},
		{"RD set inside the zone", rd(query("web.default.lb.example.test.", dns.TypeAAAA)), check{aa: true, answer: []string{
			"web.default.lb.example.test.\t5\tIN\tAAAA\t2001:db8::10"}}},
		{"CHAOS class refused", func() *dns.Msg {
			m := query("version.bind.", dns.TypeTXT)
			m.Question[0].Qclass = dns.ClassCHAOS
			return m
		}(),
			check{rcode: dns.RcodeRefused}},
		{"EDNS0 version 1 gets BADVERS", edns(1)(query("web.default.lb.example.test.", dns.TypeA)), check{rcode: dns.RcodeBadVers, extra: 1}},
		{"EDNS0 answer carries OPT", edns(0)(query("web.default.lb.example.test.", dns.TypeAAAA)), check{aa: true, extra: 1, answer: []string{
			"web.default.lb.example.test.\t5\tIN\tAAAA\t2001:db8::10"}}},
		{"AXFR over UDP refused", query(testOrigin, dns.TypeAXFR), check{rcode: dns.RcodeRefused}},
		{"unsigned IXFR refused", func() *dns.Msg { m := new(dns.Msg); m.SetIxfr(testOrigin, 1, "a.", "b."); return m }(), check{rcode: dns.RcodeRefused}},
		{"NOTIFY refused", func() *dns.Msg { m := new(dns.Msg); m.SetNotify(testOrigin); return m }(), check{rcode: dns.RcodeRefused}},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			t.Run(network+"/"+tc.name, func(t *testing.T) {
				r := exchange(t, network, srv.Addr(), tc.q.Copy())
				if r.Rcode != tc.want.rcode {
					t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.want.rcode])
				}
				if r.RecursionAvailable {
					t.Error("RA set: the server must never offer recursion")
				}
				if r.RecursionDesired != tc.q.RecursionDesired {
					t.Error("RD not copied from the query")
				}
				if r.Authoritative != tc.want.aa {
					t.Errorf("AA = %v, want %v", r.Authoritative, tc.want.aa)
				}
				if got := answerText(r); !slices.Equal(got, tc.want.answer) {
					t.Errorf("answer =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want.answer, "\n"))
				}
				hasSOA := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA && r.Ns[0].Header().Ttl == 5
				if hasSOA != tc.want.ns {
					t.Errorf("authority = %v, want SOA with the negative TTL: %v", r.Ns, tc.want.ns)
				}
				if len(r.Extra) != tc.want.extra {
					t.Errorf("additional has %d records, want %d: %v", len(r.Extra), tc.want.extra, r.Extra)
				}
			})
		}
	}
}

func TestServerFailsBeforeFirstUpdate(t *testing.T) {
	srv := startServer(t, Config{}, nil)
	if r := exchange(t, "udp", srv.Addr(), query("web.default.lb.example.test.", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("before the first Update: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if r := exchange(t, "udp", srv.Addr(), query("example.com.", dns.TypeA)); r.Rcode != dns.RcodeRefused {
		t.Errorf("outside the zone before the first Update: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if _, err := srv.Update(testServices()); err != nil {
		t.Fatal(err)
	}
	if r := exchange(t, "udp", srv.Addr(), query("web.default.lb.example.test.", dns.TypeA)); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Errorf("after Update: %v", r)
	}
}

func TestServerTruncationThenTCP(t *testing.T) {
	srv := startServer(t, Config{MaxUDPSize: 4096}, testServices())
	const name = "big.default.lb.example.test."

	r := exchange(t, "udp", srv.Addr(), query(name, dns.TypeA))
	if !r.Truncated {
		t.Fatalf("100 A records over UDP without EDNS0: TC not set (%d answers)", len(r.Answer))
	}
	r.Compress = true
	if b, _ := r.Pack(); len(b) > 512 {
		t.Errorf("UDP response without EDNS0 is %d bytes, want <= 512", len(b))
	}
	small := query(name, dns.TypeA)
	small.SetEdns0(1232, false)
	r = exchange(t, "udp", srv.Addr(), small)
	r.Compress = true
	if n := len(must(r.Pack())); !r.Truncated || n > 1232 {
		t.Errorf("EDNS0 1232: TC=%v, %d bytes; want TC and <= 1232 bytes", r.Truncated, n)
	}
	big := query(name, dns.TypeA)
	big.SetEdns0(4096, false)
	if r := exchange(t, "udp", srv.Addr(), big); r.Truncated || len(r.Answer) != 100 {
		t.Errorf("EDNS0 4096: TC=%v with %d answers, want the whole set", r.Truncated, len(r.Answer))
	} else if opt := r.IsEdns0(); opt == nil || opt.UDPSize() != 4096 {
		t.Errorf("response OPT = %v, want our size 4096", opt)
	}
	if r := exchange(t, "tcp", srv.Addr(), query(name, dns.TypeA)); r.Truncated || len(r.Answer) != 100 {
		t.Errorf("TCP: TC=%v with %d answers, want all 100", r.Truncated, len(r.Answer))
	}
}

// transferConfig allows AXFR with key "xfr".
func transferConfig() Config {
	return Config{TransferKeys: []TSIGKey{{Name: "xfr", Secret: testSecret}}}
}

// axfr transfers the zone from addr with the given key (empty: unsigned)
// and returns the records, or the error.
func axfr(t *testing.T, addr netip.AddrPort, qtype uint16, serial uint32, keyName, alg, secret string) ([]dns.RR, error) {
	t.Helper()
	m := new(dns.Msg)
	if qtype == dns.TypeIXFR {
		m.SetIxfr(testOrigin, serial, "ns.", "h.")
	} else {
		m.SetAxfr(testOrigin)
	}
	tr := &dns.Transfer{DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}
	if keyName != "" {
		tr.TsigSecret = map[string]string{keyName: secret}
		m.SetTsig(keyName, alg, 300, time.Now().Unix())
	}
	ch, err := tr.In(m, addr.String())
	if err != nil {
		return nil, err
	}
	var rrs []dns.RR
	for env := range ch {
		if env.Error != nil {
			return rrs, env.Error
		}
		rrs = append(rrs, env.RR...)
	}
	return rrs, nil
}

func TestServerTransfer(t *testing.T) {
	cfg := transferConfig()
	cfg.Metrics = NewMetrics()
	srv := startServer(t, cfg, testServices())
	z := srv.Zone()

	t.Run("AXFR signed with hmac-sha256 is accepted", func(t *testing.T) {
		rrs, err := axfr(t, srv.Addr(), dns.TypeAXFR, 0, "xfr.", dns.HmacSHA256, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rrText(rrs), rrText(z.Records()); !slices.Equal(got, want) {
			t.Errorf("transferred %d records, want %d", len(got), len(want))
		}
		if n := len(rrs); n < 110 || rrs[0].Header().Rrtype != dns.TypeSOA || rrs[n-1].Header().Rrtype != dns.TypeSOA {
			t.Errorf("transfer not framed by the SOA, or short: %d records", n)
		}
	})
	t.Run("IXFR from an old serial gets the whole zone", func(t *testing.T) {
		rrs, err := axfr(t, srv.Addr(), dns.TypeIXFR, z.Serial()-1, "xfr.", dns.HmacSHA256, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		if len(rrs) != len(z.Records()) {
			t.Errorf("IXFR gave %d records, want the %d of the zone", len(rrs), len(z.Records()))
		}
	})
	t.Run("IXFR at the current serial gets the SOA", func(t *testing.T) {
		m := new(dns.Msg)
		m.SetIxfr(testOrigin, z.Serial(), "ns.", "h.")
		m.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
		c := &dns.Client{Net: "tcp", TsigSecret: map[string]string{"xfr.": testSecret}, Timeout: 2 * time.Second}
		r, _, err := c.Exchange(m, srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Answer) != 1 || r.Answer[0].(*dns.SOA).Serial != z.Serial() {
			t.Errorf("answer %v, want the SOA alone", r.Answer)
		}
	})
	refusals := []struct {
		name, key, alg, secret string
		rcode                  int
	}{
		{"unsigned AXFR is refused", "", "", "", dns.RcodeRefused},
		{"AXFR with the wrong secret", "xfr.", dns.HmacSHA256, otherSecret, dns.RcodeNotAuth},
		{"AXFR with an unknown key", "other.", dns.HmacSHA256, testSecret, dns.RcodeNotAuth},
		{"AXFR with hmac-sha1 is refused", "xfr.", dns.HmacSHA1, testSecret, dns.RcodeNotAuth},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetAxfr(testOrigin)
			c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
			if tc.key != "" {
				m.SetTsig(tc.key, tc.alg, 300, time.Now().Unix())
				c.TsigSecret = map[string]string{tc.key: tc.secret}
			}
			r, _, err := c.Exchange(m, srv.Addr().String())
			if r == nil || (err != nil && (tc.rcode != dns.RcodeNotAuth || !errors.Is(err, dns.ErrAuth))) {
				// A NOTAUTH reply carries an unverifiable TSIG
				// error record, which the client reports.
				t.Fatalf("reply %v, error %v", r, err)
			}
			if r.Rcode != tc.rcode || len(r.Answer) != 0 {
				t.Errorf("rcode %s with %d records, want %s and none", dns.RcodeToString[r.Rcode], len(r.Answer), dns.RcodeToString[tc.rcode])
			}
			if _, err := axfr(t, srv.Addr(), dns.TypeAXFR, 0, tc.key, tc.alg, tc.secret); err == nil {
				t.Error("dns.Transfer got the zone")
			}
		})
	}
	t.Run("no keys configured: signed AXFR refused", func(t *testing.T) {
		open := startServer(t, Config{}, testServices())
		if _, err := axfr(t, open.Addr(), dns.TypeAXFR, 0, "xfr.", dns.HmacSHA256, testSecret); err == nil {
			t.Error("transfer allowed without configured keys")
		}
	})
	if got := testutil.ToFloat64(cfg.Metrics.Transfers.WithLabelValues("axfr", "ok")); got != 1 {
		t.Errorf("transfers_total{axfr,ok} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(cfg.Metrics.Transfers.WithLabelValues("axfr", "refused")); got < 1 {
		t.Errorf("transfers_total{axfr,refused} = %v, want >= 1", got)
	}
}

func TestServerSignedQueries(t *testing.T) {
	srv := startServer(t, transferConfig(), testServices())
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			m := query(testOrigin, dns.TypeSOA)
			m.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
			c := &dns.Client{Net: network, TsigSecret: map[string]string{"xfr.": testSecret}, Timeout: 2 * time.Second}
			r, _, err := c.Exchange(m, srv.Addr().String())
			if err != nil {
				t.Fatalf("signed SOA query (response verified): %v", err)
			}
			if r.IsTsig() == nil || len(r.Answer) != 1 {
				t.Errorf("response %v: want a signed SOA", r)
			}
			bad := query(testOrigin, dns.TypeSOA)
			bad.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
			c.TsigSecret = map[string]string{"xfr.": otherSecret}
			// The client cannot verify the NOTAUTH reply (it is
			// unsigned, with TSIG error BADSIG) and says so.
			r, _, err = c.Exchange(bad, srv.Addr().String())
			if r == nil || !errors.Is(err, dns.ErrAuth) {
				t.Fatalf("wrong secret: reply %v, error %v; want the reply and %v", r, err, dns.ErrAuth)
			}
			if r.Rcode != dns.RcodeNotAuth || r.IsTsig() == nil || r.IsTsig().Error != dns.RcodeBadSig {
				t.Errorf("wrong secret: rcode %s, TSIG %v; want NOTAUTH with BADSIG", dns.RcodeToString[r.Rcode], r.IsTsig())
			}
		})
	}
	t.Run("IXFR over UDP gets the SOA", func(t *testing.T) {
		m := new(dns.Msg)
		m.SetIxfr(testOrigin, 1, "ns.", "h.")
		m.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
		c := &dns.Client{Net: "udp", TsigSecret: map[string]string{"xfr.": testSecret}, Timeout: 2 * time.Second}
		r, _, err := c.Exchange(m, srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeSOA {
			t.Errorf("answer %v, want the SOA", r.Answer)
		}
	})
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestServerRateLimit(t *testing.T) {
	clock := newFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	metrics := NewMetrics()
	srv := startServer(t, Config{
		RateLimit: RateLimit{ResponsesPerSecond: 1, Burst: 3, Slip: 2},
		Metrics:   metrics,
		Now:       clock.Now,
	}, testServices())
	q := query("web.default.lb.example.test.", dns.TypeA)

	// The clock stands still: the bucket never refills.
	client := func(t *testing.T, src string) *net.UDPConn {
		t.Helper()
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(src+":0")), net.UDPAddrFromAddrPort(srv.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// ask sends q and returns the response, or nil after wait.
	ask := func(t *testing.T, c *net.UDPConn, wait time.Duration) *dns.Msg {
		t.Helper()
		q.Id = dns.Id()
		b, _ := q.Pack()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		c.SetReadDeadline(time.Now().Add(wait))
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return nil
				}
				t.Fatal(err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil {
				t.Fatal(err)
			}
			if r.Id == q.Id {
				return r
			}
		}
	}
	c := client(t, "127.0.0.1")
	for i := range 3 {
		if r := ask(t, c, 2*time.Second); r == nil || len(r.Answer) != 2 {
			t.Fatalf("query %d within the burst: %v", i+1, r)
		}
	}
	if r := ask(t, c, 300*time.Millisecond); r != nil {
		t.Errorf("4th query over the limit answered: %v", r)
	}
	if r := ask(t, c, 2*time.Second); r == nil || !r.Truncated || len(r.Answer) != 0 {
		t.Errorf("5th query (slip 2): %v, want an empty truncated answer", r)
	}
	// Another /24 has its own budget.
	if r := ask(t, client(t, "127.0.1.1"), 2*time.Second); r == nil || len(r.Answer) != 2 {
		t.Errorf("query from another /24: %v", r)
	}
	// TCP is never limited.
	if r := exchange(t, "tcp", srv.Addr(), query("web.default.lb.example.test.", dns.TypeA)); len(r.Answer) != 2 {
		t.Errorf("TCP while UDP is limited: %v", r)
	}
	// Time refills the bucket.
	clock.Advance(2 * time.Second)
	if r := ask(t, c, 2*time.Second); r == nil || len(r.Answer) != 2 {
		t.Errorf("after 2s: %v", r)
	}
	if got := testutil.ToFloat64(metrics.RateLimited.WithLabelValues("dropped")); got != 1 {
		t.Errorf("rate_limited_total{dropped} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.RateLimited.WithLabelValues("slipped")); got != 1 {
		t.Errorf("rate_limited_total{slipped} = %v, want 1", got)
	}
}

func TestLimiterTableIsBounded(t *testing.T) {
	now := time.Unix(1e9, 0)
	l := newLimiter(RateLimit{ResponsesPerSecond: 1, Burst: 1, Sources: 4})
	for i := range 100 {
		src := netip.AddrFrom4([4]byte{10, byte(i), 0, 1})
		a := l.allow(src, now)
		// Four sources get a bucket each; the others share one.
		if want := i <= 4; (a == rateAllow) != want {
			t.Errorf("first response to source %d allowed: %v, want %v", i, a == rateAllow, want)
		}
	}
	if n := l.size(); n > 4 {
		t.Errorf("table holds %d sources, bound is 4", n)
	}
	// Idle sources are swept once their bucket refilled.
	if a := l.allow(netip.MustParseAddr("10.201.0.1"), now.Add(time.Minute)); a != rateAllow {
		t.Error("idle sources not swept")
	}
	// IPv6 sources are grouped by /56.
	v6 := newLimiter(RateLimit{ResponsesPerSecond: 1, Burst: 1})
	v6.allow(netip.MustParseAddr("2001:db8:0:1::1"), now)
	if a := v6.allow(netip.MustParseAddr("2001:db8:0:2::1"), now); a == rateAllow {
		t.Error("two addresses in one /56 have separate budgets")
	}
	if a := v6.allow(netip.MustParseAddr("2001:db8:0:100::1"), now); a != rateAllow {
		t.Error("another /56 shares a budget")
	}
}

func TestServerUpdate(t *testing.T) {
	clock := newFakeClock(time.Unix(2_000_000_000, 0))
	dir := t.TempDir()
	state := filepath.Join(dir, "serial")
	metrics := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Zone: testZoneConfig, SerialFile: state, Now: clock.Now, Metrics: metrics}
	srv := startServer(t, cfg, testServices())
	s1 := srv.Zone().Serial()
	if s1 != 2_000_000_000 {
		t.Errorf("first serial %d, want the Unix time", s1)
	}
	if _, err := srv.Update(testServices()); err != nil {
		t.Fatal(err)
	}
	if s := srv.Zone().Serial(); s != s1 {
		t.Errorf("unchanged content moved the serial %d -> %d", s1, s)
	}
	changed := testServices()
	changed[0].IPs = addrs("192.0.2.99")
	if _, err := srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	s2 := srv.Zone().Serial()
	if !serialLess(s1, s2) {
		t.Errorf("serial after a change in the same second: %d, want > %d", s2, s1)
	}
	if r := exchange(t, "udp", srv.Addr(), query("web.default.lb.example.test.", dns.TypeA)); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.99" {
		t.Errorf("after Update: %v", r.Answer)
	}
	if got := testutil.ToFloat64(metrics.Serial); got != float64(s2) {
		t.Errorf("serial metric %v, want %d", got, s2)
	}

	// A restart with the clock behind the last serial (changes came
	// faster than one a second) still goes forward, thanks to the state.
	clock.Advance(-time.Hour)
	cfg.Metrics = nil
	restarted, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.Update(testServices()); err != nil {
		t.Fatal(err)
	}
	if s3 := restarted.Zone().Serial(); !serialLess(s2, s3) {
		t.Errorf("serial after restart %d, want > %d", s3, s2)
	}

	// Without a state file the serial is time: a restart later is larger.
	noState := Config{Zone: testZoneConfig, Now: clock.Now}
	a, _ := NewServer(noState)
	a.Update(testServices())
	clock.Advance(time.Second)
	b, _ := NewServer(noState)
	b.Update(testServices())
	if !serialLess(a.Zone().Serial(), b.Zone().Serial()) {
		t.Errorf("time serial after a restart: %d, then %d", a.Zone().Serial(), b.Zone().Serial())
	}
}

func TestSerials(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock(time.Unix(100, 0))
	tests := []struct {
		name    string
		advance time.Duration
		want    uint32
	}{
		{"time", 0, 100},
		{"same second", 0, 101},
		{"still ahead of the clock", time.Second, 102},
		{"clock caught up", 10 * time.Second, 111},
		{"clock went back", -time.Hour, 112},
	}
	s, _, err := newSerials(filepath.Join(dir, "serial"), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock.Advance(tc.advance)
			got, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("serial %d, want %d", got, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "serial")); string(b) != "112\n" {
		t.Errorf("state file holds %q", b)
	}
	if !serialLess(0xffffff00, 5) || serialLess(5, 0xffffff00) {
		t.Error("serialLess does not wrap around as RFC 1982 says")
	}
	os.WriteFile(filepath.Join(dir, "bad"), []byte("x"), 0o600)
	if _, ignored, err := newSerials(filepath.Join(dir, "bad"), clock.Now); err != nil || ignored == nil {
		t.Errorf("corrupt state file: error %v, ignored %v; want it ignored with the reason", err, ignored)
	}
	if _, _, err := newSerials(dir, clock.Now); err == nil {
		t.Error("a serial file that cannot be read (a directory) accepted")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestServerIPv6(t *testing.T) {
	if l, err := net.ListenPacket("udp", "[::1]:0"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but no IPv6 loopback: %v", err)
		}
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		l.Close()
	}
	srv, err := NewServer(Config{Zone: testZoneConfig, Listen: "[::1]:0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Update(testServices()); err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	for _, network := range []string{"udp", "tcp"} {
		if r := exchange(t, network, srv.Addr(), query("web.default.lb.example.test.", dns.TypeAAAA)); len(r.Answer) != 1 {
			t.Errorf("%s over IPv6: %v", network, r)
		}
	}
}
