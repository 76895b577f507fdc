package prober

import (
	"context"
	"net/netip"
)

// Beacon returns the prober of a node beacon: p (a TCP connect to the
// beacon port), except that a refused or reset connection counts as the
// node reached (L4OK). A beacon asks whether the node is there: its
// network, its kernel. A refusal comes from the node's own stack, which
// answered; only the prober pod behind the port is not listening
// (starting, restarting, stopping). A timeout or an unreachable host is
// still Down. So a node's beacon can be probed whether or not its prober
// is ready, and a node cut off while its prober restarts is still seen to
// go.
func Beacon(p Prober) Prober {
	return Func(func(ctx context.Context, target netip.AddrPort) Result {
		r := p.Probe(ctx, target)
		if r.Outcome == L4CON {
			r.Outcome, r.Detail = L4OK, "refused: the node answers, its prober does not listen ("+r.Message()+")"
			r.Err = nil
		}
		return r
	})
}
