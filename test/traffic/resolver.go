package traffic

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// Resolver is a stub resolver: it asks its servers in order (the next one
// when one fails, as resolv.conf's nameserver lines) for A records and
// caches an answer for its TTL, the smallest of the records'. It is not
// safe for concurrent use.
type Resolver struct {
	// Servers are the DNS servers, ip:port.
	Servers []string
	// Timeout bounds one query to one server; default 1 s.
	Timeout time.Duration

	addrs   []netip.Addr
	expires time.Time
	now     func() time.Time // tests
}

// errNoAnswer is an answer without A records.
var errNoAnswer = errors.New("no A records")

// Lookup returns the addresses of name, from the cache while its answer
// is fresh. fresh is true when it asked a server.
func (r *Resolver) Lookup(name string) (addrs []netip.Addr, fresh bool, err error) {
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	if len(r.addrs) > 0 && now().Before(r.expires) {
		return r.addrs, false, nil
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	client := &dns.Client{Timeout: timeout}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var errs []error
	for _, s := range r.Servers {
		resp, _, err := client.Exchange(m, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("asking %s: %w", s, err))
			continue
		}
		if resp.Rcode != dns.RcodeSuccess {
			errs = append(errs, fmt.Errorf("asking %s: %s", s, dns.RcodeToString[resp.Rcode]))
			continue
		}
		var got []netip.Addr
		ttl := uint32(0)
		for _, rr := range resp.Answer {
			a, ok := rr.(*dns.A)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(a.A); ok {
				got = append(got, ip.Unmap())
			}
			if len(got) == 1 || a.Hdr.Ttl < ttl {
				ttl = a.Hdr.Ttl
			}
		}
		if len(got) == 0 {
			errs = append(errs, fmt.Errorf("asking %s: %w", s, errNoAnswer))
			continue
		}
		r.addrs, r.expires = got, now().Add(time.Duration(ttl)*time.Second)
		return got, true, nil
	}
	return nil, true, fmt.Errorf("resolving %s: %w", name, errors.Join(errs...))
}
