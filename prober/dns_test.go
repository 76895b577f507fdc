package prober

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/pulselb/pulselb/api/probespec"
)

// dnsTestQuery is what the test server saw of one query.
type dnsTestQuery struct {
	network string
	name    string
	qtype   uint16
	rd      bool
	udpSize uint16 // 0 without EDNS0
}

// dnsTestZone answers a small fixed zone and records every query.
type dnsTestZone struct {
	mu      sync.Mutex
	queries []dnsTestQuery
}

func (z *dnsTestZone) seen() []dnsTestQuery {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]dnsTestQuery(nil), z.queries...)
}

func (z *dnsTestZone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	seen := dnsTestQuery{network: "tcp", name: q.Name, qtype: q.Qtype, rd: req.RecursionDesired}
	if udp {
		seen.network = "udp"
	}
	if opt := req.IsEdns0(); opt != nil {
		seen.udpSize = opt.UDPSize()
	}
	z.mu.Lock()
	z.queries = append(z.queries, seen)
	z.mu.Unlock()

	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		return r
	}
	switch q.Name {
	case ".":
		if q.Qtype == dns.TypeNS {
			m.Answer = append(m.Answer, rr(". 3600 IN NS ns.example."))
		}
	case "a.example.":
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, rr("a.example. 60 IN A 192.0.2.1"), rr("a.example. 60 IN A 192.0.2.2"))
		}
	case "cname.example.":
		m.Answer = append(m.Answer, rr("cname.example. 60 IN CNAME elsewhere.example."))
	case "big.example.":
		for i := range 200 {
			a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
			m.Answer = append(m.Answer, rr("big.example. 60 IN A "+a.String()))
		}
	case "fail.example.":
		m.Rcode = dns.RcodeServerFailure
	default:
		m.Rcode = dns.RcodeNameError
	}
	if udp {
		size := dns.MinMsgSize
		if seen.udpSize > dns.MinMsgSize {
			size = int(seen.udpSize)
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

// dnsTestServer serves h over UDP and TCP on the same port of host.
func dnsTestServer(t *testing.T, host string, h dns.Handler) netip.AddrPort {
	t.Helper()
	var (
		l   net.Listener
		pc  net.PacketConn
		err error
	)
	// The UDP port matching a free TCP port may be taken; try a few.
	for range 10 {
		if l, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			t.Fatalf("listening on tcp: %v", err)
		}
		if pc, err = net.ListenPacket("udp", l.Addr().String()); err == nil {
			break
		}
		l.Close()
	}
	if err != nil {
		t.Fatalf("listening on udp next to tcp: %v", err)
	}
	target := addrPortOf(t, l.Addr())

	started := make(chan struct{}, 2)
	done := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	servers := []*dns.Server{
		{PacketConn: pc, Handler: h, NotifyStartedFunc: notify},
		{Listener: l, Handler: h, NotifyStartedFunc: notify},
	}
	for _, s := range servers {
		go func() {
			_ = s.ActivateAndServe()
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Shutdown()
		}
		for range servers {
			<-done
		}
	})
	timeout := time.After(5 * time.Second)
	for range servers {
		select {
		case <-started:
		case <-timeout:
			t.Fatal("dns server did not start")
		}
	}
	return target
}

