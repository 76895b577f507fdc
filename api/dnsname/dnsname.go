// Package dnsname holds the one rule for a label of a DNS name, which the
// annotation parser (contract.Hostname), the probe-spec grammar (host=,
// sni=) and standalone mode's configuration all apply. It imports nothing.
package dnsname

import "fmt"

// Limits of a DNS name (RFC 1035 2.3.4), without the final dot.
const (
	MaxName  = 253
	MaxLabel = 63
)

// Label returns nil when l is a label of a hostname (RFC 1123): 1 to
// MaxLabel lower-case letters, digits and hyphens, not starting or ending
// with a hyphen; otherwise why not.
func Label(l string) error {
	switch {
	case l == "":
		return fmt.Errorf("empty label")
	case len(l) > MaxLabel:
		return fmt.Errorf("label %q is longer than %d characters", l, MaxLabel)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	for _, c := range l {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Errorf("label %q has %q: a hostname has letters, digits and hyphens only", l, c)
		}
	}
	return nil
}
