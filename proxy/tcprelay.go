package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// tcpListener is what a tcpRelay accepts from: a *net.TCPListener, which
// tests wrap to make accept fail.
type tcpListener interface {
	AcceptTCP() (*net.TCPConn, error)
	Close() error
	Addr() net.Addr
}

// tcpRelay accepts TCP connections on one port and relays each to the
// ClusterIP.
type tcpRelay struct {
	ln      tcpListener
	port    Port
	allow   *atomic.Pointer[AllowList]
	backend func(client netip.Addr) netip.AddrPort
	// header, when set, is the PROXY protocol version written to the
	// backend before the client's first byte.
	header      HeaderVersion
	dialTimeout time.Duration
	// idleTimeout, when positive, closes a connection that carried no data
	// either way for that long.
	idleTimeout time.Duration
	metrics     *Metrics
	// m holds the series of metrics every connection updates, looked up
	// once by serve rather than by label values per connection.
	m relayMetrics

	// slots holds a token per relayed connection; its capacity is what the
	// file descriptor limit allows (connectionSlots), shared by every TCP
	// relay of the proxy. nil means no bound.
	slots chan struct{}
	// stopping is closed by shutdown, so that a serve waiting for a slot
	// returns.
	stopping chan struct{}
	// pauseLog limits the logging of pauses at the limit.
	pauseLog rateLog

	served chan struct{}  // closed when serve returns
	wg     sync.WaitGroup // one per connection being relayed
	mu     sync.Mutex
	// conns holds both ends of every relayed connection.
	conns map[*net.TCPConn]*relayedConn
	// forced is set once shutdown has closed conns; a connection made after
	// that is closed at once.
	forced bool
	// acceptLog limits the logging of accept failures; only serve uses it.
	acceptLog rateLog
}

// relayMetrics are the TCP series of Metrics a relay updates per
// connection.
type relayMetrics struct {
	connections                  prometheus.Counter
	active                       prometheus.Gauge
	bytesIn, bytesOut            prometheus.Counter
	refusedRange, refusedBackend prometheus.Counter
}

func newRelayMetrics(m *Metrics) relayMetrics {
	proto := string(TCP)
	return relayMetrics{
		connections:    m.Connections.WithLabelValues(proto),
		active:         m.Active.WithLabelValues(proto),
		bytesIn:        m.Bytes.WithLabelValues(proto, "in"),
		bytesOut:       m.Bytes.WithLabelValues(proto, "out"),
		refusedRange:   m.Refused.WithLabelValues(proto, "source-range"),
		refusedBackend: m.Refused.WithLabelValues(proto, "backend"),
	}
}

// relayedConn is one end of a relayed connection.
type relayedConn struct {
	// client is true for the client's end, which the idle sweep checks.
	client   bool
	accepted time.Time
}

// The keep-alive of a relayed client's connection, Go's defaults for
// accepted connections: the first probe after 15 s without traffic, then
// every 15 s, closed after 9 unanswered.
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// relayListenConfig opens the relays' listeners with keep-alive set on the
// listening socket, which every accepted connection inherits from it, in
// place of the four setsockopt calls Go makes per accepted connection.
var relayListenConfig = net.ListenConfig{
	KeepAlive: -1,
	Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range []struct{ level, opt, value int }{
				{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
				{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle / time.Second)},
				{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval / time.Second)},
				{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
			} {
				if serr = unix.SetsockoptInt(int(fd), o.level, o.opt, o.value); serr != nil {
					serr = fmt.Errorf("setting keep-alive option %d on the listener: %w", o.opt, serr)
					return
				}
			}
		})
		return errors.Join(err, serr)
	},
}

// acceptLogInterval is the least time between two logs of accept failures:
// at the file descriptor limit every accept fails, and a log line per
// failure would flood the log and use the disk the node may need.
const acceptLogInterval = time.Minute

// rateLog decides which of a stream of repeated failures to log: the first,
// then at most one per acceptLogInterval, which reports how many were not
// logged in between.
type rateLog struct {
	last       time.Time
	suppressed int
	// logged counts the failures logged, for tests.
	logged int
}

// note records a failure at now. It returns whether to log it, and how many
// failures went unlogged since the last log.
func (l *rateLog) note(now time.Time) (bool, int) {
	if !l.last.IsZero() && now.Sub(l.last) < acceptLogInterval {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.logged++
	return true, n
}

// acceptErrorReason classifies an accept failure for
// pulselb_proxy_accept_errors_total: "fd-limit" when the process (EMFILE)
// or the system (ENFILE) is out of file descriptors, else "other".
func acceptErrorReason(err error) string {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return "fd-limit"
	}
	return "other"
}

