package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"syscall"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// tcpReadLimit caps how much of a tcp answer is read while looking for a
// match, so a server that streams forever cannot hold a probe or its memory.
const tcpReadLimit = 64 << 10

// quoteLimit is how many received bytes an error message quotes.
const quoteLimit = 64

// expectation is what the answer of a tcp or udp probe must look like. When
// both are set both must match.
type expectation struct {
	re *regexp.Regexp
	// insts is re's program size (probespec.RegexpInsts), the cost of matching a
	// byte.
	insts int
	hex   *probespec.HexPattern
}

// newExpectation returns the expectation of a spec's expect= and
// expect-hex=.
func newExpectation(re *regexp.Regexp, hex *probespec.HexPattern) expectation {
	e := expectation{re: re, hex: hex}
	if re != nil {
		e.insts = probespec.RegexpInsts(re)
	}
	return e
}

// set reports whether the spec asked to check the answer at all.
func (e expectation) set() bool { return e.re != nil || e.hex != nil }

// check reports whether b matches, and whether more bytes could still turn
// a failed match into a match. A hex pattern is decided as soon as enough
// bytes arrived, so a wrong banner fails at once instead of at the deadline.
// It returns ctx's error when ctx ends during an expensive match.
func (e expectation) check(ctx context.Context, b []byte) (ok, more bool, err error) {
	if e.hex != nil {
		if len(b) < len(e.hex.Value) {
			return false, true, nil
		}
		if !e.hex.Match(b) {
			return false, false, nil
		}
	}
	if e.re != nil {
		matched, err := matchBy(ctx, e.re, e.insts, b)
		if err != nil || !matched {
			return false, true, err
		}
	}
	return true, false, nil
}

// quoteReceived renders received bytes for an error message, truncated so a
// chatty server cannot flood reports.
func quoteReceived(b []byte) string {
	if len(b) > quoteLimit {
		return fmt.Sprintf("%q (first %d of %d bytes)", b[:quoteLimit], quoteLimit, len(b))
	}
	return fmt.Sprintf("%q", b)
}

// sendOutcome classifies an error from writing a request: a reset, broken
// pipe or ICMP refusal means the peer is gone (L4CON), a timeout that it
// did not take the request before the deadline (L7TOUT).
func sendOutcome(err error) Outcome {
	switch {
	case isTimeout(err):
		return L7TOUT
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return L4UNREACH
	default:
		return L4CON
	}
}

// tcpProber connects, optionally sends bytes and optionally checks the answer.
type tcpProber struct {
	send   []byte
	expect expectation
	opts   Options
}

// newTCP builds a tcp prober; every field of the spec is optional.
func newTCP(spec probespec.Spec, opts Options) (Prober, error) {
	return &tcpProber{
		send:   spec.Send,
		expect: newExpectation(spec.Expect, spec.ExpectHex),
		opts:   opts,
	}, nil
}

// Probe connects to target and, when the spec asks, sends its bytes and
// reads until the answer matches, the peer closes, 64 KiB arrived or the
// deadline passes.
func (p *tcpProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	return timed(ctx, func(ctx context.Context, start time.Time) Result {
		return p.probe(ctx, target, start)
	})
}

func (p *tcpProber) probe(ctx context.Context, target netip.AddrPort, start time.Time) Result {
	var res Result
	conn := connect(ctx, "tcp", p.opts, target, start, &res)
	if conn == nil {
		return res
	}
	defer conn.Close()
	if len(p.send) == 0 && !p.expect.set() {
		// Nothing was exchanged, so an orderly close would only cost the
		// server a FIN exchange and leave this host a TIME_WAIT socket per
		// probe; a reset ends the connection at once, as load balancers'
		// connect checks do.
		_ = conn.(*net.TCPConn).SetLinger(0)
		res.Outcome = L4OK
		res.Detail = "connected"
		return res
	}
	defer abortOnCancel(ctx, conn)()

	if len(p.send) > 0 {
		if _, err := conn.Write(p.send); err != nil {
			res.Outcome = sendOutcome(err)
			res.Err = fmt.Errorf("sending %d bytes: %w", len(p.send), err)
			return res
		}
	}
	if !p.expect.set() {
		res.Outcome = L4OK
		res.Detail = fmt.Sprintf("connected, %d bytes sent", len(p.send))
		return res
	}

	got := make([]byte, 0, 512)
	chunk := make([]byte, 4096)
	for {
		n, err := conn.Read(chunk[:min(len(chunk), tcpReadLimit-len(got))])
		if n > 0 {
			if len(got) == 0 {
				res.Timings.FirstByte = time.Since(start)
			}
			got = append(got, chunk[:n]...)
			ok, more, err := p.expect.check(ctx, got)
			switch {
			case err != nil:
				res.Outcome = readOutcome(err)
				res.Err = fmt.Errorf("matching answer: %w", err)
				return res
			case ok:
				res.Outcome = L7OK
				res.Detail = fmt.Sprintf("%d bytes matched", len(got))
				return res
			case !more:
				res.Outcome = L7RSP
				res.Err = fmt.Errorf("answer does not match: received %s", quoteReceived(got))
				return res
			case len(got) >= tcpReadLimit:
				res.Outcome = L7RSP
				res.Err = fmt.Errorf("no match in the first %d bytes: received %s", len(got), quoteReceived(got))
				return res
			}
		}
		if err == nil {
			continue
		}
		res.Outcome = readOutcome(err)
		switch {
		case errors.Is(err, io.EOF):
			res.Outcome = L7RSP
			res.Err = fmt.Errorf("connection closed without a match: received %s", quoteReceived(got))
		case res.Outcome == L7TOUT && len(got) == 0:
			res.Err = fmt.Errorf("no answer before the deadline: %w", err)
		case res.Outcome == L7TOUT:
			res.Err = fmt.Errorf("no match before the deadline: received %s", quoteReceived(got))
		default:
			res.Err = fmt.Errorf("reading answer: %w", err)
		}
		return res
	}
}
