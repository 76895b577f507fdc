package proxy

import (
	"fmt"

	"github.com/coreos/go-iptables/iptables"
)

// ruleCount is the change of one rule's kernel counters since the last read.
type ruleCount struct {
	counts   Counts
	protocol Protocol
	packets  uint64
	bytes    uint64
}

// counters reads the packet and byte counters of the rules in pulselb's own
// chains and returns what each rule that feeds a metric counted since the
// previous call. A chain whose listing does not line up with the wanted
// rules (someone changed it; the next ensure repairs it) is skipped, and a
// chain refilled since the last read counts from zero again, so the totals
// never run backwards.
func (m *ruleManager) counters() ([]ruleCount, error) {
	var out []ruleCount
	for _, c := range m.want.Chains {
		var want []Rule
		for _, r := range m.want.Rules {
			if r.Chain == c {
				want = append(want, r)
			}
		}
		stats, err := m.ipt.StructuredStats(c.Table, c.Name)
		if err != nil {
			return out, fmt.Errorf("reading counters of chain %s/%s: %w", c.Table, c.Name, err)
		}
		if len(stats) != len(want) {
			continue
		}
		last := m.lastCounts[c]
		if len(last) != len(want) {
			last = make([]iptables.Stat, len(want))
		}
		for i, r := range want {
			s := stats[i]
			if r.Counts == CountsNothing {
				continue
			}
			d := ruleCount{counts: r.Counts, protocol: r.Protocol, packets: s.Packets, bytes: s.Bytes}
			// Counters only fall when the rule was replaced behind our back.
			if s.Packets >= last[i].Packets && s.Bytes >= last[i].Bytes {
				d.packets -= last[i].Packets
				d.bytes -= last[i].Bytes
			}
			out = append(out, d)
		}
		m.lastCounts[c] = stats
	}
	return out, nil
}

// addCounts adds the rules' counts to the proxy metrics.
func (m *Metrics) addCounts(counts []ruleCount) {
	for _, c := range counts {
		proto := string(c.protocol)
		switch c.counts {
		case CountsConnections:
			m.Connections.WithLabelValues(proto).Add(float64(c.packets))
		case CountsBytesIn:
			m.Bytes.WithLabelValues(proto, "in").Add(float64(c.bytes))
		case CountsBytesOut:
			m.Bytes.WithLabelValues(proto, "out").Add(float64(c.bytes))
		}
	}
}
