package prober

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

func TestBeacon(t *testing.T) {
	tcp, err := New(probespec.Spec{Protocol: probespec.TCP}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	beacon := Beacon(tcp)
	probe := func(p Prober, addr netip.AddrPort) Result {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		return p.Probe(ctx, addr)
	}

	// A listening beacon: Up, as before.
	listening := serveTCP(t, "127.0.0.1", func(net.Conn) {})
	if r := probe(beacon, listening); r.Outcome != L4OK {
		t.Errorf("listening beacon: %s %v, want L4OK", r.Outcome, r.Err)
	}
	// Nothing listens: the node's stack refuses. The TCP probe says
	// L4CON; the beacon counts the node reached.
	closed := closedTCPPort(t, "127.0.0.1")
	if r := probe(tcp, closed); r.Outcome != L4CON {
		t.Fatalf("closed port through the tcp probe: %s %v, want L4CON", r.Outcome, r.Err)
	}
	r := probe(beacon, closed)
	if r.Outcome != L4OK || r.Err != nil || !strings.Contains(r.Detail, "refused") {
		t.Errorf("refused beacon: %s %v %q, want L4OK saying refused", r.Outcome, r.Err, r.Detail)
	}
	// Silence is still Down.
	silent := Func(func(context.Context, netip.AddrPort) Result {
		return Result{Outcome: L4TOUT, Err: context.DeadlineExceeded}
	})
	if r := probe(Beacon(silent), closed); r.Outcome != L4TOUT || r.Up() {
		t.Errorf("timed-out beacon: %s, want L4TOUT, Down", r.Outcome)
	}
	unreachable := Func(func(context.Context, netip.AddrPort) Result { return Result{Outcome: L4UNREACH} })
	if r := probe(Beacon(unreachable), closed); r.Outcome != L4UNREACH {
		t.Errorf("unreachable beacon: %s, want L4UNREACH", r.Outcome)
	}
}
