package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limits of a DNS name (RFC 1035 2.3.4), without the final dot.
const (
	maxHostnameLen = 253
	maxLabelLen    = 63
)

// Hostname returns h as pulselb publishes it, lower case without the final
// dot, or why it is not a hostname. A hostname is one or more labels of
// letters, digits and hyphens (RFC 1123), none starting or ending with a
// hyphen; "*." may lead, for the wildcard records external-dns publishes.
// This is the one rule: the annotation parser, the DNS zone and standalone
// mode's configuration all apply it, so a name reported as unused is never
// served.
func Hostname(h string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	labels := strings.TrimPrefix(name, "*.")
	switch {
	case labels == "":
		return "", errors.New("empty name")
	case len(name) > maxHostnameLen:
		return "", fmt.Errorf("longer than %d characters", maxHostnameLen)
	}
	for _, l := range strings.Split(labels, ".") {
		switch {
		case l == "":
			return "", errors.New("has an empty label")
		case len(l) > maxLabelLen:
			return "", fmt.Errorf("label %q is longer than %d characters", l, maxLabelLen)
		case l[0] == '-' || l[len(l)-1] == '-':
			return "", fmt.Errorf("label %q starts or ends with a hyphen", l)
		}
		for _, c := range l {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return "", fmt.Errorf("label %q has %q: a hostname has letters, digits and hyphens only", l, c)
			}
		}
	}
	return name, nil
}

// MaxDNSTTL is the largest pulselb.io/dns-ttl (one day): the records
// follow health, so a long TTL defeats their purpose.
const MaxDNSTTL = 86400

// ParseTTL reads a DNS TTL in whole seconds, with or without an "s"
// suffix, from 1 to MaxDNSTTL.
func ParseTTL(v string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), "s"), 10, 32)
	if err != nil || n < 1 || n > MaxDNSTTL {
		return 0, fmt.Errorf("want whole seconds from 1 to %d", MaxDNSTTL)
	}
	return uint32(n), nil
}
