package prober

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// tcpDrain reads until the prober closes; the handlers below end the same way.
func tcpDrain(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

func tcpBanner(banner string, hold bool) func(net.Conn) {
	return func(c net.Conn) {
		if _, err := io.WriteString(c, banner); err != nil {
			return
		}
		if hold {
			tcpDrain(c)
		}
	}
}

func tcpEcho(n int) func(net.Conn) {
	return func(c net.Conn) {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		if _, err := c.Write(b); err != nil {
			return
		}
		tcpDrain(c)
	}
}

func tcpHex(value, mask string) *probespec.HexPattern {
	return &probespec.HexPattern{Value: []byte(value), Mask: []byte(mask)}
}

func TestTCP(t *testing.T) {
	tests := []struct {
		name    string
		handle  func(net.Conn)
		spec    probespec.Spec
		want    Outcome
		detail  string // Detail, when up
		errHas  string // a substring of Err, when down
		quickly bool   // must be decided well before the deadline
	}{
		{
			name:    "connect only",
			handle:  tcpDrain,
			want:    L4OK,
			detail:  "connected",
			quickly: true,
		},
		{
			name:    "send without expectation",
			handle:  tcpDrain,
			spec:    probespec.Spec{Send: []byte("PING\r\n")},
			want:    L4OK,
			detail:  "connected, 6 bytes sent",
			quickly: true,
		},
		{
			name:    "banner matches",
			handle:  tcpBanner("220 ready\r\n", true),
			spec:    probespec.Spec{Expect: regexp.MustCompile(`^220 `)},
			want:    L7OK,
			detail:  "11 bytes matched",
			quickly: true,
		},
		{
			name: "banner split across writes",
			handle: func(c net.Conn) {
				if _, err := io.WriteString(c, "220 "); err != nil {
					return
				}
				tcpBanner("ready\r\n", true)(c)
			},
			spec:    probespec.Spec{Expect: regexp.MustCompile(`^220 ready\r\n`)},
			want:    L7OK,
			quickly: true,
		},
		{
			name:    "banner mismatch then close",
			handle:  tcpBanner("220 ready\r\n", false),
			spec:    probespec.Spec{Expect: regexp.MustCompile(`^500`)},
			want:    L7RSP,
			errHas:  `"220 ready\r\n"`,
			quickly: true,
		},
		{
			name:   "banner mismatch and connection held",
			handle: tcpBanner("220 ready\r\n", true),
			spec:   probespec.Spec{Expect: regexp.MustCompile(`^500`)},
			want:   L7TOUT,
			errHas: `"220 ready\r\n"`,
		},
		{
			name:   "server never answers",
			handle: tcpDrain,
			spec:   probespec.Spec{Expect: regexp.MustCompile(`^220`)},
			want:   L7TOUT,
			errHas: "no answer",
		},
		{
			name:    "server closes at once",
			handle:  func(net.Conn) {},
			spec:    probespec.Spec{Expect: regexp.MustCompile(`.`)},
			want:    L7RSP,
			errHas:  "closed",
			quickly: true,
		},
		{
			name: "server resets",
			handle: func(c net.Conn) {
				_ = c.(*net.TCPConn).SetLinger(0)
			},
			spec:    probespec.Spec{Expect: regexp.MustCompile(`.`)},
			want:    L4CON,
			quickly: true,
		},
		{
			name:    "binary echo with wildcard nibbles",
			handle:  tcpEcho(3),
			spec:    probespec.Spec{Send: []byte("\x00\x01\xff"), ExpectHex: tcpHex("\x00\x01\xf0", "\xff\xff\xf0")},
			want:    L7OK,
			detail:  "3 bytes matched",
			quickly: true,
		},
		{
			name:    "binary echo mismatch decided without waiting",
			handle:  tcpEcho(3),
			spec:    probespec.Spec{Send: []byte("\x00\x01\xff"), ExpectHex: tcpHex("\x00\x02", "\xff\xff")},
			want:    L7RSP,
			errHas:  `"\x00\x01\xff"`,
			quickly: true,
		},
		{
			name:    "hex and regexp must both match",
			handle:  tcpBanner("220 ready\r\n", true),
			spec:    probespec.Spec{ExpectHex: tcpHex("2", "\xff"), Expect: regexp.MustCompile(`ready`)},
			want:    L7OK,
			quickly: true,
		},
		{
			name: "endless answer stops at 64 KiB",
			handle: func(c net.Conn) {
				chunk := bytes.Repeat([]byte("a"), 8192)
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			},
			spec:    probespec.Spec{Expect: regexp.MustCompile(`b`)},
			want:    L7RSP,
			errHas:  "first 65536 bytes",
			quickly: true,
		},
	}
	onLoopbacks(t, "tcp", func(t *testing.T, host string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				target := serveTCP(t, host, tt.handle)
				spec := tt.spec
				spec.Protocol = probespec.TCP
				res := probeOnce(t, spec, Options{}, target)
				checkResult(t, res, tt.want, tt.errHas)
				if tt.detail != "" && res.Detail != tt.detail {
					t.Errorf("Detail = %q, want %q", res.Detail, tt.detail)
				}
				// A reset can arrive before the dialer has seen the
				// handshake finish, so only a connection that lived
				// must have a connect time.
				if tt.want != L4CON && res.Timings.Connect <= 0 {
					t.Errorf("Timings.Connect = %v, want > 0", res.Timings.Connect)
				}
				if tt.want == L7OK && res.Timings.FirstByte <= 0 {
					t.Errorf("Timings.FirstByte = %v, want > 0", res.Timings.FirstByte)
				}
				if tt.quickly && res.Timings.Total > probeTimeout/2 {
					t.Errorf("took %v, want a decision well before the %v deadline", res.Timings.Total, probeTimeout)
				}
				if tt.want == L7TOUT && res.Timings.Total < probeTimeout*3/4 {
					t.Errorf("timed out after %v, before the %v deadline", res.Timings.Total, probeTimeout)
				}
			})
		}
	})
}

