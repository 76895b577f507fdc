package traffic

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// serveDNS starts an authoritative server on loopback answering every A
// question with addrs and ttl; it counts the queries.
func serveDNS(t *testing.T, ttl uint32, addrs ...string) (string, *atomic.Int32) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int32
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(req)
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A: net.ParseIP(a)})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), &queries
}

func TestResolverCachesForTheTTL(t *testing.T) {
	addr, queries := serveDNS(t, 5, "127.0.0.1", "127.0.0.2")
	now := time.Now()
	r := &Resolver{Servers: []string{addr}, now: func() time.Time { return now }}
	for i, step := range []struct {
		advance   time.Duration
		wantFresh bool
	}{{0, true}, {4 * time.Second, false}, {time.Second, true}, {time.Second, false}} {
		now = now.Add(step.advance)
		got, fresh, err := r.Lookup("web.shop.lb.test")
		if err != nil {
			t.Fatal(err)
		}
		if fresh != step.wantFresh || len(got) != 2 {
			t.Errorf("lookup %d: fresh %v, %v; want fresh %v and two addresses", i, fresh, got, step.wantFresh)
		}
	}
	if n := queries.Load(); n != 2 {
		t.Errorf("%d queries, want 2 (one per TTL)", n)
	}
}

func TestResolverTriesTheNextServer(t *testing.T) {
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close()
	addr, _ := serveDNS(t, 1, "127.0.0.1")
	r := &Resolver{Servers: []string{deadAddr, addr}, Timeout: 200 * time.Millisecond}
	got, _, err := r.Lookup("web.shop.lb.test")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("Lookup = %v, %v; want 127.0.0.1 from the second server", got, err)
	}
	r = &Resolver{Servers: []string{deadAddr}, Timeout: 200 * time.Millisecond}
	if _, _, err := r.Lookup("web.shop.lb.test"); err == nil {
		t.Error("Lookup with no live server succeeded")
	}
}

// TestClientRoundRobin runs the client against a live address and one
// where nothing listens: requests alternate between them, and only those
// to the dead one fail.
func TestClientRoundRobin(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("name=x\n")) }),
		ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	dnsAddr, _ := serveDNS(t, 60, "127.0.0.1", "127.0.0.2")
	c := Start(context.Background(), Options{
		Name: "web.shop.lb.test", Port: l.Addr().(*net.TCPAddr).Port,
		Resolver: &Resolver{Servers: []string{dnsAddr}}, MaxRequests: 200,
	})
	<-c.done
	rep, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	by := rep.ByAddr()
	live, dead := by[netip.MustParseAddr("127.0.0.1")], by[netip.MustParseAddr("127.0.0.2")]
	if rep.Sent != 200 || live != [2]int{100, 0} || dead != [2]int{100, 100} || rep.Failed != 100 {
		t.Errorf("sent %d failed %d; live %v dead %v; want 200 sent, 100 each, all failed on the dead address", rep.Sent, rep.Failed, live, dead)
	}
}

func TestReportLongestGap(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	req := func(ms int, ok bool) Request { return Request{At: at(ms), Took: time.Millisecond, OK: ok} }
	tests := []struct {
		name       string
		reqs       []Request
		end        int
		wantFailed int
		wantGap    time.Duration
	}{
		{"steady", []Request{req(0, true), req(10, true), req(20, true)}, 25, 0, 10 * time.Millisecond},
		{"failures in between", []Request{req(0, true), req(10, false), req(500, false), req(900, true)}, 905, 2, 900 * time.Millisecond},
		{"nothing succeeded", []Request{req(0, false)}, 300, 1, 300 * time.Millisecond},
		{"the end counts", []Request{req(0, true)}, 1000, 0, 999 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReport(tt.reqs, t0, at(tt.end))
			if r.Failed != tt.wantFailed || r.LongestGap != tt.wantGap {
				t.Errorf("failed %d gap %s, want %d %s", r.Failed, r.LongestGap, tt.wantFailed, tt.wantGap)
			}
		})
	}
}

func TestClientInterval(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	dnsAddr, _ := serveDNS(t, 60, "127.0.0.1")
	c := Start(context.Background(), Options{
		Name: "web.shop.lb.test", Port: l.Addr().(*net.TCPAddr).Port,
		Resolver: &Resolver{Servers: []string{dnsAddr}}, MaxRequests: 10, Interval: 20 * time.Millisecond,
	})
	<-c.done
	rep, _ := c.Stop()
	if rep.Sent != 10 || rep.Failed != 0 {
		t.Fatalf("%s; want 10 sent, none failed", rep)
	}
	if d := rep.Requests[9].At.Sub(rep.Requests[0].At); d < 170*time.Millisecond {
		t.Errorf("10 requests 20ms apart took %s, want at least 180ms", d)
	}
}

// TestClientUDP sends datagrams round robin to an echo server, a server
// that answers something else and an address where nothing listens: only
// the echoed ones count as successes.
func TestClientUDP(t *testing.T) {
	serve := func(addr string, answer func([]byte) []byte) int {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(answer(buf[:n]), from)
			}
		}()
		return pc.LocalAddr().(*net.UDPAddr).Port
	}
	port := serve("127.0.0.1:0", func(b []byte) []byte { return b })
	serve(fmt.Sprintf("127.0.0.2:%d", port), func([]byte) []byte { return []byte("something else") })
	dnsAddr, _ := serveDNS(t, 60, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	c := Start(context.Background(), Options{
		Name: "dns.soak.lb.test", Port: port, UDP: true, Timeout: 200 * time.Millisecond,
		Resolver: &Resolver{Servers: []string{dnsAddr}}, MaxRequests: 60,
	})
	<-c.done
	rep, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	by := rep.ByAddr()
	echo, other, none := by[netip.MustParseAddr("127.0.0.1")], by[netip.MustParseAddr("127.0.0.2")], by[netip.MustParseAddr("127.0.0.3")]
	if rep.Sent != 60 || echo != [2]int{20, 0} || other != [2]int{20, 20} || none != [2]int{20, 20} {
		t.Errorf("sent %d; echo %v, wrong answer %v, nothing listening %v; want 20 each, failed only where not echoed", rep.Sent, echo, other, none)
	}
}
