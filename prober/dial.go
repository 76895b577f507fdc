package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// isTimeout reports whether err is a deadline or timeout error.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dialOutcome classifies an error from dialing a transport connection.
func dialOutcome(err error) Outcome {
	switch {
	case isTimeout(err):
		return L4TOUT
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.EADDRNOTAVAIL):
		return L4UNREACH
	default:
		return L4CON
	}
}

// readOutcome classifies an error from reading an application answer:
// a timeout is L7TOUT, a reset or refusal L4CON, anything else (such as a
// close before the answer) L7RSP.
func readOutcome(err error) Outcome {
	switch {
	case isTimeout(err):
		return L7TOUT
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return L4CON
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return L4UNREACH
	default:
		return L7RSP
	}
}

// probeDialer is shared: a Dialer holds no state between dials. Probe
// connections are short-lived, so TCP keep-alive (four setsockopt calls per
// dial) is off.
var probeDialer = net.Dialer{KeepAlive: -1}

// localAddrPort is the source of a probe's connection: opts.LocalAddr when
// set, any address otherwise.
func localAddrPort(opts Options) netip.AddrPort {
	if opts.LocalAddr.IsValid() {
		return netip.AddrPortFrom(opts.LocalAddr, 0)
	}
	return netip.AddrPort{}
}

// dialTCP connects to target from opts.LocalAddr (when set) and, when the
// spec asks for it, sends the PROXY protocol header first. It takes the
// address as a netip.AddrPort, so no probe pays for formatting and parsing
// the address again.
func dialTCP(ctx context.Context, opts Options, target netip.AddrPort) (*net.TCPConn, error) {
	conn, err := probeDialer.DialTCP(ctx, "tcp", localAddrPort(opts), target)
	if err != nil || opts.proxyHeader == nil {
		return conn, err
	}
	// A header of at most 16 bytes fits the empty send buffer of a new
	// connection, so this write does not wait for the peer; the deadline
	// only guards against the impossible.
	deadline, _ := ctx.Deadline()
	_ = conn.SetWriteDeadline(deadline)
	if _, err := conn.Write(opts.proxyHeader); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sending the PROXY protocol header: %w", err)
	}
	return conn, nil
}

// connect is the first step of every probe but http's, which may resolve
// a redirect's name first: it dials target over network ("tcp" or "udp")
// from opts.LocalAddr, records the connect time in res and puts ctx's
// deadline on the connection, so every read and write after it ends in
// time. On failure it sets res.Outcome and res.Err and returns nil.
//
// A udp connection is connected too: that is what makes the kernel report
// an ICMP port unreachable, as ECONNREFUSED on the next read or write.
func connect(ctx context.Context, network string, opts Options, target netip.AddrPort, start time.Time, res *Result) net.Conn {
	var conn net.Conn
	var err error
	if network == "udp" {
		conn, err = probeDialer.DialUDP(ctx, network, localAddrPort(opts), target)
	} else {
		conn, err = dialTCP(ctx, opts, target)
	}
	if err != nil {
		res.Outcome, res.Err = dialOutcome(err), fmt.Errorf("connecting: %w", err)
		return nil
	}
	res.Timings.Connect = time.Since(start)
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	return conn
}

// abortOnCancel makes blocked reads and writes on conn return when ctx is
// cancelled before its deadline; the deadline itself is already on conn.
// The returned function releases the hook.
func abortOnCancel(ctx context.Context, conn net.Conn) func() bool {
	return context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
}