// serve accepts connections until the listener is closed.
func (r *tcpRelay) serve(ctx context.Context) {
	defer close(r.served)
	logger := klog.FromContext(ctx)
	r.m = newRelayMetrics(r.metrics)
	if r.idleTimeout > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go r.sweepIdle(ctx, stop)
	}
	const minBackoff = 5 * time.Millisecond
	backoff := minBackoff
	for {
		// A connection is accepted only with the descriptors to relay it:
		// at the limit, an accepted client could only be closed again
		// (its backend's socket would fail), while one left in the backlog
		// is served as soon as another connection ends.
		if !r.acquire(ctx) {
			return
		}
		c, err := r.ln.AcceptTCP()
		if err != nil {
			r.release()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			reason := acceptErrorReason(err)
			r.metrics.AcceptErrors.WithLabelValues(string(TCP), reason).Inc()
			if ok, unlogged := r.acceptLog.note(time.Now()); ok {
				logger.Error(err, "Accepting TCP connection failed; new connections wait in the backlog", "port", r.port.String(),
					"reason", reason, "unloggedFailures", unlogged, "openConnections", r.open())
			}
			// Out of file descriptors or a similar passing condition: wait
			// rather than spin, as net/http does, while clients wait in the
			// listen backlog.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = minBackoff
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.release()
			// Not cancelled with ctx: a connection accepted before a
			// shutdown may still reach its backend while the relay drains.
			r.relay(context.WithoutCancel(ctx), c)
		}()
	}
}

// acquire takes a connection slot, waiting while every slot is held. It
// returns false when the relay shuts down meanwhile.
func (r *tcpRelay) acquire(ctx context.Context) bool {
	if r.slots == nil {
		return true
	}
	select {
	case r.slots <- struct{}{}:
		return true
	default:
	}
	r.metrics.AcceptPaused.WithLabelValues(string(TCP)).Inc()
	if ok, unlogged := r.pauseLog.note(time.Now()); ok {
		klog.FromContext(ctx).Info("Not accepting TCP connections at the file descriptor limit; new connections wait in the backlog",
			"port", r.port.String(), "connectionLimit", cap(r.slots), "unloggedPauses", unlogged)
	}
	select {
	case r.slots <- struct{}{}:
		return true
	case <-r.stopping:
		return false
	}
}

// release gives back a slot acquire took.
func (r *tcpRelay) release() {
	if r.slots != nil {
		<-r.slots
	}
}

// open returns the number of relayed connections.
func (r *tcpRelay) open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns) / 2
}

// track adds c to the connections a forced shutdown closes; client says
// which end it is. It returns false, and c must be closed, when that
// shutdown has already happened.
func (r *tcpRelay) track(c *net.TCPConn, client bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.forced {
		return false
	}
	r.conns[c] = &relayedConn{client: client, accepted: time.Now()}
	return true
}

// sweepIdle closes, every quarter of the idle timeout (at most every
// minute), the connections idle for at least the timeout, until stop is
// closed. The kernel splices the bytes without pulselb seeing them, so
// idleness comes from the client socket's TCP_INFO: the time since it last
// received and last sent data. A connection is closed between one and one
// and a quarter timeouts after its last byte.
func (r *tcpRelay) sweepIdle(ctx context.Context, stop <-chan struct{}) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(min(r.idleTimeout/4, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var idle []*net.TCPConn
		r.mu.Lock()
		for c, rc := range r.conns {
			if rc.client && time.Since(rc.accepted) >= r.idleTimeout && idleFor(c) >= r.idleTimeout {
				idle = append(idle, c)
			}
		}
		r.mu.Unlock()
		for _, c := range idle {
			r.metrics.IdleClosed.WithLabelValues(string(TCP)).Inc()
			logger.V(4).Info("Closing idle connection", "client", tcpAddrPort(c.RemoteAddr()), "port", r.port.String(), "idleTimeout", r.idleTimeout)
			// The relay's copies fail and close the backend's end too.
			c.Close()
		}
	}
}

// cutDisallowed closes the connections of clients a does not allow; the
// relay's copies then fail and close the backend's ends too.
func (r *tcpRelay) cutDisallowed(ctx context.Context, a AllowList) {
	var cut []*net.TCPConn
	r.mu.Lock()
	for c, rc := range r.conns {
		if rc.client && !a.Allows(tcpAddrPort(c.RemoteAddr()).Addr()) {
			cut = append(cut, c)
		}
	}
	r.mu.Unlock()
	for _, c := range cut {
		r.metrics.Refused.WithLabelValues(string(TCP), "source-range").Inc()
		klog.FromContext(ctx).V(4).Info("Closing connection of a client the allow-list no longer allows", "client", tcpAddrPort(c.RemoteAddr()), "port", r.port.String())
		_ = c.SetLinger(0)
		c.Close()
	}
}

