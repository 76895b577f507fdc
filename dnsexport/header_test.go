package dnsexport

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// rawExchange sends packet over network (udp or tcp) and returns the
// first response, or fails the test when none comes within 2s.
func rawExchange(t *testing.T, network string, addr netip.AddrPort, packet []byte) []byte {
	t.Helper()
	c, err := net.DialTimeout(network, addr.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if network == "tcp" {
		packet = append(binary.BigEndian.AppendUint16(nil, uint16(len(packet))), packet...)
	}
	if _, err := c.Write(packet); err != nil {
		t.Fatal(err)
	}
	if network == "udp" {
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("udp: no response: %v", err)
		}
		return buf[:n]
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("tcp: no response: %v", err)
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("tcp: short response: %v", err)
	}
	return buf
}

// TestReplyNeverSetsRA sends queries with RA (and RD) set, well formed
// and not, over UDP and TCP: every reply has RA clear, as an
// authoritative-only server must (docs/dns.md). (The cached fast path
// takes no query with RA set, and its answers are built with RA clear.)
func TestReplyNeverSetsRA(t *testing.T) {
	srv := startServer(t, Config{}, testServices())
	withRA := func(m *dns.Msg) []byte {
		m.RecursionAvailable = true
		m.RecursionDesired = true
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	twoQuestions := query("web.default.lb.example.test.", dns.TypeA)
	twoQuestions.Question = append(twoQuestions.Question, twoQuestions.Question[0])
	update := query("web.default.lb.example.test.", dns.TypeA)
	update.Opcode = dns.OpcodeUpdate
	cut := withRA(query("web.default.lb.example.test.", dns.TypeA))
	cut = cut[:len(cut)-3] // the question ends early: unparseable
	tests := []struct {
		name   string
		packet []byte
		rcode  int
	}{
		{"answer", withRA(query("web.default.lb.example.test.", dns.TypeA)), dns.RcodeSuccess},
		{"refused", withRA(query("example.com.", dns.TypeA)), dns.RcodeRefused},
		{"two questions: FORMERR", withRA(twoQuestions), dns.RcodeFormatError},
		{"unparseable: FORMERR", cut, dns.RcodeFormatError},
		{"UPDATE: NOTIMP", withRA(update), dns.RcodeNotImplemented},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			t.Run(network+"/"+tc.name, func(t *testing.T) {
				b := rawExchange(t, network, srv.Addr(), tc.packet)
				if len(b) < 12 {
					t.Fatalf("reply of %d bytes", len(b))
				}
				if got := int(b[3] & 0x0F); got != tc.rcode {
					t.Errorf("rcode %s, want %s", dns.RcodeToString[got], dns.RcodeToString[tc.rcode])
				}
				if b[3]&0x80 != 0 {
					t.Error("RA set in the reply: the server offers no recursion")
				}
			})
		}
	}
}
