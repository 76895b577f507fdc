package dnsexport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// pack packs m without compression, as a client would send it.
func pack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUDPAnswersCompressed sends over UDP queries that the cached fast
// path does not take (RA or Z set in the query, an EDNS option, a TSIG
// signature): their answers are compressed like the fast path's, so they
// are no larger than the same answer from a plain query.
func TestUDPAnswersCompressed(t *testing.T) {
	srv := startServer(t, transferConfig(), testServices())
	const name = "web.default.lb.example.test."
	plain := rawExchange(t, "udp", srv.Addr(), pack(t, query(name, dns.TypeA)))

	withBits := func(set func(b []byte)) []byte {
		b := pack(t, query(name, dns.TypeA))
		set(b)
		return b
	}
	withCookie := query(name, dns.TypeA)
	withCookie.SetEdns0(1232, false)
	withCookie.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}}
	signed := query(name, dns.TypeA)
	signed.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
	signedWire, _, err := dns.TsigGenerate(signed, testSecret, "", false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		packet []byte
		// same: the answer must be byte for byte the plain query's but
		// for the ID and the echoed header bits.
		same bool
	}{
		{"RA set", withBits(func(b []byte) { b[3] |= 0x80 }), true},
		{"Z set", withBits(func(b []byte) { b[3] |= 0x40 }), true},
		{"EDNS option", pack(t, withCookie), false},
		{"TSIG", signedWire, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := rawExchange(t, "udp", srv.Addr(), tc.packet)
			r := new(dns.Msg)
			if err := r.Unpack(got); err != nil {
				t.Fatal(err)
			}
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
				t.Fatalf("answer: %v", r)
			}
			r.Compress = true
			if want := len(must(r.Pack())); len(got) > want {
				t.Errorf("answer is %d bytes, %d compressed: not compressed", len(got), want)
			}
			if tc.same && len(got) != len(plain) {
				t.Errorf("answer is %d bytes, the plain query's %d", len(got), len(plain))
			}
		})
	}
}

// TestRequestRulesSameOverUDPAndTCP sends requests that break RFC 6891
// (EDNS) or carry sections a query has no use for, and well-formed
// neighbours of them, over UDP and over TCP: each gets the rcode of
// docs/dns.md, and the same answer over both transports.
func TestRequestRulesSameOverUDPAndTCP(t *testing.T) {
	srv := startServer(t, Config{}, testServices())
	for _, tc := range requestRuleCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			udp := rawExchange(t, "udp", srv.Addr(), tc.packet)
			tcp := rawExchange(t, "tcp", srv.Addr(), tc.packet)
			for network, b := range map[string][]byte{"udp": udp, "tcp": tcp} {
				if len(b) < 12 {
					t.Fatalf("%s: reply of %d bytes", network, len(b))
				}
				if got := int(b[3] & 0x0F); got != tc.rcode {
					t.Errorf("%s: rcode %s, want %s", network, dns.RcodeToString[got], dns.RcodeToString[tc.rcode])
				}
			}
			if bytes.Equal(udp, tcp) {
				return
			}
			// Equal answers may still be packed differently (the cached
			// UDP answer keeps the asker's spelling in pointers).
			u, tr := new(dns.Msg), new(dns.Msg)
			if err := u.Unpack(udp); err != nil {
				t.Fatalf("udp reply: %v", err)
			}
			if err := tr.Unpack(tcp); err != nil {
				t.Fatalf("tcp reply: %v", err)
			}
			if u.String() != tr.String() {
				t.Errorf("udp reply\n%v\ntcp reply\n%v", u, tr)
			}
		})
	}
}

// requestRule is a request and the rcode docs/dns.md gives it.
type requestRule struct {
	name   string
	packet []byte
	rcode  int
	// byRole: the rcode follows from this server's role (a primary that
	// takes no NOTIFY and transfers only to TSIG), not from the form of
	// the request, so a BIND secondary answers otherwise.
	byRole bool
}

