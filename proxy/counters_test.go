package proxy

import (
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRuleCounters checks that the iptables counters of the DNAT and
// FORWARD rules become connection and byte metrics, counted once, and that a
// chain refilled after tampering counts from zero without going backwards.
func TestRuleCounters(t *testing.T) {
	ipt := newFakeIPTables()
	ports := []Port{{TCP, 80}, {UDP, 53}}
	ranges, err := ParseSourceRanges("198.18.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	rs := BuildRules(netip.MustParseAddr("198.19.0.10"), ports, AllowList{Ranges: ranges}, NodePortTarget{})
	m := newRuleManager(IPv4, ipt, rs)
	if _, err := m.ensure(); err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics()
	read := func() {
		t.Helper()
		c, err := m.counters()
		if err != nil {
			t.Fatal(err)
		}
		metrics.addCounts(c)
	}
	// index returns the position of the rule of port p feeding what in its
	// chain, as iptables lists it.
	index := func(p Protocol, what Counts) (Chain, int) {
		t.Helper()
		pos := map[Chain]int{}
		for _, r := range rs.Rules {
			if r.Protocol == p && r.Counts == what {
				return r.Chain, pos[r.Chain]
			}
			pos[r.Chain]++
		}
		t.Fatalf("no %s rule counting %d", p, what)
		return Chain{}, 0
	}
	traffic := func(p Protocol, conns, in, out uint64) {
		c, i := index(p, CountsConnections)
		ipt.count(c, i, conns, conns*60)
		c, i = index(p, CountsBytesIn)
		ipt.count(c, i, in/100, in)
		c, i = index(p, CountsBytesOut)
		ipt.count(c, i, out/100, out)
	}
	check := func(p Protocol, conns, in, out float64) {
		t.Helper()
		proto := string(p)
		if got := testutil.ToFloat64(metrics.Connections.WithLabelValues(proto)); got != conns {
			t.Errorf("%s connections = %v, want %v", p, got, conns)
		}
		if got := testutil.ToFloat64(metrics.Bytes.WithLabelValues(proto, "in")); got != in {
			t.Errorf("%s bytes in = %v, want %v", p, got, in)
		}
		if got := testutil.ToFloat64(metrics.Bytes.WithLabelValues(proto, "out")); got != out {
			t.Errorf("%s bytes out = %v, want %v", p, got, out)
		}
	}

	traffic(TCP, 3, 1000, 50000)
	traffic(UDP, 2, 200, 400)
	read()
	check(TCP, 3, 1000, 50000)
	check(UDP, 2, 200, 400)

	// A second read adds only what is new.
	traffic(TCP, 1, 100, 100)
	read()
	read()
	check(TCP, 4, 1100, 50100)
	check(UDP, 2, 200, 400)

	// Someone deletes a FORWARD rule: ensure refills the chain, whose new
	// rules count from zero; the totals keep what was counted before.
	fwd, i := index(TCP, CountsBytesOut)
	if err := ipt.Delete(fwd.Table, fwd.Name, rs.Rules[ruleIndex(t, rs, fwd, i)].Spec...); err != nil {
		t.Fatal(err)
	}
	read() // the chain does not line up with the wanted rules: skipped
	if _, err := m.ensure(); err != nil {
		t.Fatal(err)
	}
	// More than before the refill, so a reader that kept the old counters
	// would add only the excess.
	traffic(TCP, 0, 3000, 700)
	read()
	check(TCP, 4, 4100, 50800)
}

// ruleIndex returns the index in rs.Rules of the i-th rule of chain c.
func ruleIndex(t *testing.T, rs RuleSet, c Chain, i int) int {
	t.Helper()
	n := 0
	for j, r := range rs.Rules {
		if r.Chain == c {
			if n == i {
				return j
			}
			n++
		}
	}
	t.Fatalf("no rule %d in %v", i, c)
	return 0
}
