package prober

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sync"
	"syscall"
	"testing"

	"github.com/pulselb/pulselb/api/probespec"
)

// udpTestServer listens on host:0 and calls answer for every datagram; a
// nil reply sends nothing, so a nil answer makes a silent server.
func udpTestServer(t *testing.T, host string, answer func(req []byte, from net.Addr) []byte) netip.AddrPort {
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
			if answer == nil {
				continue
			}
			if reply := answer(buf[:n], from); reply != nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return addrPortOf(t, pc.LocalAddr())
}

// udpTestClosedPort returns a UDP port on host where nothing answers: the
// kernel refuses a datagram to it with ICMP port unreachable. It holds the
// port with a socket connected to another port for the test's life, so
// that no other test (of this package or another, in parallel) can bind it
// and answer; a connected socket takes datagrams from its peer only.
func udpTestClosedPort(t *testing.T, host string) netip.AddrPort {
	t.Helper()
	ip := net.ParseIP(host)
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: ip}, &net.UDPAddr{IP: ip, Port: 9})
	if err != nil {
		t.Fatalf("holding a UDP port: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return addrPortOf(t, c.LocalAddr())
}

func udpReply(s string) func([]byte, net.Addr) []byte {
	return func([]byte, net.Addr) []byte { return []byte(s) }
}

func udpEcho(req []byte, _ net.Addr) []byte { return append([]byte{}, req...) }

func TestUDP(t *testing.T) {
	expectPong := regexp.MustCompile(`^PONG`)
	tests := []struct {
		name   string
		answer func([]byte, net.Addr) []byte
		spec   probespec.Spec
		want   Outcome
		detail string
		errHas string
	}{
		{
			name:   "reply matches",
			answer: udpReply("PONG\n"),
			spec:   probespec.Spec{Send: []byte("PING"), Expect: expectPong},
			want:   L7OK,
			detail: "5 bytes matched",
		},
		{
			name:   "reply without expectation",
			answer: udpReply("PONG"),
			spec:   probespec.Spec{Send: []byte("PING")},
			want:   L7OK,
			detail: "4 bytes received",
		},
		{
			name:   "reply does not match",
			answer: udpReply("NOPE"),
			spec:   probespec.Spec{Send: []byte("PING"), Expect: expectPong},
			want:   L7RSP,
			errHas: `"NOPE"`,
		},
		{
			name:   "binary echo with wildcard nibbles",
			answer: udpEcho,
			spec:   probespec.Spec{Send: []byte("\x00\x01\xff"), ExpectHex: tcpHex("\x00\x01\xf0", "\xff\xff\xf0")},
			want:   L7OK,
			detail: "3 bytes matched",
		},
		{
			name:   "binary echo mismatch",
			answer: udpEcho,
			spec:   probespec.Spec{Send: []byte("\x00\x01\xff"), ExpectHex: tcpHex("\x00\x01\x0f", "\xff\xff\xff")},
			want:   L7RSP,
			errHas: `"\x00\x01\xff"`,
		},
		{
			name: "empty send is an empty datagram",
			answer: func(req []byte, _ net.Addr) []byte {
				return fmt.Appendf(nil, "got %d bytes", len(req))
			},
			spec: probespec.Spec{Expect: regexp.MustCompile(`^got 0 bytes$`)},
			want: L7OK,
		},
		{
			name:   "silence without expectation is up",
			spec:   probespec.Spec{Send: []byte("PING")},
			want:   L4OK,
			detail: "no answer (silence=up)",
		},
		{
			name:   "silence with expectation is down",
			spec:   probespec.Spec{Send: []byte("PING"), Expect: expectPong},
			want:   L7TOUT,
			errHas: "no answer",
		},
		{
			name:   "silence with hex expectation is down",
			spec:   probespec.Spec{Send: []byte("PING"), ExpectHex: tcpHex("P", "\xff")},
			want:   L7TOUT,
			errHas: "no answer",
		},
		{
			name:   "explicit silence=up with expectation",
			spec:   probespec.Spec{Send: []byte("PING"), Expect: expectPong, Silence: probespec.SilenceUp},
			want:   L4OK,
			detail: "no answer (silence=up)",
		},
		{
			name:   "explicit silence=down without expectation",
			spec:   probespec.Spec{Send: []byte("PING"), Silence: probespec.SilenceDown},
			want:   L7TOUT,
			errHas: "no answer",
		},
	}
	onLoopbacks(t, "udp", func(t *testing.T, host string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				target := udpTestServer(t, host, tt.answer)
				spec := tt.spec
				spec.Protocol = probespec.UDP
				res := probeOnce(t, spec, Options{}, target)
				checkResult(t, res, tt.want, tt.errHas)
				if tt.detail != "" && res.Detail != tt.detail {
					t.Errorf("Detail = %q, want %q", res.Detail, tt.detail)
				}
				if res.Timings.Connect <= 0 {
					t.Errorf("Timings.Connect = %v, want > 0", res.Timings.Connect)
				}
				answered := tt.answer != nil
				if answered && res.Timings.FirstByte <= 0 {
					t.Errorf("Timings.FirstByte = %v, want > 0", res.Timings.FirstByte)
				}
				// An answer decides at once; silence only at the deadline.
				if answered && res.Timings.Total > probeTimeout/2 {
					t.Errorf("took %v to judge an answer", res.Timings.Total)
				}
				if !answered && res.Timings.Total < probeTimeout*3/4 {
					t.Errorf("judged silence after %v, before the %v deadline", res.Timings.Total, probeTimeout)
				}
			})
		}
	})
}

func TestUDPClosedPort(t *testing.T) {
	specs := []struct {
		name string
		spec probespec.Spec
	}{
		{"silence=up", probespec.Spec{Protocol: probespec.UDP, Silence: probespec.SilenceUp}},
		{"with expectation", probespec.Spec{Protocol: probespec.UDP, Send: []byte("PING"), Expect: regexp.MustCompile(`^PONG`)}},
	}
	onLoopbacks(t, "udp", func(t *testing.T, host string) {
		for _, s := range specs {
			t.Run(s.name, func(t *testing.T) {
				res := probeOnce(t, s.spec, Options{}, udpTestClosedPort(t, host))
				checkResult(t, res, L4CON, "")
				if !errors.Is(res.Err, syscall.ECONNREFUSED) {
					t.Errorf("Err = %v, want it to wrap ECONNREFUSED", res.Err)
				}
				if res.Timings.Total > probeTimeout/2 {
					t.Errorf("took %v; an ICMP refusal should not wait for the deadline", res.Timings.Total)
				}
			})
		}
	})
}

func TestUDPLocalAddr(t *testing.T) {
	local := netip.MustParseAddr("127.0.0.2")
	if pc, err := net.ListenPacket("udp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	} else {
		pc.Close()
	}
	target := udpTestServer(t, "127.0.0.1", func(_ []byte, from net.Addr) []byte {
		return []byte(from.String())
	})
	spec := probespec.Spec{Protocol: probespec.UDP, Expect: regexp.MustCompile(`^127\.0\.0\.2:`)}
	res := probeOnce(t, spec, Options{LocalAddr: local}, target)
	if res.Outcome != L7OK {
		t.Fatalf("outcome = %s (%v), want L7OK: the server must see source %v", res.Outcome, res.Err, local)
	}
}