// requestRuleCases are requests that break RFC 6891 or carry records a
// query has no use for, and well-formed neighbours of them, all for the
// name web.default in testOrigin.
func requestRuleCases(t *testing.T) []requestRule {
	const name = "web.default.lb.example.test."
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	opt := func(owner string) *dns.OPT {
		o := &dns.OPT{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeOPT}}
		o.SetUDPSize(1232)
		return o
	}
	withExtra := func(extra ...dns.RR) []byte {
		m := query(name, dns.TypeA)
		m.Extra = extra
		return pack(t, m)
	}
	cookie := func() *dns.Msg {
		m := query(name, dns.TypeA)
		m.Extra = []dns.RR{opt(".")}
		m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}}
		return m
	}
	// The cookie option's length is the 2 bytes before its 8 bytes of
	// data, at the end of the packet.
	optionPastEnd := pack(t, cookie())
	optionPastEnd[len(optionPastEnd)-9] = 9
	optionCut := pack(t, cookie())
	optionCut[len(optionCut)-9] = 4 // 4 bytes of data, then 4 that are no option
	ancountOnly := pack(t, query(name, dns.TypeA))
	ancountOnly[7] = 5
	fiveAnswers := query(name, dns.TypeA)
	for range 5 {
		fiveAnswers.Answer = append(fiveAnswers.Answer, rr(name+" 5 IN A 192.0.2.1"))
	}
	authority := query(name, dns.TypeA)
	authority.Ns = []dns.RR{rr(testOrigin + " 60 IN SOA ns1. h. 1 2 3 4 5")}
	ixfr := new(dns.Msg)
	ixfr.SetIxfr(testOrigin, 1, "ns1.", "h.")
	notify := new(dns.Msg)
	notify.SetNotify(testOrigin)
	notify.Answer = []dns.RR{rr(testOrigin + " 60 IN SOA ns1. h. 1 2 3 4 5")}
	tsigFirst := query(name, dns.TypeA)
	tsigFirst.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
	tsigFirst.Extra = append(tsigFirst.Extra, opt("."))

	return []requestRule{
		{"well-formed EDNS", withExtra(opt(".")), dns.RcodeSuccess, false},
		{"well-formed EDNS option", pack(t, cookie()), dns.RcodeSuccess, false},
		{"two OPT records", withExtra(opt("."), opt(".")), dns.RcodeFormatError, false},
		{"OPT owner not the root", withExtra(opt("example.")), dns.RcodeFormatError, false},
		{"OPT in the answer section", func() []byte {
			m := query(name, dns.TypeA)
			m.Answer = []dns.RR{opt(".")}
			return pack(t, m)
		}(), dns.RcodeFormatError, false},
		{"option length past the OPT data", optionPastEnd, dns.RcodeFormatError, false},
		{"option data not a whole option", optionCut, dns.RcodeFormatError, false},
		{"ANCOUNT=5, no records", ancountOnly, dns.RcodeFormatError, false},
		{"five answer records in a query: ignored", pack(t, fiveAnswers), dns.RcodeSuccess, false},
		{"authority record in a query: ignored", pack(t, authority), dns.RcodeSuccess, false},
		{"TSIG not last", pack(t, tsigFirst), dns.RcodeFormatError, false},
		{"bytes after the last record: ignored", append(pack(t, query(name, dns.TypeA)), 0, 0, 0), dns.RcodeSuccess, false},
		{"no question", func() []byte {
			b := pack(t, query(name, dns.TypeA))
			b[5] = 0
			return b[:12]
		}(), dns.RcodeFormatError, false},
		{"IXFR with its SOA in authority", pack(t, ixfr), dns.RcodeRefused, true},
		{"NOTIFY with its SOA in answer", pack(t, notify), dns.RcodeRefused, true},
	}
}

// TestRequestRulesLikeBIND sends the same requests to a real BIND 9,
// secondary of the zone: where the form of a request decides, pulselb
// answers with BIND's rcode, over UDP and over TCP.
func TestRequestRulesLikeBIND(t *testing.T) {
	namedPath(t)
	srv := startServer(t, transferConfig(), testServices())
	bind, _ := startBIND(t, srv.Addr())
	waitForA(t, bind, "web.default.lb.example.test.", []string{"192.0.2.10", "192.0.2.11"}, 10*time.Second)
	for _, tc := range requestRuleCases(t) {
		if tc.byRole {
			continue
		}
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network+"/"+tc.name, func(t *testing.T) {
				want := int(rawExchange(t, network, bind, tc.packet)[3] & 0x0F)
				if got := int(rawExchange(t, network, srv.Addr(), tc.packet)[3] & 0x0F); got != want {
					t.Errorf("rcode %s, BIND's %s", dns.RcodeToString[got], dns.RcodeToString[want])
				}
			})
		}
	}
}

// TestTCPPipelinedQueries writes many queries at once on one TCP
// connection: every one is answered, in order, and the connection stays
// open for more (docs/dns.md: no limit of queries per connection).
func TestTCPPipelinedQueries(t *testing.T) {
	srv := startServer(t, Config{}, testServices())
	c, err := net.DialTimeout("tcp", srv.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	const n = 1000
	write := func(first, count int) {
		t.Helper()
		var out []byte
		for i := first; i < first+count; i++ {
			q := query("web.default.lb.example.test.", dns.TypeA)
			q.Id = uint16(i)
			b := pack(t, q)
			out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
			out = append(out, b...)
		}
		if _, err := c.Write(out); err != nil {
			t.Fatalf("writing queries: %v", err)
		}
	}
	read := func(id int) {
		t.Helper()
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("answer %d: %v", id, err)
		}
		buf := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("answer %d: %v", id, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf); err != nil {
			t.Fatalf("answer %d: %v", id, err)
		}
		if int(r.Id) != id || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
			t.Fatalf("answer %d: %v", id, r)
		}
	}
	write(0, n)
	for i := range n {
		read(i)
	}
	write(n, 1)
	read(n)
}

// TestTCPClientThatDoesNotRead sends queries on a connection without end
// and reads nothing: once the answers fill the socket buffers, the server
// gives up on the connection after its write timeout, instead of waiting
// for the client for ever. The client sees it as its own writes failing
// (the server closed with queries unread, which resets the connection).
func TestTCPClientThatDoesNotRead(t *testing.T) {
	srv := startServer(t, Config{}, testServices())
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := pack(t, query("big.default.lb.example.test.", dns.TypeA))
	one := append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	// A write blocks once the server stops reading; the server stops
	// when its answers no longer fit the buffers, and waits
	// tcpWriteTimeout before it gives up.
	wait := tcpWriteTimeout + 8*time.Second
	c.SetWriteDeadline(time.Now().Add(wait))
	start := time.Now()
	var sent int
	for {
		if _, err = c.Write(one); err != nil {
			break
		}
		sent++
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("after %d queries and %s the server still held the connection", sent, wait)
	case !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE):
		t.Fatalf("writing: %v, want the connection reset by the server", err)
	}
	t.Logf("the server closed the connection after %d queries, %s", sent, time.Since(start).Round(time.Millisecond))
}
