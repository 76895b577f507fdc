package prober

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// The loopback servers and the probe-and-check step that every protocol's
// tests share.

// probeTimeout bounds every probe made with probeOnce.
const probeTimeout = 300 * time.Millisecond

// costlyTimeout is the deadline of probes whose matching is made to
// outlast it: short enough that matching 64 KiB takes several times as
// long even without the race detector, long enough to read the answer.
const costlyTimeout = 50 * time.Millisecond

// loopbacks are the loopback hosts the tcp, udp, dns and mysql cases run against.
var loopbacks = []struct{ name, host string }{
	{"ipv4", "127.0.0.1"},
	{"ipv6", "::1"},
}

// requireLoopback skips the test when host cannot be bound on network.
func requireLoopback(t *testing.T, network, host string) {
	t.Helper()
	addr := net.JoinHostPort(host, "0")
	var c io.Closer
	var err error
	if strings.HasPrefix(network, "udp") {
		c, err = net.ListenPacket(network, addr)
	} else {
		c, err = net.Listen(network, addr)
	}
	if err != nil {
		t.Skipf("%s on %s unavailable: %v", network, host, err)
	}
	c.Close()
}

// addrPortOf converts a listener address to the target a Prober takes.
func addrPortOf(t *testing.T, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatalf("parsing listener address %s: %v", a, err)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// listenTCP listens on host (an IP) port 0 until the test ends, skipping the
// test when host is IPv6 and IPv6 loopback is unavailable.
func listenTCP(t *testing.T, host string) (net.Listener, netip.AddrPort) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		if strings.Contains(host, ":") {
			t.Skipf("IPv6 loopback unavailable: %v", err)
		}
		t.Fatalf("listening on %s: %v", host, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln, addrPortOf(t, ln.Addr())
}

// closedTCPPort returns a loopback port that nothing listens on.
func closedTCPPort(t *testing.T, host string) netip.AddrPort {
	t.Helper()
	// Hold the port with the client end of a connection for the test's
	// life: nothing listens on it, so a connection to it is refused, and
	// no other test, of this package or another running in parallel, can
	// bind it and accept, as it could a port merely closed.
	ln, peer := listenTCP(t, host)
	c, err := net.Dial("tcp", peer.String())
	if err != nil {
		t.Fatalf("holding a TCP port: %v", err)
	}
	t.Cleanup(func() { c.Close(); ln.Close() })
	return addrPortOf(t, c.LocalAddr())
}

// serveTCP listens on host and runs handle on every connection, which it
// closes afterwards; a handler that forgets to return ends after five
// seconds. When the test ends it closes the listener and every open
// connection and waits for the handlers.
func serveTCP(t *testing.T, host string, handle func(net.Conn)) netip.AddrPort {
	t.Helper()
	ln, addr := listenTCP(t, host)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					_ = c.Close()
				}()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				handle(c)
			})
		}
	})
	return addr
}

// probeOnce builds the prober for spec, probes target once with a deadline
// of spec.Timeout, else probeTimeout, and checks the invariants every Result
// keeps.
func probeOnce(t *testing.T, spec probespec.Spec, opts Options, target netip.AddrPort) Result {
	t.Helper()
	p, err := New(spec, opts)
	if err != nil {
		t.Fatalf("New(%v): %v", spec.Protocol, err)
	}
	timeout := probeTimeout
	if spec.Timeout > 0 {
		timeout = spec.Timeout
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	res := p.Probe(ctx, target)
	elapsed := time.Since(start)
	if res.Outcome == OutcomeUnknown {
		t.Errorf("Probe returned OutcomeUnknown")
	}
	if res.Up() != (res.Err == nil) {
		t.Errorf("outcome %s with Err %v: Err must be set exactly when down", res.Outcome, res.Err)
	}
	if res.Timings.Total <= 0 || res.Timings.Total > elapsed {
		t.Errorf("Timings.Total = %v, want in (0, %v]", res.Timings.Total, elapsed)
	}
	// The race detector slows everything; the margin only has to catch a
	// probe that ignores its deadline.
	if elapsed > timeout+250*time.Millisecond {
		t.Errorf("Probe took %v with a %v deadline", elapsed, timeout)
	}
	return res
}

// checkResult fails the test unless res has outcome want and, when errHas
// is set, an error containing it.
func checkResult(t *testing.T, res Result, want Outcome, errHas string) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("outcome = %s (%v), want %s", res.Outcome, res.Message(), want)
	}
	if errHas != "" && (res.Err == nil || !strings.Contains(res.Err.Error(), errHas)) {
		t.Errorf("Err = %v, want it to contain %q", res.Err, errHas)
	}
}

// onLoopbacks runs f as a subtest on each loopback host, skipping the hosts
// that network cannot bind.
func onLoopbacks(t *testing.T, network string, f func(t *testing.T, host string)) {
	t.Helper()
	for _, lo := range loopbacks {
		t.Run(lo.name, func(t *testing.T) {
			requireLoopback(t, network, lo.host)
			f(t, lo.host)
		})
	}
}
