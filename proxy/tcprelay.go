package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// tcpRelay accepts TCP connections on one port and relays each to the
// ClusterIP.
type tcpRelay struct {
	ln          *net.TCPListener
	port        Port
	ranges      SourceRanges
	backend     func(client netip.Addr) netip.AddrPort
	dialTimeout time.Duration
	metrics     *Metrics

	served chan struct{}  // closed when serve returns
	wg     sync.WaitGroup // one per connection being relayed
	mu     sync.Mutex
	conns  map[*net.TCPConn]struct{} // both ends of every relayed connection
	// forced is set once shutdown has closed conns; a connection made after
	// that is closed at once.
	forced bool
}

// serve accepts connections until the listener is closed.
func (r *tcpRelay) serve(ctx context.Context) {
	defer close(r.served)
	logger := klog.FromContext(ctx)
	backoff := 5 * time.Millisecond
	for {
		c, err := r.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or a similar passing condition: wait
			// rather than spin, as net/http does.
			logger.Error(err, "Accepting TCP connection failed", "port", r.port.String())
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			// Not cancelled with ctx: a connection accepted before a
			// shutdown may still reach its backend while the relay drains.
			r.relay(context.WithoutCancel(ctx), c)
		}()
	}
}

// track adds c to the connections a forced shutdown closes. It returns false,
// and c must be closed, when that shutdown has already happened.
func (r *tcpRelay) track(c *net.TCPConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.forced {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *tcpRelay) untrack(c *net.TCPConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
}

// relay copies between client and a new backend connection until both sides
// have closed. A half-close is passed on: when the client shuts down its
// sending side, the backend gets a FIN and may go on answering.
func (r *tcpRelay) relay(ctx context.Context, client *net.TCPConn) {
	proto := string(TCP)
	src := tcpAddrPort(client.RemoteAddr())
	if !r.ranges.Allows(src.Addr()) {
		r.metrics.Refused.WithLabelValues(proto, "source-range").Inc()
		klog.FromContext(ctx).V(4).Info("Refused client outside source ranges", "client", src, "port", r.port.String())
		// A reset rather than a FIN, so the client sees a refusal, not an
		// empty answer.
		_ = client.SetLinger(0)
		client.Close()
		return
	}
	defer client.Close()
	if !r.track(client) {
		return
	}
	defer r.untrack(client)

	dst := r.backend(src.Addr())
	d := net.Dialer{Timeout: r.dialTimeout}
	bc, err := d.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		r.metrics.Refused.WithLabelValues(proto, "backend").Inc()
		klog.FromContext(ctx).V(2).Info("Connecting to ClusterIP failed", "client", src, "backend", dst, "err", err)
		_ = client.SetLinger(0)
		return
	}
	backend := bc.(*net.TCPConn)
	defer backend.Close()
	if !r.track(backend) {
		return
	}
	defer r.untrack(backend)

	r.metrics.Connections.WithLabelValues(proto).Inc()
	active := r.metrics.Active.WithLabelValues(proto)
	active.Inc()
	defer active.Dec()

	// io.Copy between two *net.TCPConn uses splice(2): the bytes move
	// through a kernel pipe and never enter this process.
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.pipe(backend, client, "in")
	}()
	r.pipe(client, backend, "out")
	<-done
}

// pipe copies src to dst, then passes the end of src on as a half-close of
// dst. On an error (a reset, or a forced shutdown) it closes both ends so the
// other direction stops too.
func (r *tcpRelay) pipe(dst, src *net.TCPConn, direction string) {
	n, err := io.Copy(dst, src)
	r.metrics.Bytes.WithLabelValues(string(TCP), direction).Add(float64(n))
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	if err := dst.CloseWrite(); err != nil {
		dst.Close()
		src.Close()
	}
}

// shutdown stops accepting, waits up to drain for the open connections to
// end by themselves, then closes the rest.
func (r *tcpRelay) shutdown(drain time.Duration) {
	r.ln.Close()
	// No wg.Add can race with the Wait below once serve has returned.
	<-r.served
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	r.mu.Lock()
	r.forced = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	<-done
}

func tcpAddrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
