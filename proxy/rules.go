package proxy

import (
	"net/netip"
	"strconv"
	"strings"
)

// Family is an IP address family; each has its own iptables binary and its
// own ClusterIP.
type Family int

// The address families.
const (
	IPv4 Family = iota
	IPv6
)

// String returns "ipv4" or "ipv6", the metric label value.
func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

func familyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// The chains pulselb creates. Only these are ever flushed or deleted; the
// built-in chains get one jump rule each and nothing else.
const (
	chainPrerouting  = "PULSELB-PREROUTING"
	chainPostrouting = "PULSELB-POSTROUTING"
	chainForward     = "PULSELB-FORWARD"
)

// jumpComment marks pulselb's jump rules in the built-in chains, so a human
// reading iptables-save knows who put them there.
const jumpComment = "pulselb proxy"

// Chain names an iptables chain in a table.
type Chain struct {
	Table, Name string
}

// Rule is one iptables rule: a rule spec appended to Chain.
type Rule struct {
	Chain
	Spec []string
	// Counts says which proxy metric the rule's kernel counters feed in
	// iptables mode; zero for rules whose counters mean nothing to a user.
	Counts Counts
	// Protocol is the protocol of the port the rule forwards, for Counts.
	Protocol Protocol
}

// Counts names what a rule's packet and byte counters measure.
type Counts uint8

// The counters a rule can feed. The nat table sees only the first packet of
// a connection, so the DNAT rule's packets are connections (TCP) or
// sessions (UDP); the FORWARD accept rules see every forwarded packet.
const (
	CountsNothing     Counts = iota
	CountsConnections        // packets of the DNAT rule
	CountsBytesIn            // bytes from clients to the backend
	CountsBytesOut           // bytes from the backend to clients
)

// String returns the rule in iptables-save form, for logs and test failures.
func (r Rule) String() string {
	return "-t " + r.Table + " -A " + r.Name + " " + strings.Join(r.Spec, " ")
}

// RuleSet is everything pulselb installs in one address family.
type RuleSet struct {
	// Chains are pulselb's own chains, created empty and filled with Rules.
	Chains []Chain
	// Jumps are inserted first in the built-in chains and lead to Chains.
	Jumps []Rule
	// Rules fill Chains, in order; order matters in the FORWARD chain, where
	// the allow rules precede the drop rule.
	Rules []Rule
}

// ownChains are the chains in every RuleSet, in the order they are created.
var ownChains = []Chain{
	{"nat", chainPrerouting},
	{"nat", chainPostrouting},
	{"filter", chainForward},
}

// jumps are the rules in the built-in chains, the same for every RuleSet.
var jumps = []Rule{
	{Chain: Chain{"nat", "PREROUTING"}, Spec: []string{"-m", "comment", "--comment", jumpComment, "-j", chainPrerouting}},
	{Chain: Chain{"nat", "POSTROUTING"}, Spec: []string{"-m", "comment", "--comment", jumpComment, "-j", chainPostrouting}},
	{Chain: Chain{"filter", "FORWARD"}, Spec: []string{"-m", "comment", "--comment", jumpComment, "-j", chainForward}},
}

// NodePortTarget sends some ports to the node's own IP at their NodePorts
// instead of to the ClusterIP: with externalTrafficPolicy Local, the node's
// NodePort reaches only the endpoints on that node and keeps the policy's
// meaning. The zero NodePortTarget sends every port to the ClusterIP.
type NodePortTarget struct {
	// NodeIP is the node's address of the rules' family.
	NodeIP netip.Addr
	// NodePorts maps a Service port to its NodePort; ports not in it go to
	// the ClusterIP.
	NodePorts map[Port]uint16
}

// destination returns where port p is forwarded: NodeIP at p's NodePort when
// p has one, else clusterIP at p's own number.
func (t NodePortTarget) destination(clusterIP netip.Addr, p Port) netip.AddrPort {
	if n, ok := t.NodePorts[p]; ok && t.NodeIP.IsValid() {
		return netip.AddrPortFrom(t.NodeIP.Unmap(), n)
	}
	return netip.AddrPortFrom(clusterIP.Unmap(), p.Number)
}

// BuildRules returns the rules that forward ports arriving at this network
// namespace to clusterIP, or for the ports of target to the node's IP at
// their NodePorts, for clusterIP's family. allow is the whole
// allow-list; only its sources of clusterIP's family are used, and when the
// list restricts clients but has none of this family, every client of this
// family is dropped (a closed list drops every client).
//
// For each port:
//   - nat PREROUTING: traffic addressed to a local address on the port is
//     DNATed to clusterIP:port (or nodeIP:nodePort). addrtype LOCAL keeps traffic merely routed
//     through the namespace out of it.
//   - nat POSTROUTING: DNATed traffic is masqueraded, so the ClusterIP's
//     backends (or the node) answer this namespace, which undoes both
//     translations.
//   - filter FORWARD: DNATed packets from an allowed source are accepted, as
//     are the backend's replies; other DNATed packets to the port are
//     dropped. Traffic that is not DNATed by pulselb falls through untouched.
func BuildRules(clusterIP netip.Addr, ports []Port, allow AllowList, target NodePortTarget) RuleSet {
	fam := familyOf(clusterIP)
	allowed := allow.family(fam)
	restricted := allow.restricted()

	rs := RuleSet{Chains: ownChains, Jumps: jumps}
	var counts Counts
	var ruleProto Protocol
	add := func(table, chain string, spec ...string) {
		rs.Rules = append(rs.Rules, Rule{Chain: Chain{table, chain}, Spec: spec, Counts: counts, Protocol: ruleProto})
		counts = CountsNothing
	}
	for _, p := range ports {
		ruleProto = p.Protocol
		proto := string(p.Protocol)
		num := strconv.Itoa(int(p.Number))
		comment := []string{"-m", "comment", "--comment", "pulselb " + p.String()}
		dest := target.destination(clusterIP, p)
		host := netip.PrefixFrom(dest.Addr(), dest.Addr().BitLen()).String()
		destNum := strconv.Itoa(int(dest.Port()))

		counts = CountsConnections
		add("nat", chainPrerouting, concat([]string{"-p", proto, "-m", proto, "--dport", num,
			"-m", "addrtype", "--dst-type", "LOCAL"}, comment, []string{"-j", "DNAT", "--to-destination", dest.String()})...)
		toBackend := []string{"-d", host, "-p", proto, "-m", proto, "--dport", destNum, "-m", "conntrack", "--ctstate", "DNAT"}
		add("nat", chainPostrouting, concat(toBackend, comment, []string{"-j", "MASQUERADE"})...)

		if !restricted {
			counts = CountsBytesIn
			add("filter", chainForward, concat(toBackend, comment, []string{"-j", "ACCEPT"})...)
		}
		for _, src := range allowed {
			counts = CountsBytesIn
			add("filter", chainForward, concat([]string{"-s", src.String()}, toBackend, comment, []string{"-j", "ACCEPT"})...)
		}
		counts = CountsBytesOut
		add("filter", chainForward, concat([]string{"-s", host, "-p", proto, "-m", proto, "--sport", destNum,
			"-m", "conntrack", "--ctstate", "DNAT"}, comment, []string{"-j", "ACCEPT"})...)
		if restricted {
			add("filter", chainForward, concat(toBackend, comment, []string{"-j", "DROP"})...)
		}
	}
	return rs
}

// specs returns the rule specs rs appends to chain c, in order.
func (rs RuleSet) specs(c Chain) [][]string {
	var out [][]string
	for _, r := range rs.Rules {
		if r.Chain == c {
			out = append(out, r.Spec)
		}
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
