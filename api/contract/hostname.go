package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pulselb/pulselb/api/dnsname"
)

// Hostname returns h as pulselb publishes it, lower case without the final
// dot, or why it is not a hostname. A hostname is one or more labels of
// letters, digits and hyphens (RFC 1123), none starting or ending with a
// hyphen (dnsname.Label); "*." may lead, for the wildcard records external-dns publishes.
// This is the one rule: the annotation parser, the DNS zone and standalone
// mode's configuration all apply it, so a name reported as unused is never
// served.
func Hostname(h string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	labels := strings.TrimPrefix(name, "*.")
	switch {
	case labels == "":
		return "", errors.New("empty name")
	case len(name) > dnsname.MaxName:
		return "", fmt.Errorf("longer than %d characters", dnsname.MaxName)
	}
	for _, l := range strings.Split(labels, ".") {
		if l == "" {
			return "", errors.New("has an empty label")
		}
		if err := dnsname.Label(l); err != nil {
			return "", err
		}
	}
	return name, nil
}

// DefaultDNSTTL is the TTL, in seconds, of a Service's records when it sets
// no pulselb.io/dns-ttl and the server no --dns-ttl: the DNS zone, the
// DNSEndpoint objects and the proxies' drain delay all default to it.
const DefaultDNSTTL uint32 = 5

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
