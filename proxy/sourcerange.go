package proxy

import (
	"fmt"
	"net/netip"
	"strings"
)

// SourceRanges is the allow-list from a Service's loadBalancerSourceRanges.
// An empty list allows every client. A non-empty list allows only clients
// inside one of its prefixes, so a list with only IPv4 prefixes refuses every
// IPv6 client, as kube-proxy does.
type SourceRanges []netip.Prefix

// ParseSourceRanges parses a comma-separated list of CIDRs. Host bits are
// cleared ("10.1.2.3/8" means 10.0.0.0/8) because Kubernetes accepts such
// values in loadBalancerSourceRanges. An empty string is an empty list.
func ParseSourceRanges(s string) (SourceRanges, error) {
	var rs SourceRanges
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("source range %q: want a CIDR such as 192.0.2.0/24 or 2001:db8::/32", item)
		}
		rs = append(rs, p.Masked())
	}
	return rs, nil
}

// Allows reports whether a client at addr may use the proxy.
func (rs SourceRanges) Allows(addr netip.Addr) bool {
	if len(rs) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, p := range rs {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// family returns the prefixes of one address family.
func (rs SourceRanges) family(f Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range rs {
		if familyOf(p.Addr()) == f {
			out = append(out, p)
		}
	}
	return out
}

// String returns the list as written on the command line.
func (rs SourceRanges) String() string {
	s := make([]string, len(rs))
	for i, p := range rs {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
