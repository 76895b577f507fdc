package dnsexport

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// hugeService has n IPv4 and n IPv6 addresses and one port, with a
// hostname: far more than one DNS message can carry.
func hugeService(n int) Service {
	svc := Service{Namespace: "default", Name: "huge", Hostnames: []string{"huge.lb.example.test"},
		Ports: []Port{{Name: "http", Port: 80, Protocol: "TCP"}}}
	for i := range n {
		svc.IPs = append(svc.IPs, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
		svc.IPs = append(svc.IPs, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}))
	}
	return svc
}

// TestLargeAnswers asks for a name with 4,200 addresses of each family
// with real clients: over UDP the answer is truncated, and over TCP it
// comes with MaxAnswerAddrs addresses, a window that moves with the query
// ID so that every address is served over time. Before the cap, TCP sent
// nothing at all.
func TestLargeAnswers(t *testing.T) {
	const n = 4200
	metrics := NewMetrics()
	srv := startServer(t, Config{Metrics: metrics}, nil)
	problems, err := srv.Update([]Service{hugeService(n)})
	if err != nil {
		t.Fatal(err)
	}
	capped := 0
	for _, p := range problems {
		if errors.Is(p, ErrAddressesCapped) {
			capped++
		}
	}
	if capped != 2 {
		t.Errorf("problems %v: want one ErrAddressesCapped per address family", problems)
	}
	if got := testutil.ToFloat64(metrics.CappedNames); got != 4 {
		t.Errorf("capped_names = %v, want 4 (two names, two families)", got)
	}
	valid := map[string]bool{}
	for _, ip := range hugeService(n).IPs {
		valid[ip.String()] = true
	}
	addr := func(rr dns.RR) string {
		switch rr := rr.(type) {
		case *dns.A:
			return rr.A.String()
		case *dns.AAAA:
			return rr.AAAA.String()
		}
		return ""
	}
	for _, name := range []string{"huge.default.lb.example.test.", "huge.lb.example.test."} {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
			t.Run(name+dns.TypeToString[qtype], func(t *testing.T) {
				q := query(name, qtype)
				q.SetEdns0(4096, false)
				r := exchange(t, "udp", srv.Addr(), q)
				if r.Rcode != dns.RcodeSuccess || !r.Truncated {
					t.Errorf("udp: rcode %s, TC %v; want a truncated NOERROR", dns.RcodeToString[r.Rcode], r.Truncated)
				}
				seen := map[string]bool{}
				for id := range 20 {
					q := query(name, qtype)
					q.Id = uint16(id * 997)
					r := exchange(t, "tcp", srv.Addr(), q)
					if r.Rcode != dns.RcodeSuccess || len(r.Answer) != MaxAnswerAddrs {
						t.Fatalf("tcp: rcode %s, %d answers; want NOERROR with %d", dns.RcodeToString[r.Rcode], len(r.Answer), MaxAnswerAddrs)
					}
					for _, rr := range r.Answer {
						a := addr(rr)
						if rr.Header().Rrtype != qtype || !valid[a] {
							t.Fatalf("answer %v is not one of the service's %s records", rr, dns.TypeToString[qtype])
						}
						seen[a] = true
					}
					if again := exchange(t, "tcp", srv.Addr(), q); answerText(again)[0] != answerText(r)[0] {
						t.Error("the same query got another window: the answer must be a function of the query")
					}
				}
				if len(seen) != n {
					t.Errorf("20 queries saw %d of the %d addresses; the window must move with the query ID", len(seen), n)
				}
			})
		}
	}
	t.Run("SRV with glue", func(t *testing.T) {
		r := exchange(t, "tcp", srv.Addr(), query("_http._tcp.huge.default.lb.example.test.", dns.TypeSRV))
		var a, aaaa int
		for _, rr := range r.Extra {
			switch rr.(type) {
			case *dns.A:
				a++
			case *dns.AAAA:
				aaaa++
			}
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || a != MaxAnswerAddrs || aaaa != MaxAnswerAddrs {
			t.Errorf("rcode %s, %d SRV, glue %d A %d AAAA; want one SRV and %d of each", dns.RcodeToString[r.Rcode], len(r.Answer), a, aaaa, MaxAnswerAddrs)
		}
		q := query("_http._tcp.huge.default.lb.example.test.", dns.TypeSRV)
		q.SetEdns0(1232, false)
		if r := exchange(t, "udp", srv.Addr(), q); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("udp: rcode %s, %d SRV", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	})
	if got := testutil.ToFloat64(metrics.CappedAnswers); got < 80 {
		t.Errorf("capped_answers_total = %v, want every capped answer counted", got)
	}
}

// TestUnpackableReplyIsServfail lifts the cap so that an answer cannot
// fit a TCP message: the client gets SERVFAIL, never silence.
func TestUnpackableReplyIsServfail(t *testing.T) {
	srv := startServer(t, Config{}, nil)
	srv.maxAnswerAddrs = 1 << 20
	if _, err := srv.Update([]Service{hugeService(4200)}); err != nil {
		t.Fatal(err)
	}
	r := exchange(t, "tcp", srv.Addr(), query("huge.default.lb.example.test.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("rcode %s with %d answers; want SERVFAIL", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	q := query("huge.default.lb.example.test.", dns.TypeAAAA)
	q.SetEdns0(1232, false)
	if r := exchange(t, "udp", srv.Addr(), q); r.Rcode != dns.RcodeSuccess || !r.Truncated {
		t.Errorf("udp: rcode %s, TC %v; want a truncated answer", dns.RcodeToString[r.Rcode], r.Truncated)
	}
}
