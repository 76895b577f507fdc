package proxy

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestFileDescriptorLimit runs the userspace relay with 100 file
// descriptors and more clients than that allows at once: the clients beyond
// the limit wait in the listen backlog, as docs/proxy.md says, and are served
// as soon as others leave; none is accepted only to be closed.
func TestFileDescriptorLimit(t *testing.T) {
	requireRoot(t)
	requireBinary(t, "prlimit", "util-linux")
	bin := pulselbBinary(t)
	tp := newTopology(t)
	tp.wrap = []string{"prlimit", "--nofile=100:100"}
	tp.startProxy(t, bin, ModeUserspace, ModeUserspace)

	const clients = 40
	type answer struct {
		i   int
		err error
	}
	answers := make(chan answer, clients)
	// Each served client holds its connection until release is closed,
	// then leaves.
	release := make(chan struct{})
	conns := make([]*net.TCPConn, clients)
	for i := range conns {
		c, err := tp.dialTCP(clientOK4, netip.AddrPortFrom(nodeIP4, echoPort), 5*time.Second)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		go func() {
			msg := fmt.Sprintf("client %02d", i)
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, err := io.WriteString(c, msg)
			if err == nil {
				b := make([]byte, len(msg))
				if _, err = io.ReadFull(c, b); err == nil && string(b) != msg {
					err = fmt.Errorf("echo %q, want %q", b, msg)
				}
			}
			answers <- answer{i, err}
			<-release
			c.Close()
		}()
	}

	// Those within the limit are served; the others wait, connected but
	// not yet accepted.
	served := map[int]bool{}
	collect := func(d time.Duration) {
		t.Helper()
		timeout := time.After(d)
		for len(served) < clients {
			select {
			case a := <-answers:
				if a.err != nil {
					t.Fatalf("client %d was not served: %v (%d served before)", a.i, a.err, len(served))
				}
				served[a.i] = true
			case <-timeout:
				return
			}
		}
	}
	collect(2 * time.Second)
	first := len(served)
	if first == 0 || first == clients {
		t.Fatalf("%d of %d clients served at once; want some, and some waiting for a free descriptor", first, clients)
	}
	t.Logf("%d of %d clients served at once with 100 file descriptors", first, clients)

	// As they leave, the waiting clients are served.
	close(release)
	collect(20 * time.Second)
	if len(served) != clients {
		t.Fatalf("%d of %d clients served after the first %d left", len(served), clients, first)
	}
	if got := tp.metric(t, `pulselb_proxy_refused_total{protocol="tcp",reason="backend"}`); got > 0 {
		t.Errorf("pulselb_proxy_refused_total{reason=backend} = %v, want 0", got)
	}
}
