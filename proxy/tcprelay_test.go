package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
)

// TestUserspaceTCPIdleTimeout checks that a relayed connection with no
// traffic either way for TCPIdleTimeout is closed, and that one with
// traffic, however sparse, stays open.
func TestUserspaceTCPIdleTimeout(t *testing.T) {
	const idle = 400 * time.Millisecond
	port := tcpBackend(t, echo)
	cfg := userspaceConfig(Port{TCP, port})
	cfg.TCPIdleTimeout = idle
	p := startProxy(t, cfg)
	target := netip.AddrPortFrom(proxyAddr, port)

	idleConn, err := dialFrom(allowedAddr, target)
	if err != nil {
		t.Fatal(err)
	}
	defer idleConn.Close()
	active, err := dialFrom(allowedAddr, target)
	if err != nil {
		t.Fatal(err)
	}
	defer active.Close()

	// The idle connection's read returns EOF once the relay closes it.
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, idleConn)
		closed <- err
	}()
	start := time.Now()
	buf := make([]byte, 1)
	for time.Since(start) < 3*idle {
		// One byte every quarter of the timeout, echoed back.
		if _, err := active.Write([]byte("x")); err != nil {
			t.Fatalf("active connection: write after %v: %v", time.Since(start), err)
		}
		_ = active.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(active, buf); err != nil {
			t.Fatalf("active connection: read after %v: %v", time.Since(start), err)
		}
		time.Sleep(idle / 4) // the client's pace, not synchronisation
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("idle connection ended with %v, want a clean close", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("idle connection still open %v after its last byte (idle timeout %v)", time.Since(start), idle)
	}
	if got := testutil.ToFloat64(p.metrics.IdleClosed.WithLabelValues(string(TCP))); got != 1 {
		t.Errorf("pulselb_proxy_idle_closed_total{protocol=tcp} = %v, want 1", got)
	}
}

// failingListener fails its first fails accepts with EMFILE, as accept(2)
// does at the file descriptor limit, then accepts from the real listener.
type failingListener struct {
	*net.TCPListener
	fails atomic.Int32
}

func (l *failingListener) AcceptTCP() (*net.TCPConn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.TCPListener.AcceptTCP()
}

// TestUserspaceTCPAcceptFailures checks that accept failures (at the file
// descriptor limit) are counted, logged a bounded number of times, and
// that the relay serves again once accepting works.
func TestUserspaceTCPAcceptFailures(t *testing.T) {
	port := tcpBackend(t, echo)
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(proxyAddr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{TCPListener: ln}
	const fails = 6
	fl.fails.Store(fails)
	m := NewMetrics()
	_, ctx := ktesting.NewTestContext(t)
	r := &tcpRelay{
		ln: fl, port: Port{TCP, port}, backend: func(netip.Addr) netip.AddrPort { return netip.AddrPortFrom(clusterIP, port) },
		dialTimeout: time.Second, metrics: m, conns: map[*net.TCPConn]*relayedConn{}, served: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.serve(ctx)
	defer r.shutdown(time.Second)

	c, err := dialFrom(allowedAddr, netip.AddrPortFrom(proxyAddr, uint16(ln.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("echo after accept failures: %q, %v", buf, err)
	}
	if got := testutil.ToFloat64(m.AcceptErrors.WithLabelValues(string(TCP), "fd-limit")); got != fails {
		t.Errorf("pulselb_proxy_accept_errors_total{protocol=tcp,reason=fd-limit} = %v, want %d", got, fails)
	}
	if got := r.acceptLog.logged; got != 1 {
		t.Errorf("logged %d of %d accept failures within the log interval, want 1", got, fails)
	}
}

// TestUserspaceTCPKeepAlive checks that the relay's end of a client's
// connection has keep-alive on, with Go's default timing, though the relay
// sets it on the listener only: the kernel copies it to every accepted
// connection.
func TestUserspaceTCPKeepAlive(t *testing.T) {
	port := tcpBackend(t, echo)
	p := startProxy(t, userspaceConfig(Port{TCP, port}))
	c, err := dialFrom(allowedAddr, netip.AddrPortFrom(proxyAddr, port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, "hi"); err != nil {
		t.Fatal(err)
	}
	r := p.tcp[0]
	var accepted *net.TCPConn
	r.mu.Lock()
	for conn, rc := range r.conns {
		if rc.client {
			accepted = conn
		}
	}
	r.mu.Unlock()
	if accepted == nil {
		t.Fatal("the relay holds no client connection")
	}
	raw, err := accepted.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
	} {
		var got int
		var gerr error
		if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil || gerr != nil {
			t.Fatalf("%s: %v %v", o.name, err, gerr)
		}
		if got != o.want {
			t.Errorf("accepted connection: %s = %d, want %d", o.name, got, o.want)
		}
	}
}