func TestDNS(t *testing.T) {
	tests := []struct {
		name   string
		spec   probespec.Spec
		want   Outcome
		detail string
		errHas string
		asked  []string // the transports the server must have seen, in order
	}{
		{
			name:   "A answer",
			spec:   probespec.Spec{Name: "a.example", Type: dns.TypeA},
			want:   L7OK,
			detail: "NOERROR, 2 answers",
			asked:  []string{"udp"},
		},
		{
			name:   "A answer required and present",
			spec:   probespec.Spec{Name: "a.example.", Type: dns.TypeA, Answer: true},
			want:   L7OK,
			detail: "NOERROR, 2 answers",
		},
		{
			name:   "type defaults to A",
			spec:   probespec.Spec{Name: "a.example", Answer: true},
			want:   L7OK,
			detail: "NOERROR, 2 answers",
		},
		{
			name:   "empty name asks the root for NS",
			spec:   probespec.Spec{},
			want:   L7OK,
			detail: "NOERROR, 1 answer",
		},
		{
			name:   "NXDOMAIN when NOERROR wanted",
			spec:   probespec.Spec{Name: "missing.example", Type: dns.TypeA},
			want:   L7STS,
			errHas: "rcode NXDOMAIN, want NOERROR",
		},
		{
			name:   "NXDOMAIN wanted and got",
			spec:   probespec.Spec{Name: "missing.example", Type: dns.TypeA, Rcode: dns.RcodeNameError},
			want:   L7OK,
			detail: "NXDOMAIN, 0 answers",
		},
		{
			name:   "SERVFAIL",
			spec:   probespec.Spec{Name: "fail.example", Type: dns.TypeA},
			want:   L7STS,
			errHas: "rcode SERVFAIL, want NOERROR",
		},
		{
			name:   "NODATA is fine without answer=true",
			spec:   probespec.Spec{Name: "a.example", Type: dns.TypeTXT},
			want:   L7OK,
			detail: "NOERROR, 0 answers",
		},
		{
			name:   "NODATA with answer=true",
			spec:   probespec.Spec{Name: "a.example", Type: dns.TypeTXT, Answer: true},
			want:   L7RSP,
			errHas: "no TXT record",
		},
		{
			name:   "CNAME does not count as an A answer",
			spec:   probespec.Spec{Name: "cname.example", Type: dns.TypeA, Answer: true},
			want:   L7RSP,
			errHas: "no A record",
		},
		{
			name:   "CNAME counts when CNAME is asked",
			spec:   probespec.Spec{Name: "cname.example", Type: dns.TypeCNAME, Answer: true},
			want:   L7OK,
			detail: "NOERROR, 1 answer",
		},
		{
			name:   "truncated over UDP, complete over TCP",
			spec:   probespec.Spec{Name: "big.example", Type: dns.TypeA, Answer: true},
			want:   L7OK,
			detail: "NOERROR, 200 answers over tcp",
			asked:  []string{"udp", "tcp"},
		},
	}
	onLoopbacks(t, "udp", func(t *testing.T, host string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				zone := &dnsTestZone{}
				target := dnsTestServer(t, host, zone)
				spec := tt.spec
				spec.Protocol = probespec.DNS
				res := probeOnce(t, spec, Options{}, target)
				checkResult(t, res, tt.want, tt.errHas)
				if tt.detail != "" && res.Detail != tt.detail {
					t.Errorf("Detail = %q, want %q", res.Detail, tt.detail)
				}
				if res.Timings.Connect <= 0 || res.Timings.FirstByte < res.Timings.Connect || res.Timings.Total < res.Timings.FirstByte {
					t.Errorf("Timings = %+v, want 0 < Connect <= FirstByte <= Total", res.Timings)
				}
				seen := zone.seen()
				if len(seen) == 0 {
					t.Fatal("the server saw no query")
				}
				for _, q := range seen {
					if q.rd {
						t.Errorf("query %+v asked for recursion", q)
					}
					if q.udpSize != dnsUDPSize {
						t.Errorf("query %+v advertised EDNS0 size %d, want %d", q, q.udpSize, dnsUDPSize)
					}
				}
				if tt.spec.Name == "" && (seen[0].name != "." || seen[0].qtype != dns.TypeNS) {
					t.Errorf("empty name asked %s %s, want . NS", seen[0].name, dns.Type(seen[0].qtype))
				}
				if tt.asked != nil {
					var got []string
					for _, q := range seen {
						got = append(got, q.network)
					}
					if strings.Join(got, ",") != strings.Join(tt.asked, ",") {
						t.Errorf("server saw queries over %v, want %v", got, tt.asked)
					}
				}
			})
		}
	})
}

