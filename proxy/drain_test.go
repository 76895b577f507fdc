package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// waitPhase waits until p is in phase ph, by its metric, which a dashboard
// would show.
func waitPhase(t *testing.T, p *runningProxy, ph Phase) {
	t.Helper()
	waitFor(t, 5*time.Second, "phase "+string(ph), func() bool {
		return testutil.ToFloat64(p.metrics.Phase.WithLabelValues(string(ph))) == 1
	})
}

// stopped waits for Run to return after a stop at start, fails the test
// when it returns an error, and returns how long after start it returned.
func (p *runningProxy) stopped(t *testing.T, start time.Time) time.Duration {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the stop")
	}
	p.done <- nil // for the cleanup
	return time.Since(start)
}

// withoutDNAT returns the fake's dump without the DNAT rules: what the drain
// keeps.
func withoutDNAT(dump []string) []string {
	return slices.DeleteFunc(slices.Clone(dump), func(r string) bool { return strings.Contains(r, "-j DNAT") })
}

// TestIPTablesDrainPhases follows the rules through a shutdown with a drain
// delay: all kept, and restored by the resync, during the delay; only the
// DNAT rules gone during the drain, the rest still restored; nothing left
// after the drain timeout.
func TestIPTablesDrainPhases(t *testing.T) {
	ipt := newFakeIPTables()
	cfg := fakeIPTablesConfig(t, ipt)
	cfg.Ports = []Port{{TCP, 80}, {UDP, 53}}
	cfg.SourceRanges = SourceRanges{netip.MustParsePrefix("192.0.2.0/24")}
	cfg.DrainDelay = time.Second
	cfg.DrainTimeout = 500 * time.Millisecond
	p := startProxy(t, cfg)
	all := ipt.dump()
	established := withoutDNAT(all)
	if len(established) == len(all) || len(established) == 0 {
		t.Fatalf("no DNAT rule, or nothing but DNAT rules, in:\n%s", strings.Join(all, "\n"))
	}
	clear := func(chain string) func(map[Chain][]string) {
		return func(c map[Chain][]string) {
			for k := range c {
				if k.Name == chain {
					c[k] = nil
				}
			}
		}
	}

	start := time.Now()
	p.stop()
	waitPhase(t, p, PhaseDelay)
	if got := ipt.dump(); !slices.Equal(got, all) {
		t.Errorf("rules changed when the drain delay started:\n%s", strings.Join(got, "\n"))
	}
	ipt.edit(clear(chainPrerouting))
	waitFor(t, 5*time.Second, "the resync to restore the DNAT rules during the delay", func() bool {
		return slices.Equal(ipt.dump(), all)
	})
	if ph := p.Phase(); ph != PhaseDelay {
		t.Fatalf("phase %q once the rules were restored, want %q (is the machine too slow for a 1s delay?)", ph, PhaseDelay)
	}

	waitPhase(t, p, PhaseDrain)
	waitFor(t, 5*time.Second, "the DNAT rules to go", func() bool { return slices.Equal(ipt.dump(), established) })
	if d := time.Since(start); d < cfg.DrainDelay {
		t.Errorf("new connections stopped %v after the stop, before the drain delay %v", d, cfg.DrainDelay)
	}
	ipt.edit(clear(chainForward))
	waitFor(t, 5*time.Second, "the resync to restore the FORWARD rules during the drain", func() bool {
		return slices.Equal(ipt.dump(), established)
	})

	d := p.stopped(t, start)
	if got := ipt.dump(); len(got) != 0 {
		t.Errorf("rules left after the drain:\n%s", strings.Join(got, "\n"))
	}
	if want := cfg.DrainDelay + cfg.DrainTimeout; d < want {
		t.Errorf("Run returned %v after the stop, before the drain delay and timeout, %v", d, want)
	}
	// The switch to the drain's rules is no repair; the two edits are.
	if n := testutil.ToFloat64(p.metrics.RuleRepairs.WithLabelValues("ipv4")); n != 2 {
		t.Errorf("rule_repairs_total = %v, want 2", n)
	}
}

// TestIPTablesNoDrainDelay checks that without a drain delay the rules go at
// once on shutdown, as before the delay existed: the drain timeout is not
// waited.
func TestIPTablesNoDrainDelay(t *testing.T) {
	ipt := newFakeIPTables()
	cfg := fakeIPTablesConfig(t, ipt)
	cfg.DrainTimeout = time.Minute
	p := startProxy(t, cfg)
	start := time.Now()
	p.stop()
	if d := p.stopped(t, start); d > 10*time.Second {
		t.Errorf("Run returned %v after the stop, want at once", d)
	}
	if got := ipt.dump(); len(got) != 0 {
		t.Errorf("rules left after shutdown:\n%s", strings.Join(got, "\n"))
	}
	if n := testutil.ToFloat64(p.metrics.Phase.WithLabelValues(string(PhaseDrain))); n != 0 {
		t.Errorf("phase{drain} = %v, want 0: there is no drain without a delay", n)
	}
}

