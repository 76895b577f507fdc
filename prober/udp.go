package prober

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// udpProber sends one datagram on a connected socket and judges the first
// answer, an ICMP refusal, or silence.
type udpProber struct {
	send    []byte
	expect  expectation
	silence probespec.Silence
	opts    Options
}

// newUDP builds a udp prober and resolves the default silence.
func newUDP(spec probespec.Spec, opts Options) (Prober, error) {
	p := &udpProber{
		send:    spec.Send,
		expect:  newExpectation(spec.Expect, spec.ExpectHex),
		silence: spec.Silence,
		opts:    opts,
	}
	if p.silence == probespec.SilenceDefault {
		// A service that was asked a question and stays silent has failed
		// to answer; one that was only poked may simply never reply.
		p.silence = probespec.SilenceUp
		if p.expect.set() {
			p.silence = probespec.SilenceDown
		}
	}
	return p, nil
}

// Probe sends the spec's bytes (an empty datagram when there are none) and
// waits until the deadline for an answer. Silence can only be told from a
// slow answer by waiting, so a probe that gets none always takes its whole
// timeout.
func (p *udpProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	return timed(ctx, func(ctx context.Context, start time.Time) Result {
		return p.probe(ctx, target, start)
	})
}

func (p *udpProber) probe(ctx context.Context, target netip.AddrPort, start time.Time) Result {
	var res Result
	conn := connect(ctx, "udp", p.opts, target, start, &res)
	if conn == nil {
		return res
	}
	defer conn.Close()
	defer abortOnCancel(ctx, conn)()

	if _, err := conn.Write(p.send); err != nil {
		res.Outcome = sendOutcome(err)
		res.Err = fmt.Errorf("sending %d bytes: %w", len(p.send), err)
		return res
	}

	// The first datagram decides, even when it does not match: waiting for
	// a better one would make the outcome depend on timing, and a service
	// that answers a probe with the wrong thing is not healthy.
	buf := make([]byte, 64<<10)
	n, err := conn.Read(buf)
	switch {
	case err == nil:
		res.Timings.FirstByte = time.Since(start)
		got := buf[:n]
		ok, _, err := p.expect.check(ctx, got)
		if err != nil {
			res.Outcome = readOutcome(err)
			res.Err = fmt.Errorf("matching answer: %w", err)
			return res
		}
		if p.expect.set() && !ok {
			res.Outcome = L7RSP
			res.Err = fmt.Errorf("answer does not match: received %s", quoteReceived(got))
			return res
		}
		res.Outcome = L7OK
		res.Detail = fmt.Sprintf("%d bytes received", n)
		if p.expect.set() {
			res.Detail = fmt.Sprintf("%d bytes matched", n)
		}
	case errors.Is(err, syscall.ECONNREFUSED):
		res.Outcome = L4CON
		res.Err = fmt.Errorf("port unreachable: %w", err)
	case errors.Is(ctx.Err(), context.Canceled):
		res.Outcome = L7TOUT
		res.Err = fmt.Errorf("probe cancelled while waiting for an answer: %w", ctx.Err())
	case isTimeout(err):
		if p.silence == probespec.SilenceUp {
			res.Outcome = L4OK
			res.Detail = "no answer (silence=up)"
			return res
		}
		res.Outcome = L7TOUT
		res.Err = errors.New("no answer before the deadline (silence=down)")
	default:
		res.Outcome = readOutcome(err)
		res.Err = fmt.Errorf("reading answer: %w", err)
	}
	return res
}
