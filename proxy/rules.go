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
}

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
	{Chain{"nat", "PREROUTING"}, []string{"-m", "comment", "--comment", jumpComment, "-j", chainPrerouting}},
	{Chain{"nat", "POSTROUTING"}, []string{"-m", "comment", "--comment", jumpComment, "-j", chainPostrouting}},
	{Chain{"filter", "FORWARD"}, []string{"-m", "comment", "--comment", jumpComment, "-j", chainForward}},
}

// BuildRules returns the rules that forward ports arriving at this network
// namespace to clusterIP, for clusterIP's family. ranges is the whole
// allow-list; only its prefixes of clusterIP's family are used, and when the
// list is not empty but has none of this family, every client of this family
// is dropped.
//
// For each port:
//   - nat PREROUTING: traffic addressed to a local address on the port is
//     DNATed to clusterIP:port. addrtype LOCAL keeps traffic merely routed
//     through the namespace out of it.
//   - nat POSTROUTING: DNATed traffic is masqueraded, so the ClusterIP's
//     backends answer this namespace, which undoes both translations.
//   - filter FORWARD: DNATed packets from an allowed source are accepted, as
//     are the backend's replies; other DNATed packets to the port are
//     dropped. Traffic that is not DNATed by pulselb falls through untouched.
func BuildRules(clusterIP netip.Addr, ports []Port, ranges SourceRanges) RuleSet {
	clusterIP = clusterIP.Unmap()
	fam := familyOf(clusterIP)
	host := clusterIP.String() + "/32"
	if fam == IPv6 {
		host = clusterIP.String() + "/128"
	}
	allowed := ranges.family(fam)
	restricted := len(ranges) > 0

	rs := RuleSet{Chains: ownChains, Jumps: jumps}
	add := func(table, chain string, spec ...string) {
		rs.Rules = append(rs.Rules, Rule{Chain{table, chain}, spec})
	}
	for _, p := range ports {
		proto := string(p.Protocol)
		num := strconv.Itoa(int(p.Number))
		comment := []string{"-m", "comment", "--comment", "pulselb " + p.String()}
		dest := netip.AddrPortFrom(clusterIP, p.Number).String()

		add("nat", chainPrerouting, concat([]string{"-p", proto, "-m", proto, "--dport", num,
			"-m", "addrtype", "--dst-type", "LOCAL"}, comment, []string{"-j", "DNAT", "--to-destination", dest})...)
		toBackend := []string{"-d", host, "-p", proto, "-m", proto, "--dport", num, "-m", "conntrack", "--ctstate", "DNAT"}
		add("nat", chainPostrouting, concat(toBackend, comment, []string{"-j", "MASQUERADE"})...)

		if !restricted {
			add("filter", chainForward, concat(toBackend, comment, []string{"-j", "ACCEPT"})...)
		}
		for _, src := range allowed {
			add("filter", chainForward, concat([]string{"-s", src.String()}, toBackend, comment, []string{"-j", "ACCEPT"})...)
		}
		add("filter", chainForward, concat([]string{"-s", host, "-p", proto, "-m", proto, "--sport", num,
			"-m", "conntrack", "--ctstate", "DNAT"}, comment, []string{"-j", "ACCEPT"})...)
		if restricted {
			add("filter", chainForward, concat(toBackend, comment, []string{"-j", "DROP"})...)
		}
	}
	return rs
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