// idleFor returns how long c has carried no data in either direction, or
// zero when the kernel does not say.
func idleFor(c *net.TCPConn) time.Duration {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	cerr := raw.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if cerr != nil || err != nil {
		return 0
	}
	return time.Duration(min(info.Last_data_recv, info.Last_data_sent)) * time.Millisecond
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
	src := tcpAddrPort(client.RemoteAddr())
	if !allows(r.allow, src.Addr()) {
		r.m.refusedRange.Inc()
		klog.FromContext(ctx).V(4).Info("Refused client outside the allow-list", "client", src, "port", r.port.String())
		// A reset rather than a FIN, so the client sees a refusal, not an
		// empty answer.
		_ = client.SetLinger(0)
		client.Close()
		return
	}
	defer client.Close()
	if !r.track(client, true) {
		return
	}
	defer r.untrack(client)

	dst := r.backend(src.Addr())
	d := net.Dialer{Timeout: r.dialTimeout}
	bc, err := d.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		r.m.refusedBackend.Inc()
		klog.FromContext(ctx).V(2).Info("Connecting to ClusterIP failed", "client", src, "backend", dst, "err", err)
		_ = client.SetLinger(0)
		return
	}
	backend := bc.(*net.TCPConn)
	defer backend.Close()
	if !r.track(backend, false) {
		return
	}
	defer r.untrack(backend)
	if r.header != HeaderNone && !r.sendHeader(ctx, client, backend, src) {
		_ = client.SetLinger(0)
		return
	}

	r.m.connections.Inc()
	r.m.active.Inc()
	defer r.m.active.Dec()

	// io.Copy between two *net.TCPConn uses splice(2): the bytes move
	// through a kernel pipe and never enter this process.
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.pipe(backend, client, r.m.bytesIn)
	}()
	r.pipe(client, backend, r.m.bytesOut)
	<-done
}

// firstBytesLen is how much of what the client has sent by the time the
// backend's connection is up goes out with the header: a TLS ClientHello or
// an HTTP request's head fits, and the rest follows through the splice.
const firstBytesLen = 4096

// headerBufs holds the buffers of sendHeader, each maxHeaderLen +
// firstBytesLen long.
var headerBufs = sync.Pool{New: func() any {
	b := make([]byte, maxHeaderLen+firstBytesLen)
	return &b
}}

// sendHeader writes the PROXY protocol header that tells the backend the
// client's address, src, and the address the client connected to,
// together with what the client has sent already: one write and one
// segment rather than two, and the backend reads both at once. It does
// not wait for the client, whose protocol may have the server speak first.
// It reports whether the header went out; when it did not, the connection
// is not relayed, as the backend would take the client's bytes for a
// header.
func (r *tcpRelay) sendHeader(ctx context.Context, client, backend *net.TCPConn, src netip.AddrPort) bool {
	bp := headerBufs.Get().(*[]byte)
	defer headerBufs.Put(bp)
	h, err := appendHeader((*bp)[:0], r.header, src, tcpAddrPort(client.LocalAddr()))
	if err == nil {
		var n int
		if n, err = readReady(client, (*bp)[len(h):]); err != nil {
			// The client is gone before anything reached the backend.
			klog.FromContext(ctx).V(4).Info("Client failed before the PROXY protocol header went out", "client", src, "port", r.port.String(), "err", err)
			return false
		}
		r.m.bytesIn.Add(float64(n))
		// A new connection's send buffer takes the header at once.
		_ = backend.SetWriteDeadline(time.Now().Add(r.dialTimeout))
		_, err = backend.Write((*bp)[:len(h)+n])
		_ = backend.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		r.m.refusedBackend.Inc()
		klog.FromContext(ctx).V(2).Info("Sending the PROXY protocol header failed", "client", src, "port", r.port.String(), "err", err)
		return false
	}
	return true
}

// readReady reads into buf what c has received and not yet read, without
// waiting: 0 when nothing has arrived or the client has sent its FIN (the
// splice then finds the same). An error means the connection failed.
func readReady(c *net.TCPConn, buf []byte) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = unix.Read(int(fd), buf)
			if rerr != unix.EINTR {
				break
			}
		}
		// true: one attempt, never a wait for readiness.
		return true
	}); err != nil {
		return 0, err
	}
	if rerr == unix.EAGAIN || n < 0 {
		return 0, nil
	}
	return n, rerr
}

// pipe copies src to dst, then passes the end of src on as a half-close of
// dst. On an error (a reset, or a forced shutdown) it closes both ends so the
// other direction stops too.
func (r *tcpRelay) pipe(dst, src *net.TCPConn, bytes prometheus.Counter) {
	n, err := io.Copy(dst, src)
	bytes.Add(float64(n))
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
	if r.stopping != nil {
		close(r.stopping)
	}
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
