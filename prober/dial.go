package prober

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
)

// dialer returns a net.Dialer bound to opts.LocalAddr when one is set.
func dialer(network string, opts Options) *net.Dialer {
	d := &net.Dialer{KeepAlive: -1} // probes are short-lived
	if opts.LocalAddr.IsValid() {
		ap := netip.AddrPortFrom(opts.LocalAddr, 0)
		switch network {
		case "udp", "udp4", "udp6":
			d.LocalAddr = net.UDPAddrFromAddrPort(ap)
		default:
			d.LocalAddr = net.TCPAddrFromAddrPort(ap)
		}
	}
	return d
}

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

// tcpDialer is shared: a Dialer holds no state between dials. Probe
// connections are short-lived, so TCP keep-alive (four setsockopt calls per
// dial) is off.
var tcpDialer = net.Dialer{KeepAlive: -1}

// dialTCP connects to target from opts.LocalAddr (when set). It takes the
// address as a netip.AddrPort, so no probe pays for formatting and parsing
// the address again.
func dialTCP(ctx context.Context, opts Options, target netip.AddrPort) (*net.TCPConn, error) {
	var laddr netip.AddrPort
	if opts.LocalAddr.IsValid() {
		laddr = netip.AddrPortFrom(opts.LocalAddr, 0)
	}
	return tcpDialer.DialTCP(ctx, "tcp", laddr, target)
}