func TestTCPClosedPort(t *testing.T) {
	onLoopbacks(t, "tcp", func(t *testing.T, host string) {
		res := probeOnce(t, probespec.Spec{Protocol: probespec.TCP}, Options{}, closedTCPPort(t, host))
		checkResult(t, res, L4CON, "")
		if !errors.Is(res.Err, syscall.ECONNREFUSED) {
			t.Errorf("Err = %v, want it to wrap ECONNREFUSED", res.Err)
		}
	})
}

func TestTCPSendIsExact(t *testing.T) {
	onLoopbacks(t, "tcp", func(t *testing.T, host string) {
		got := make(chan []byte, 1)
		target := serveTCP(t, host, func(c net.Conn) {
			b, _ := io.ReadAll(c)
			got <- b
		})
		send := []byte("\x00bin\xff\r\x00")
		res := probeOnce(t, probespec.Spec{Protocol: probespec.TCP, Send: send}, Options{}, target)
		checkResult(t, res, L4OK, "")
		select {
		case b := <-got:
			if !bytes.Equal(b, send) {
				t.Errorf("server received %q, want exactly %q", b, send)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("server never saw the connection close")
		}
	})
}

func TestTCPLocalAddr(t *testing.T) {
	// All of 127.0.0.0/8 is loopback on Linux, so a second source address
	// shows that the dialer really binds LocalAddr.
	local := netip.MustParseAddr("127.0.0.2")
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	} else {
		l.Close()
	}
	from := make(chan net.Addr, 1)
	target := serveTCP(t, "127.0.0.1", func(c net.Conn) {
		from <- c.RemoteAddr()
		tcpDrain(c)
	})
	res := probeOnce(t, probespec.Spec{Protocol: probespec.TCP}, Options{LocalAddr: local}, target)
	checkResult(t, res, L4OK, "")
	select {
	case a := <-from:
		if got := addrPortOf(t, a).Addr(); got != local {
			t.Errorf("server saw source %v, want %v", got, local)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("server never accepted the connection")
	}
}

func TestTCPConnectTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	defer l.Close()
	// Shrink the accept queue to its minimum and never accept: once it is
	// full Linux drops further SYNs, so a connect hangs without any packet
	// leaving loopback.
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatalf("getting listener fd: %v", err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), 0) }); err != nil || lerr != nil {
		t.Skipf("cannot shrink the listen backlog: %v %v", err, lerr)
	}
	target := addrPortOf(t, l.Addr())
	full := false
	for range 16 {
		c, err := net.DialTimeout("tcp", target.String(), 100*time.Millisecond)
		if err != nil {
			if !isTimeout(err) {
				t.Fatalf("filling the backlog: %v", err)
			}
			full = true
			break
		}
		defer c.Close()
	}
	if !full {
		t.Skip("the listen backlog never filled, so a connect timeout cannot be made on loopback")
	}
	res := probeOnce(t, probespec.Spec{Protocol: probespec.TCP}, Options{}, target)
	checkResult(t, res, L4TOUT, "")
}

func TestTCPCancel(t *testing.T) {
	accepted := make(chan struct{})
	target := serveTCP(t, "127.0.0.1", func(c net.Conn) {
		close(accepted)
		tcpDrain(c)
	})
	p, err := New(probespec.Spec{Protocol: probespec.TCP, Expect: regexp.MustCompile(`never`)}, Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-accepted:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	res := p.Probe(ctx, target)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Probe returned %v after its context was cancelled", d)
	}
	if res.Up() || res.Err == nil {
		t.Errorf("cancelled probe = %s (%v), want a down outcome with Err", res.Outcome, res.Err)
	}
}

// TestTCPExpectBoundedByDeadline checks that matching expect= against a
// large answer ends at the probe's deadline: the answer is matched again
// as each chunk arrives, and a costly expression over 64 KiB outlasts it.
func TestTCPExpectBoundedByDeadline(t *testing.T) {
	target := serveTCP(t, "127.0.0.1", func(c net.Conn) {
		_, _ = c.Write(bytes.Repeat([]byte("a"), 64<<10))
		_, _ = c.Read(make([]byte, 1))
	})
	spec := probespec.MustParse(`tcp expect="[a-z]{250}b"`)
	spec.Timeout = costlyTimeout
	res := probeOnce(t, spec, Options{}, target)
	t.Logf("%v after %v: %s", res.Outcome, res.Timings.Total, res.Message())
	checkResult(t, res, L7TOUT, "matching answer")
}