// dnsTestRaw answers every UDP query with whatever reply builds from it.
func dnsTestRaw(t *testing.T, host string, reply func(q *dns.Msg) []byte) netip.AddrPort {
	t.Helper()
	return udpTestServer(t, host, func(req []byte, _ net.Addr) []byte {
		q := new(dns.Msg)
		if err := q.Unpack(req); err != nil {
			return nil
		}
		return reply(q)
	})
}

func dnsTestPack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("packing reply: %v", err)
	}
	return b
}

func TestDNSBrokenServers(t *testing.T) {
	tests := []struct {
		name   string
		target func(t *testing.T, host string) netip.AddrPort
		want   Outcome
		errHas string
	}{
		{
			name: "silent UDP server",
			target: func(t *testing.T, host string) netip.AddrPort {
				return udpTestServer(t, host, nil)
			},
			want:   L7TOUT,
			errHas: "no answer over udp",
		},
		{
			name:   "closed port",
			target: udpTestClosedPort,
			want:   L4CON,
		},
		{
			name: "malformed answer",
			target: func(t *testing.T, host string) netip.AddrPort {
				return dnsTestRaw(t, host, func(q *dns.Msg) []byte {
					// A header that promises a question, then a name
					// compression pointer that points past the end.
					b := dnsTestPack(t, new(dns.Msg).SetReply(q))
					return append(b[:12], 0xc0, 0xff)
				})
			},
			want:   L7RSP,
			errHas: "ignored 1 datagrams that were not the answer, the last does not parse",
		},
		{
			name: "answer with the wrong ID",
			target: func(t *testing.T, host string) netip.AddrPort {
				return dnsTestRaw(t, host, func(q *dns.Msg) []byte {
					m := new(dns.Msg).SetReply(q)
					m.Id++
					return dnsTestPack(t, m)
				})
			},
			want:   L7RSP,
			errHas: "ID",
		},
		{
			name: "truncated answer and no TCP listener",
			target: func(t *testing.T, host string) netip.AddrPort {
				return dnsTestRaw(t, host, func(q *dns.Msg) []byte {
					m := new(dns.Msg).SetReply(q)
					m.Truncated = true
					return dnsTestPack(t, m)
				})
			},
			want:   L4CON,
			errHas: "connecting: dial tcp",
		},
	}
	onLoopbacks(t, "udp", func(t *testing.T, host string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				spec := probespec.Spec{Protocol: probespec.DNS, Name: "a.example", Type: dns.TypeA}
				res := probeOnce(t, spec, Options{}, tt.target(t, host))
				checkResult(t, res, tt.want, tt.errHas)
				if tt.want == L4CON && tt.errHas == "" && !errors.Is(res.Err, syscall.ECONNREFUSED) {
					t.Errorf("Err = %v, want it to wrap ECONNREFUSED", res.Err)
				}
			})
		}
	})
}

func TestDNSInvalidName(t *testing.T) {
	if _, err := New(probespec.Spec{Protocol: probespec.DNS, Name: "a..b"}, Options{}); err == nil {
		t.Error("New accepted the DNS name a..b")
	}
}

