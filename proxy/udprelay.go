package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// maxDatagram is the largest UDP payload, so no datagram is ever truncated.
const maxDatagram = 65535

// udpRelay receives datagrams on one port and relays each client's to the
// ClusterIP through a socket of its own (a session), so the backend's answers
// find their way back to that client. A session ends after idleTimeout
// without a datagram in either direction.
type udpRelay struct {
	conn        *net.UDPConn
	port        Port
	allow       *atomic.Pointer[AllowList]
	backend     func(client netip.Addr) netip.AddrPort
	idleTimeout time.Duration
	maxSessions int
	metrics     *Metrics

	wg       sync.WaitGroup // serve and one per session
	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpSession
	draining bool // no new sessions
}

type udpSession struct {
	client   netip.AddrPort // as received, so answers go back the same way
	upstream *net.UDPConn   // connected to the backend
	last     atomic.Int64   // unix nanoseconds of the last datagram either way
}

// serve reads client datagrams until the socket is closed.
func (r *udpRelay) serve(ctx context.Context) {
	defer r.wg.Done()
	logger := klog.FromContext(ctx)
	proto := string(UDP)
	in := r.metrics.Bytes.WithLabelValues(proto, "in")
	buf := make([]byte, maxDatagram)
	for {
		n, client, err := r.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			logger.Error(err, "Reading UDP datagram failed", "port", r.port.String())
			continue
		}
		s := r.session(ctx, client)
		if s == nil {
			continue
		}
		s.last.Store(time.Now().UnixNano())
		// A write error is an ICMP error from an earlier datagram
		// (ECONNREFUSED) or a full buffer; UDP may drop either way.
		if _, err := s.upstream.Write(buf[:n]); err == nil {
			in.Add(float64(n))
		}
	}
}

// session returns the client's session, opening one if allowed, or nil when
// the datagram is to be dropped.
func (r *udpRelay) session(ctx context.Context, client netip.AddrPort) *udpSession {
	proto := string(UDP)
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sessions[client]; ok {
		return s
	}
	if r.draining {
		return nil
	}
	src := client.Addr().Unmap()
	if !allows(r.allow, src) {
		r.metrics.Refused.WithLabelValues(proto, "source-range").Inc()
		klog.FromContext(ctx).V(4).Info("Refused client outside the allow-list", "client", client, "port", r.port.String())
		return nil
	}
	if len(r.sessions) >= r.maxSessions {
		r.metrics.Refused.WithLabelValues(proto, "session-limit").Inc()
		return nil
	}
	dst := r.backend(src)
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		r.metrics.Refused.WithLabelValues(proto, "backend").Inc()
		klog.FromContext(ctx).V(2).Info("Opening UDP session to ClusterIP failed", "client", client, "backend", dst, "err", err)
		return nil
	}
	s := &udpSession{client: client, upstream: up}
	s.last.Store(time.Now().UnixNano())
	r.sessions[client] = s
	r.metrics.Connections.WithLabelValues(proto).Inc()
	r.metrics.Active.WithLabelValues(proto).Inc()
	r.wg.Add(1)
	go r.answer(s)
	return s
}

// answer relays the backend's datagrams to the client until the session has
// been idle for idleTimeout or its socket is closed.
func (r *udpRelay) answer(s *udpSession) {
	defer r.wg.Done()
	defer r.end(s)
	out := r.metrics.Bytes.WithLabelValues(string(UDP), "out")
	buf := make([]byte, maxDatagram)
	// The deadline is moved only when it passes, not on every datagram,
	// which keeps the per-datagram cost to one read and one write.
	_ = s.upstream.SetReadDeadline(time.Unix(0, s.last.Load()).Add(r.idleTimeout))
	for {
		n, err := s.upstream.Read(buf)
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				idleUntil := time.Unix(0, s.last.Load()).Add(r.idleTimeout)
				if !time.Now().Before(idleUntil) {
					return
				}
				_ = s.upstream.SetReadDeadline(idleUntil)
				continue
			case errors.Is(err, net.ErrClosed):
				return
			default:
				// ECONNREFUSED: the backend port is closed just now. The
				// client learns nothing more from UDP without a proxy.
				continue
			}
		}
		s.last.Store(time.Now().UnixNano())
		if _, err := r.conn.WriteToUDPAddrPort(buf[:n], s.client); err == nil {
			out.Add(float64(n))
		}
	}
}

// end removes s from the session table and closes its socket.
func (r *udpRelay) end(s *udpSession) {
	r.mu.Lock()
	if r.sessions[s.client] == s {
		delete(r.sessions, s.client)
		r.metrics.Active.WithLabelValues(string(UDP)).Dec()
	}
	r.mu.Unlock()
	s.upstream.Close()
}

// shutdown stops opening sessions, lets the open ones carry on for up to
// drain (they end by going idle), then closes everything.
func (r *udpRelay) shutdown(drain time.Duration) {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	deadline := time.Now().Add(drain)
	// Polled: sessions end on their own timers, and a wait of up to 50 ms
	// longer than needed costs nothing at shutdown.
	for time.Now().Before(deadline) && r.sessionCount() > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	r.conn.Close()
	r.mu.Lock()
	for _, s := range r.sessions {
		s.upstream.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// cutDisallowed ends the sessions of clients a does not allow.
func (r *udpRelay) cutDisallowed(ctx context.Context, a AllowList) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for client, s := range r.sessions {
		if !a.Allows(client.Addr()) {
			r.metrics.Refused.WithLabelValues(string(UDP), "source-range").Inc()
			klog.FromContext(ctx).V(4).Info("Ending session of a client the allow-list no longer allows", "client", client, "port", r.port.String())
			delete(r.sessions, client)
			r.metrics.Active.WithLabelValues(string(UDP)).Dec()
			s.upstream.Close()
		}
	}
}

func (r *udpRelay) sessionCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}
