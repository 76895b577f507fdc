package prober

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/pulselb/pulselb/api/probespec"
)

// dnsUDPSize is the EDNS0 buffer size advertised, the value the DNS flag
// day 2020 settled on to avoid IP fragmentation.
const dnsUDPSize = 1232

// dnsProber asks one non-recursive question and judges the rcode and,
// optionally, the answer section.
type dnsProber struct {
	name   string
	qtype  uint16
	rcode  int
	answer bool
	opts   Options
}

// newDNS builds a dns prober, filling in the question the spec leaves out.
func newDNS(spec probespec.Spec, opts Options) (Prober, error) {
	p := &dnsProber{name: spec.Name, qtype: spec.Type, rcode: spec.Rcode, answer: spec.Answer, opts: opts}
	if p.name == "" {
		// Every authoritative or recursive server can say something about
		// the root, so it makes a question that needs no configuration.
		p.name = "."
		if p.qtype == 0 {
			p.qtype = dns.TypeNS
		}
	}
	if p.qtype == 0 {
		p.qtype = dns.TypeA
	}
	p.name = dns.Fqdn(p.name)
	if _, ok := dns.IsDomainName(p.name); !ok {
		return nil, fmt.Errorf("invalid DNS name %q", spec.Name)
	}
	return p, nil
}

// Probe queries target over UDP, and again over TCP when the UDP answer is
// truncated. Connect and FirstByte describe the exchange that gave the
// final answer.
func (p *dnsProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	return timed(ctx, func(ctx context.Context, start time.Time) Result {
		return p.probe(ctx, target, start)
	})
}

func (p *dnsProber) probe(ctx context.Context, target netip.AddrPort, start time.Time) Result {
	var res Result
	q := new(dns.Msg)
	q.SetQuestion(p.name, p.qtype)
	// Asking without recursion checks the server itself rather than
	// whatever it would forward to.
	q.RecursionDesired = false
	q.SetEdns0(dnsUDPSize, false)

	network := "udp"
	r, err := p.exchange(ctx, network, q, target, start, &res)
	if err == nil && r.Truncated {
		network = "tcp"
		r, err = p.exchange(ctx, network, q, target, start, &res)
	}
	if err != nil {
		res.Err = err
		return res
	}

	if r.Rcode != p.rcode {
		res.Outcome = L7STS
		res.Err = fmt.Errorf("rcode %s, want %s", rcodeName(r.Rcode), rcodeName(p.rcode))
		return res
	}
	if p.answer && !p.answered(r) {
		res.Outcome = L7RSP
		res.Err = fmt.Errorf("no %s record for %s in the answer section (%d records)",
			dns.Type(p.qtype), p.name, len(r.Answer))
		return res
	}
	res.Outcome = L7OK
	res.Detail = fmt.Sprintf("%s, %d answers", rcodeName(r.Rcode), len(r.Answer))
	if len(r.Answer) == 1 {
		res.Detail = fmt.Sprintf("%s, 1 answer", rcodeName(r.Rcode))
	}
	if network == "tcp" {
		res.Detail += " over tcp"
	}
	return res
}

// exchange sends q over network and reads one answer. On failure it sets
// res.Outcome and returns an error that names the transport.
func (p *dnsProber) exchange(ctx context.Context, network string, q *dns.Msg, target netip.AddrPort, start time.Time, res *Result) (*dns.Msg, error) {
	conn := connect(ctx, network, p.opts, target, start, res)
	if conn == nil {
		return nil, res.Err
	}
	defer conn.Close()
	defer abortOnCancel(ctx, conn)()
	// Read whole datagrams even from a server that ignores the advertised
	// size; a cut datagram would only fail to unpack.
	co := &dns.Conn{Conn: conn, UDPSize: dns.MaxMsgSize}

	if err := co.WriteMsg(q); err != nil {
		res.Outcome = sendOutcome(err)
		return nil, fmt.Errorf("sending query over %s: %w", network, err)
	}
	// Over UDP, a datagram that is not the answer to q (another ID, another
	// question, or none that parses) is skipped until the deadline, as
	// resolvers do: anyone who knows the target's address can send one, and
	// it must not fail a healthy target. TCP cannot be spoofed, so there the
	// first message is the answer.
	var ignored int
	var last error
	for {
		r, err := co.ReadMsg()
		var mismatch error
		switch {
		case err == nil:
			mismatch = matches(r, q)
		case isTimeout(err) && ignored > 0:
			res.Outcome = L7RSP
			return nil, fmt.Errorf("no answer over %s before the deadline; ignored %d datagrams that were not the answer, the last %w", network, ignored, last)
		case isTimeout(err):
			res.Outcome = L7TOUT
			return nil, fmt.Errorf("no answer over %s before the deadline: %w", network, err)
		case network == "udp" && readOutcome(err) == L7RSP:
			// A datagram came, but not a DNS message.
			mismatch = fmt.Errorf("does not parse: %w", err)
		default:
			res.Outcome = readOutcome(err)
			return nil, fmt.Errorf("reading answer over %s: %w", network, err)
		}
		if mismatch == nil {
			res.Timings.FirstByte = time.Since(start)
			return r, nil
		}
		if network != "udp" {
			res.Outcome = L7RSP
			return nil, fmt.Errorf("answer over %s %w", network, mismatch)
		}
		ignored++
		last = mismatch
	}
}

// matches returns nil when r answers q: a response with q's ID and q's
// question, or with no question at all (which some servers send with an
// error rcode). Names compare without case: servers may echo the case
// the query used (0x20) or their own.
func matches(r, q *dns.Msg) error {
	if r.Id != q.Id {
		return fmt.Errorf("has ID %d, want %d", r.Id, q.Id)
	}
	if !r.Response {
		return errors.New("is not a response")
	}
	if len(r.Question) == 0 {
		return nil
	}
	got, want := r.Question[0], q.Question[0]
	if len(r.Question) != 1 || !strings.EqualFold(got.Name, want.Name) || got.Qtype != want.Qtype || got.Qclass != want.Qclass {
		return fmt.Errorf("is to question %s %s, want %s %s",
			got.Name, dns.Type(got.Qtype), want.Name, dns.Type(want.Qtype))
	}
	return nil
}

// answered reports whether r's answer section holds a record of the asked
// type; a CNAME chain that ends elsewhere does not count unless CNAME was asked.
func (p *dnsProber) answered(r *dns.Msg) bool {
	for _, rr := range r.Answer {
		if p.qtype == dns.TypeANY || rr.Header().Rrtype == p.qtype {
			return true
		}
	}
	return false
}

// rcodeName names an rcode, falling back to its number for unassigned ones.
func rcodeName(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rcode)
}