// TestUserspaceDrainDelay checks the phases in userspace mode: during the
// delay a new TCP connection and a new UDP session are relayed and /healthz
// still answers 200; after it new ones are refused while the open
// connection and session carry on until the drain timeout.
func TestUserspaceDrainDelay(t *testing.T) {
	tcpPort := tcpBackend(t, echo)
	udpPort := udpEcho(t)
	cfg := userspaceConfig(Port{TCP, tcpPort}, Port{UDP, udpPort})
	cfg.DrainDelay = time.Second
	cfg.DrainTimeout = 2 * time.Second
	p := startProxy(t, cfg)
	tcpTarget := netip.AddrPortFrom(proxyAddr, tcpPort)
	udpTarget := netip.AddrPortFrom(proxyAddr, udpPort)
	srv := p.httpServer(t)

	open := openEcho(t, func() (*net.TCPConn, error) { return dialFrom(allowedAddr, tcpTarget) })
	session, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(allowedAddr, 0)), net.UDPAddrFromAddrPort(udpTarget))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if err := udpRoundTrip(session, "before"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	p.stop()
	waitPhase(t, p, PhaseDelay)
	t.Run("delay", func(t *testing.T) {
		c, err := dialFrom(allowedAddr, tcpTarget)
		if err != nil {
			t.Fatalf("new connection during the drain delay: %v", err)
		}
		defer c.Close()
		if err := roundTrip(c, "during the delay"); err != nil {
			t.Errorf("new connection during the drain delay: %v", err)
		}
		if got, err := udpExchange(t, allowedAddr, udpTarget, []byte("new session"), 5*time.Second); err != nil || string(got) != "new session" {
			t.Errorf("new UDP session during the drain delay: %q, %v", got, err)
		}
		if code, body := get(t, srv.URL+"/healthz"); code != 200 || !strings.Contains(body, "phase=delay") {
			t.Errorf("GET /healthz = %d %q during the delay, want 200 with phase=delay", code, body)
		}
		if ph := p.Phase(); ph != PhaseDelay {
			t.Fatalf("phase %q after the checks, want %q (is the machine too slow for a 1s delay?)", ph, PhaseDelay)
		}
	})

	t.Run("drain", func(t *testing.T) {
		waitRefused(t, 5*time.Second, func() (*net.TCPConn, error) { return dialFrom(allowedAddr, tcpTarget) })
		if d := time.Since(start); d < cfg.DrainDelay {
			t.Errorf("new connections refused %v after the stop, before the drain delay %v", d, cfg.DrainDelay)
		}
		if p.Phase() != PhaseDrain {
			t.Errorf("phase %q while refusing, want %q", p.Phase(), PhaseDrain)
		}
		if _, err := udpExchange(t, allowedAddr, udpTarget, []byte("too late"), 300*time.Millisecond); err == nil {
			t.Error("a new UDP session was opened during the drain")
		}
		if err := roundTrip(open, "during the drain"); err != nil {
			t.Errorf("connection opened before the stop, during the drain: %v", err)
		}
		if err := udpRoundTrip(session, "during the drain"); err != nil {
			t.Errorf("UDP session opened before the stop, during the drain: %v", err)
		}
	})

	// The open connection and session outlast the drain timeout, so Run
	// ends them then.
	if d, want := p.stopped(t, start), cfg.DrainDelay+cfg.DrainTimeout; d < want || d > want+3*time.Second {
		t.Errorf("Run returned %v after the stop, want about the drain delay and timeout, %v", d, want)
	}
	wantClosed(t, open)
}

// wantClosed fails the test unless the proxy has closed c.
func wantClosed(t *testing.T, c *net.TCPConn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after the drain timeout")
	}
}

// openEcho opens a connection to an echo server with dial, checks that it
// echoes, and closes it when the test ends.
func openEcho(t *testing.T, dial func() (*net.TCPConn, error)) *net.TCPConn {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitRefused waits up to timeout for dial to fail, and fails the test
// unless it fails with a refusal within a second: a client told at once
// tries another address, one left waiting times out. A reset counts: a
// connection the kernel queued just before the listener closed gets one.
func waitRefused(t *testing.T, timeout time.Duration, dial func() (*net.TCPConn, error)) {
	t.Helper()
	waitFor(t, timeout, "new connections to be refused", func() bool {
		start := time.Now()
		c, err := dial()
		if err == nil {
			c.Close()
			return false
		}
		refused := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
		if d := time.Since(start); !refused || d > time.Second {
			t.Fatalf("new connection: %v after %v, want refused at once", err, d)
		}
		return true
	})
}

// roundTrip sends msg on an echo connection and reads it back.
func roundTrip(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo " + string(buf) + ", want " + msg)
	}
	return nil
}

// udpRoundTrip is roundTrip for a connected UDP socket: one datagram.
func udpRoundTrip(c *net.UDPConn, msg string) error {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg)+1)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != msg {
		return errors.New("echo " + string(buf[:n]) + ", want " + msg)
	}
	return nil
}
