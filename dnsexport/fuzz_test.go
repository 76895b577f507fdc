package dnsexport

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzServer feeds arbitrary bytes to a running server, over UDP and over
// TCP, and to its packet handler directly; after each input the server
// must still answer a valid query over UDP. A crash anywhere fails the
// fuzzer; a wedged server fails the liveness check.
//
//	go test -run '^$' -fuzz '^FuzzServer$' -fuzztime 30s ./dnsexport/
func FuzzServer(f *testing.F) {
	for _, m := range fuzzSeeds() {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add(make([]byte, 12))

	cfg := transferConfig()
	cfg.MaxUDPSize = 4096
	srv := startServer(f, cfg, testServices())
	udp, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(srv.Addr()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { udp.Close() })
	src := netip.MustParseAddrPort("192.0.2.1:5353")
	alive := query("web.default.lb.example.test.", dns.TypeA)

	f.Fuzz(func(t *testing.T, data []byte) {
		// TSIG verification rewrites the packet's ARCOUNT in place
		// (miekg/dns); the server never reads a packet again, but
		// this test does.
		udpReply := srv.handleUDP(slices.Clone(data), src, nil, make([]byte, 0, 260))
		// The cached fast path must answer exactly as the full path.
		if fast := srv.fastAnswer(data, nil, make([]byte, 0, 260)); fast != nil {
			req := new(dns.Msg)
			if err := req.Unpack(data); err != nil {
				t.Fatalf("fast path answered a packet the full path rejects: %v", err)
			}
			got := new(dns.Msg)
			if err := got.Unpack(fast); err != nil {
				t.Fatalf("fast path answer does not parse: %v", err)
			}
			// Names may differ in case only: a compression pointer into
			// the question echoes the asker's spelling, which DNS allows.
			if want := srv.answer(req, true, nil); !strings.EqualFold(got.String(), want.String()) {
				t.Fatalf("fast path answer\n%v\nfull path answer\n%v", got, want)
			}
		}
		if _, err := udp.Write(data); err != nil {
			t.Fatal(err)
		}
		tcpReply := sendTCP(t, srv.Addr(), data)
		// One set of rules for both transports: the same request gets
		// an answer over both or over neither, with the same rcode.
		// Transfers are the exception: TCP only.
		if !isTransfer(data) {
			switch {
			case (udpReply == nil) != (tcpReply == nil):
				t.Fatalf("answered over one transport only: udp %x, tcp %x", udpReply, tcpReply)
			case udpReply != nil && udpReply[3]&0x0F != tcpReply[3]&0x0F:
				t.Fatalf("rcode %d over udp, %d over tcp", udpReply[3]&0x0F, tcpReply[3]&0x0F)
			}
		}
		if r := exchange(t, "udp", srv.Addr(), alive); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
			t.Fatalf("server answers wrongly after the input: %v", r)
		}
	})
}

// sendTCP sends data as one length-prefixed message on a new connection,
// closes its side, and reads until the server closes. It returns the
// first message the server sent, or nil.
func sendTCP(t *testing.T, addr netip.AddrPort, data []byte) []byte {
	t.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(data)))
	if _, err := c.Write(append(msg, data...)); err != nil {
		t.Fatalf("writing over tcp: %v", err)
	}
	c.CloseWrite()
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("server kept a closed TCP connection open for 5s")
	}
	if len(got) < 2 || len(got) < 2+int(binary.BigEndian.Uint16(got)) {
		return nil
	}
	return got[2 : 2+int(binary.BigEndian.Uint16(got))]
}

// isTransfer reports whether data asks for AXFR or IXFR, which are
// answered over TCP only.
func isTransfer(data []byte) bool {
	m := new(dns.Msg)
	if m.Unpack(data) != nil || len(m.Question) != 1 {
		return false
	}
	return m.Question[0].Qtype == dns.TypeAXFR || m.Question[0].Qtype == dns.TypeIXFR
}

func fuzzSeeds() []*dns.Msg {
	var seeds []*dns.Msg
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"web.default.lb.example.test.", dns.TypeA},
		{"big.default.lb.example.test.", dns.TypeA},
		{"_http._tcp.web.default.lb.example.test.", dns.TypeSRV},
		{testOrigin, dns.TypeSOA},
		{testOrigin, dns.TypeAXFR},
		{"example.com.", dns.TypeA},
	} {
		seeds = append(seeds, query(q.name, q.qtype))
	}
	edns := query("web.default.lb.example.test.", dns.TypeAAAA)
	edns.SetEdns0(4096, true)
	seeds = append(seeds, edns)
	ixfr := new(dns.Msg)
	ixfr.SetIxfr(testOrigin, 1, "ns.", "h.")
	ixfr.SetTsig("xfr.", dns.HmacSHA256, 300, time.Now().Unix())
	if b, _, err := dns.TsigGenerate(ixfr, testSecret, "", false); err == nil {
		signed := new(dns.Msg)
		if signed.Unpack(b) == nil {
			seeds = append(seeds, signed)
		}
	}
	notify := new(dns.Msg)
	notify.SetNotify(testOrigin)
	seeds = append(seeds, notify)
	// Signed with an unknown key, a wrong secret and an old time: the
	// replies that carry a TSIG error record.
	for _, sg := range []struct {
		key, secret string
		signed      int64
	}{{"nokey.", testSecret, time.Now().Unix()}, {"xfr.", otherSecret, time.Now().Unix()}, {"xfr.", testSecret, 1}} {
		m := query(testOrigin, dns.TypeSOA)
		m.SetTsig(sg.key, dns.HmacSHA256, 300, sg.signed)
		if b, _, err := dns.TsigGenerate(m, sg.secret, "", false); err == nil {
			signed := new(dns.Msg)
			if signed.Unpack(b) == nil {
				seeds = append(seeds, signed)
			}
		}
	}
	return seeds
}

// FuzzSerialFile feeds arbitrary content to the serial file parser: it
// never panics, and what it accepts is exactly what the server writes.
//
//	go test -run '^$' -fuzz '^FuzzSerialFile$' -fuzztime 30s ./dnsexport/
func FuzzSerialFile(f *testing.F) {
	for _, s := range []string{"", "1\n", "4294967295\n", "4294967296\n", "17648", " 12 \n", "x\n", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseSerial(data)
		if err != nil {
			return
		}
		if again, err := parseSerial([]byte(strconv.FormatUint(uint64(v), 10) + "\n")); err != nil || again != v {
			t.Fatalf("%q read as %d, which does not read back (%d, %v)", data, v, again, err)
		}
	})
}