// dnsTestDatagrams answers every UDP query with the datagrams replies
// builds from it, in order, from the port the query went to: what a
// spoofed datagram that races the real answer looks like to the prober.
func dnsTestDatagrams(t *testing.T, host string, replies func(q *dns.Msg) [][]byte) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			for _, b := range replies(q) {
				_, _ = pc.WriteTo(b, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return addrPortOf(t, pc.LocalAddr())
}

// TestDNSMatchesAnswerToQuery checks that the probe takes only the answer
// to its own query (same ID, same question) and skips any other datagram
// until the deadline: a datagram spoofed ahead of the real answer cannot
// fail a healthy target, and an answer to another question never passes.
func TestDNSMatchesAnswerToQuery(t *testing.T) {
	answer := func(t *testing.T, q *dns.Msg) *dns.Msg {
		m := new(dns.Msg).SetReply(q)
		a, err := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = []dns.RR{a}
		return m
	}
	otherID := func(t *testing.T, q *dns.Msg) []byte {
		m := answer(t, q)
		m.Id++
		return dnsTestPack(t, m)
	}
	otherQuestion := func(t *testing.T, q *dns.Msg) []byte {
		m := answer(t, q)
		m.Question[0].Name = "b.example."
		return dnsTestPack(t, m)
	}
	otherType := func(t *testing.T, q *dns.Msg) []byte {
		m := new(dns.Msg).SetReply(q)
		m.Question[0].Qtype = dns.TypeAAAA
		return dnsTestPack(t, m)
	}
	garbage := func(t *testing.T, q *dns.Msg) []byte {
		b := dnsTestPack(t, new(dns.Msg).SetReply(q))
		return append(b[:12], 0xc0, 0xff)
	}
	good := func(t *testing.T, q *dns.Msg) []byte { return dnsTestPack(t, answer(t, q)) }
	upperCase := func(t *testing.T, q *dns.Msg) []byte {
		m := answer(t, q)
		m.Question[0].Name = strings.ToUpper(m.Question[0].Name)
		return dnsTestPack(t, m)
	}
	noQuestion := func(t *testing.T, q *dns.Msg) []byte {
		m := new(dns.Msg).SetRcode(q, dns.RcodeRefused)
		m.Question = nil
		return dnsTestPack(t, m)
	}
	type reply func(t *testing.T, q *dns.Msg) []byte
	tests := []struct {
		name    string
		rcode   int
		replies []reply
		want    Outcome
		errHas  string
	}{
		{name: "spoofed ID, then the answer", replies: []reply{otherID, good}, want: L7OK},
		{name: "answer to another name, then the answer", replies: []reply{otherQuestion, good}, want: L7OK},
		{name: "answer to another type, then the answer", replies: []reply{otherType, good}, want: L7OK},
		{name: "garbage, then the answer", replies: []reply{garbage, good}, want: L7OK},
		{name: "many mismatches, then the answer", replies: []reply{otherID, garbage, otherQuestion, otherID, otherType, good}, want: L7OK},
		{name: "question in another case (0x20)", replies: []reply{upperCase}, want: L7OK},
		{name: "no question section, ID matches", rcode: dns.RcodeRefused, replies: []reply{noQuestion}, want: L7OK},
		{name: "only an answer to another name", replies: []reply{otherQuestion}, want: L7RSP, errHas: "question b.example. A, want a.example. A"},
		{name: "only an answer to another type", replies: []reply{otherType}, want: L7RSP, errHas: "question a.example. AAAA, want a.example. A"},
		{name: "only wrong IDs", replies: []reply{otherID, otherID}, want: L7RSP, errHas: "ignored 2 datagrams that were not the answer, the last has ID"},
	}
	onLoopbacks(t, "udp", func(t *testing.T, host string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				target := dnsTestDatagrams(t, host, func(q *dns.Msg) [][]byte {
					var out [][]byte
					for _, r := range tt.replies {
						out = append(out, r(t, q))
					}
					return out
				})
				spec := probespec.Spec{Protocol: probespec.DNS, Name: "a.example", Type: dns.TypeA, Rcode: tt.rcode}
				res := probeOnce(t, spec, Options{}, target)
				checkResult(t, res, tt.want, tt.errHas)
			})
		}
	})
}

// TestDNSOverTCPAnswerToAnotherQuestion: over TCP, which cannot be
// spoofed, an answer to another question fails the probe at once.
func TestDNSOverTCPAnswerToAnotherQuestion(t *testing.T) {
	onLoopbacks(t, "udp", func(t *testing.T, host string) {
		target := dnsTestServer(t, host, dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			m := new(dns.Msg).SetReply(req)
			if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
				m.Truncated = true
			} else {
				m.Question[0].Name = "b.example."
			}
			_ = w.WriteMsg(m)
		}))
		res := probeOnce(t, probespec.Spec{Protocol: probespec.DNS, Name: "a.example", Type: dns.TypeA}, Options{}, target)
		checkResult(t, res, L7RSP, "answer over tcp is to question b.example. A")
	})
}
