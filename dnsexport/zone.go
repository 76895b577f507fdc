package dnsexport

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/pulselb/pulselb/api/contract"
)

// Service is what the zone needs to know about one load-balanced Service;
// FromService reads it from a Kubernetes Service, standalone mode from its
// configuration file.
type Service struct {
	// Namespace is empty for a Service without one (standalone mode): its
	// canonical name is then <name>.<origin>.
	Namespace, Name string
	// Hostnames are extra names for the Service (from its hostname
	// annotations). Names outside the zone are ignored by Build.
	Hostnames []string
	// IPs are the healthy load-balancer IPs: the A and AAAA records.
	IPs []netip.Addr
	// Ports become SRV records.
	Ports []Port
	// TTL of the Service's records, in seconds; 0 means the zone's
	// DefaultTTL.
	TTL uint32
}

// Port is one port of a Service.
type Port struct {
	// Name is the port's name; an unnamed port's SRV label is its number.
	Name string
	Port uint16
	// Protocol is TCP or UDP (any case; empty is TCP).
	Protocol string
}

// NameServer is one NS record of the zone. Addrs are its glue records and
// are required when the name is inside the zone.
type NameServer struct {
	Name  string
	Addrs []netip.Addr
}

// ZoneConfig describes the zone apart from the Services in it.
type ZoneConfig struct {
	// Origin is the zone's apex, e.g. "lb.example.com".
	Origin string
	// NameServers are the apex NS records; the first is the SOA's MNAME.
	NameServers []NameServer
	// Hostmaster is the SOA RNAME as a mail address or domain name;
	// default "hostmaster.<origin>".
	Hostmaster string
	// Refresh, Retry, Expire and NegativeTTL are the SOA timers in
	// seconds; zero means the defaults 60, 10, 86400 and 5. Secondaries
	// learn of changes by NOTIFY, so Refresh only bounds a lost NOTIFY.
	Refresh, Retry, Expire, NegativeTTL uint32
	// ApexTTL is the TTL of the SOA and NS records; default 60.
	ApexTTL uint32
	// DefaultTTL is the TTL of a Service's records when it sets none
	// (--dns-ttl); default contract.DefaultDNSTTL.
	DefaultTTL uint32
}

// ServiceError is a problem with one Service's data; the Service's other
// records and every other Service are still served.
type ServiceError struct {
	Namespace, Name string
	Err             error
}

// Error implements error.
func (e *ServiceError) Error() string {
	if e.Namespace == "" {
		return fmt.Sprintf("service %s: %v", e.Name, e.Err)
	}
	return fmt.Sprintf("service %s/%s: %v", e.Namespace, e.Name, e.Err)
}

// Unwrap returns the cause.
func (e *ServiceError) Unwrap() error { return e.Err }

// HostnameError is a problem with one of a Service's hostnames, wrapped
// in its ServiceError: the hostname is not served.
type HostnameError struct {
	// Hostname is the name as the Service gave it.
	Hostname string
	Err      error
}

// Error implements error.
func (e *HostnameError) Error() string { return fmt.Sprintf("hostname %q: %v", e.Hostname, e.Err) }

// Unwrap returns the cause.
func (e *HostnameError) Unwrap() error { return e.Err }

// owner is how problems name svc: namespace/name, or name alone in
// standalone mode.
func (svc Service) owner() string {
	if svc.Namespace == "" {
		return svc.Name
	}
	return svc.Namespace + "/" + svc.Name
}

// ParseOrigin returns v, the name of a zone, as Build serves it: a
// lower-case FQDN; or why it cannot be one. A zone's name follows the
// hostname rule (contract.Hostname): a name with a space or another
// character outside letters, digits and hyphens would make every query
// REFUSED, since no client can ask for a name inside it.
func ParseOrigin(v string) (string, error) { return parseHost(v, "a zone") }

// parseHost applies the hostname rule to v, the name of what, with no
// wildcard and no spaces around it.
func parseHost(v, what string) (string, error) {
	switch {
	case strings.TrimSpace(v) != v:
		return "", errors.New("it has spaces around it")
	case strings.HasPrefix(v, "*."):
		return "", fmt.Errorf("%s is not a wildcard", what)
	}
	name, err := contract.Hostname(v)
	if err != nil {
		return "", err
	}
	return name + ".", nil
}

// ZoneHostname is what Build does with hostname h of a Service in the
// zone origin (a lower-case FQDN): it returns h as a lower-case FQDN and
// whether it is inside the zone; a name outside is not served here and is
// no error (it is for external-dns). err says why h is not served: it is
// no hostname (contract.Hostname, the one rule), or a wildcard inside the
// zone. Standalone's configuration check calls it too, so that the check
// and the zone agree.
func ZoneHostname(origin, h string) (name string, inZone bool, err error) {
	hn, err := contract.Hostname(h)
	if err != nil {
		return "", false, err
	}
	name = dns.Fqdn(hn)
	if !dns.IsSubDomain(origin, name) {
		return name, false, nil
	}
	if strings.HasPrefix(name, "*.") {
		return name, true, errors.New("wildcard names are not served")
	}
	return name, true, nil
}

// ErrHostnameConflict is returned, wrapped in a ServiceError, when a
// hostname is already served for another Service.
var ErrHostnameConflict = errors.New("hostname already served for another service")

// MaxAnswerAddrs is the most address records of one type (A or AAAA) an
// answer carries for one name, in the answer section or as SRV glue. With
// it, any answer of this zone fits one TCP message (64 KiB): the largest,
// an SRV with MaxAnswerAddrs A and MaxAnswerAddrs AAAA glue records, is
// about 45 KB. A name with more addresses is answered with a window of
// MaxAnswerAddrs of them that moves with the query ID (see window), so
// that every address is served over time.
const MaxAnswerAddrs = 1000

// ErrAddressesCapped is returned, wrapped in a ServiceError, for a name
// with more than MaxAnswerAddrs addresses of one type. It is a notice, not
// a failure: the name is served with a window of its addresses.
var ErrAddressesCapped = errors.New("more addresses than one answer carries")

// Zone is an immutable, built zone. Build makes one; WithSerial stamps it.
type Zone struct {
	origin string
	soa    *dns.SOA
	nodes  map[string]*node
	// records is every record but the SOA, in canonical order: the
	// body of a zone transfer.
	records []dns.RR
	// neg is the authority section of negative answers.
	neg []dns.RR
	// answers caches packed answers of this version of the zone.
	answers *answerCache
	digest  [sha256.Size]byte
	// capped counts the names and types with more than MaxAnswerAddrs
	// addresses.
	capped int
}

// node holds the RRsets of one existing name; a node without sets is an
// empty non-terminal, which answers NODATA rather than NXDOMAIN.
type node struct {
	sets map[uint16][]dns.RR
}

// Origin returns the zone's apex as a lower-case FQDN.
func (z *Zone) Origin() string { return z.origin }

// Serial returns the SOA serial.
func (z *Zone) Serial() uint32 { return z.soa.Serial }

// Len returns the number of records, the SOA included.
func (z *Zone) Len() int { return len(z.records) + 1 }

// Records returns the zone as a transfer sends it: SOA, every other record
// in canonical order, SOA. The records must not be modified.
func (z *Zone) Records() []dns.RR {
	out := make([]dns.RR, 0, len(z.records)+2)
	out = append(out, z.soa)
	out = append(out, z.records...)
	return append(out, z.soa)
}

// SameContent reports whether z and o hold the same records apart from
// the SOA serial.
func (z *Zone) SameContent(o *Zone) bool {
	return o != nil && z.digest == o.digest
}

// WithSerial returns a copy of z whose SOA serial is serial. z is unchanged.
func (z *Zone) WithSerial(serial uint32) *Zone {
	c := *z
	soa := *z.soa
	soa.Serial = serial
	c.soa = &soa
	nodes := make(map[string]*node, len(z.nodes))
	for k, v := range z.nodes {
		nodes[k] = v
	}
	apex := &node{sets: make(map[uint16][]dns.RR, len(z.nodes[z.origin].sets))}
	for t, rrs := range z.nodes[z.origin].sets {
		apex.sets[t] = rrs
	}
	apex.sets[dns.TypeSOA] = []dns.RR{&soa}
	nodes[z.origin] = apex
	c.nodes = nodes
	c.neg = negativeSOA(&soa)
	c.answers = newAnswerCache()
	return &c
}

func orDefault(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// Build builds the zone for services. It is a pure function: the same
// input gives the same zone, whatever the order of services. The SOA
// serial is 0; the server stamps it with WithSerial.
//
// A Service's canonical name is <name>.<namespace>.<origin>, or
// <name>.<origin> when Namespace is empty (standalone mode), with A/AAAA
// records for its IPs and, when it has IPs, SRV records
// _<port>._<protocol>.<name>.<namespace>.<origin> pointing at the
// canonical name. Hostnames inside the zone get the same A/AAAA records;
// hostnames outside it are skipped silently (they are for external-dns).
// A hostname claimed twice goes to the Service first in namespace/name
// order; canonical names always win. Problems with one Service are
// returned as *ServiceError and never stop the others.
// Build fails only when cfg itself is invalid.
func Build(cfg ZoneConfig, services []Service) (*Zone, []error, error) {
	origin, err := ParseOrigin(cfg.Origin)
	if err != nil {
		return nil, nil, fmt.Errorf("zone origin %q: %w", cfg.Origin, err)
	}
	if len(cfg.NameServers) == 0 {
		return nil, nil, fmt.Errorf("zone %s: at least one name server is required", origin)
	}
	b := &builder{
		z:      &Zone{origin: origin, nodes: map[string]*node{}},
		owners: map[string]string{},
	}
	apexTTL := orDefault(cfg.ApexTTL, 60)
	var nsNames []string
	for _, ns := range cfg.NameServers {
		name, err := parseHost(ns.Name, "a name server")
		if err != nil {
			return nil, nil, fmt.Errorf("name server %q: %w", ns.Name, err)
		}
		nsNames = append(nsNames, name)
		b.add(&dns.NS{Hdr: hdr(origin, dns.TypeNS, apexTTL), Ns: name})
		if !dns.IsSubDomain(origin, name) {
			continue
		}
		if len(ns.Addrs) == 0 {
			return nil, nil, fmt.Errorf("name server %s is inside zone %s and needs an address", name, origin)
		}
		b.owners[name] = "name server"
		for _, a := range ns.Addrs {
			b.add(addrRR(name, a, apexTTL))
		}
	}
	rname := cfg.Hostmaster
	if rname != "" {
		if err := CheckHostmaster(rname); err != nil {
			return nil, nil, fmt.Errorf("hostmaster %.80q: %w", rname, err)
		}
	}
	if rname == "" {
		rname = "hostmaster." + origin
	}
	if at := strings.IndexByte(rname, '@'); at >= 0 {
		rname = strings.ReplaceAll(rname[:at], ".", `\.`) + "." + rname[at+1:]
	}
	if rname, err = canonicalName(rname); err != nil {
		return nil, nil, fmt.Errorf("hostmaster %q: %w", cfg.Hostmaster, err)
	}
	b.z.soa = &dns.SOA{
		Hdr:     hdr(origin, dns.TypeSOA, apexTTL),
		Ns:      nsNames[0],
		Mbox:    rname,
		Refresh: orDefault(cfg.Refresh, 60),
		Retry:   orDefault(cfg.Retry, 10),
		Expire:  orDefault(cfg.Expire, 86400),
		Minttl:  orDefault(cfg.NegativeTTL, 5),
	}
	b.add(b.z.soa)

	sorted := slices.Clone(services)
	slices.SortFunc(sorted, func(a, b Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var problems []error
	// Canonical names first, so that no hostname can take one.
	canon := make([]string, len(sorted))
	for i, svc := range sorted {
		rel, labels, what := svc.Name+"."+svc.Namespace, 2, "DNS label pair"
		if svc.Namespace == "" {
			rel, labels, what = svc.Name, 1, "DNS label"
		}
		name, err := canonicalName(rel + "." + origin)
		if err != nil || strings.Count(name, ".")-strings.Count(origin, ".") != labels {
			problems = append(problems, &ServiceError{svc.Namespace, svc.Name, fmt.Errorf("name %q: not a valid %s", rel, what)})
			continue
		}
		if owner, ok := b.owners[name]; ok {
			problems = append(problems, &ServiceError{svc.Namespace, svc.Name, fmt.Errorf("%s: %w (%s)", name, ErrHostnameConflict, owner)})
			continue
		}
		canon[i] = name
		b.owners[name] = svc.owner()
	}
	for i, svc := range sorted {
		if canon[i] == "" {
			continue
		}
		for _, err := range b.addService(svc, canon[i], orDefault(cfg.DefaultTTL, contract.DefaultDNSTTL)) {
			problems = append(problems, &ServiceError{svc.Namespace, svc.Name, err})
		}
	}
	b.finish()
	return b.z, problems, nil
}

type builder struct {
	z *Zone
	// owners maps a name to who owns its address records.
	owners map[string]string
}

func (b *builder) addService(svc Service, name string, defaultTTL uint32) []error {
	var errs []error
	ttl := orDefault(svc.TTL, defaultTTL)
	ips := normaliseIPs(svc.IPs)
	v4 := 0
	for _, ip := range ips {
		if ip.Is4() {
			v4++
		}
	}
	for _, f := range []struct {
		family string
		n      int
	}{{"IPv4", v4}, {"IPv6", len(ips) - v4}} {
		if f.n > MaxAnswerAddrs {
			errs = append(errs, fmt.Errorf("%s has %d %s addresses: %w; each answer carries %d of them, a window that moves with the query ID",
				name, f.n, f.family, ErrAddressesCapped, MaxAnswerAddrs))
		}
	}
	b.ensure(name)
	for _, ip := range ips {
		b.add(addrRR(name, ip, ttl))
	}
	if len(ips) > 0 {
		seen := map[string]bool{}
		for _, p := range svc.Ports {
			label := p.Name
			if label == "" {
				label = strconv.Itoa(int(p.Port))
			}
			proto := strings.ToLower(p.Protocol)
			if proto == "" {
				proto = "tcp"
			}
			owner, err := canonicalName("_" + label + "._" + proto + "." + name)
			if err != nil {
				errs = append(errs, fmt.Errorf("port %q/%s: %w", label, proto, err))
				continue
			}
			if seen[owner] {
				continue
			}
			seen[owner] = true
			b.add(&dns.SRV{Hdr: hdr(owner, dns.TypeSRV, ttl), Priority: 0, Weight: 100, Port: p.Port, Target: name})
		}
	}
	self := svc.owner()
	for _, h := range svc.Hostnames {
		hn, inZone, err := ZoneHostname(b.z.origin, h)
		if err != nil {
			errs = append(errs, &HostnameError{Hostname: h, Err: err})
			continue
		}
		if !inZone {
			continue
		}
		if owner, ok := b.owners[hn]; ok {
			if owner != self {
				errs = append(errs, &HostnameError{Hostname: h, Err: fmt.Errorf("%w (%s)", ErrHostnameConflict, owner)})
			}
			continue
		}
		b.owners[hn] = self
		b.ensure(hn)
		for _, ip := range ips {
			b.add(addrRR(hn, ip, ttl))
		}
	}
	return errs
}

// ensure makes name and every name between it and the origin exist.
func (b *builder) ensure(name string) {
	for {
		if _, ok := b.z.nodes[name]; ok {
			return
		}
		b.z.nodes[name] = &node{}
		if name == b.z.origin {
			return
		}
		next, end := dns.NextLabel(name, 0)
		if end {
			return
		}
		name = name[next:]
	}
}

func (b *builder) add(rr dns.RR) {
	name := rr.Header().Name
	b.ensure(name)
	n := b.z.nodes[name]
	if n.sets == nil {
		n.sets = map[uint16][]dns.RR{}
	}
	t := rr.Header().Rrtype
	for _, have := range n.sets[t] {
		if dns.IsDuplicate(have, rr) {
			return
		}
	}
	n.sets[t] = append(n.sets[t], rr)
}

// finish collects the transfer body and the content digest.
func (b *builder) finish() {
	z := b.z
	for _, n := range z.nodes {
		for t, rrs := range n.sets {
			if t != dns.TypeSOA {
				z.records = append(z.records, rrs...)
			}
			if (t == dns.TypeA || t == dns.TypeAAAA) && len(rrs) > MaxAnswerAddrs {
				z.capped++
			}
		}
	}
	slices.SortFunc(z.records, compareRR)
	h := sha256.New()
	soa := *z.soa
	soa.Serial = 0
	h.Write([]byte(soa.String()))
	for _, rr := range z.records {
		h.Write([]byte{'\n'})
		h.Write([]byte(rr.String()))
	}
	h.Sum(z.digest[:0])
	z.neg = negativeSOA(z.soa)
	z.answers = newAnswerCache()
}

// compareRR orders records by owner name (labels compared from the
// right, like DNSSEC's canonical order), then type, then text.
func compareRR(a, b dns.RR) int {
	ah, bh := a.Header(), b.Header()
	if c := compareNames(ah.Name, bh.Name); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(ah.Rrtype, bh.Rrtype), cmp.Compare(a.String(), b.String()))
}

func compareNames(a, b string) int {
	al, bl := dns.SplitDomainName(a), dns.SplitDomainName(b)
	for i, j := len(al)-1, len(bl)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if c := cmp.Compare(al[i], bl[j]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(al), len(bl))
}

func hdr(name string, t uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
}

func addrRR(name string, ip netip.Addr, ttl uint32) dns.RR {
	if ip.Is4() {
		return &dns.A{Hdr: hdr(name, dns.TypeA, ttl), A: ip.AsSlice()}
	}
	return &dns.AAAA{Hdr: hdr(name, dns.TypeAAAA, ttl), AAAA: ip.AsSlice()}
}

// normaliseIPs unmaps, de-duplicates and sorts (IPv4 first) ips, dropping
// invalid and unspecified addresses.
func normaliseIPs(ips []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		ip = ip.Unmap().WithZone("")
		if ip.IsValid() && !ip.IsUnspecified() {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

// canonicalName returns name as a lower-case FQDN, or why it is not a
// domain name.
func canonicalName(name string) (string, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || name == "." {
		return "", errors.New("empty name")
	}
	fq := dns.Fqdn(name)
	if _, ok := dns.IsDomainName(fq); !ok {
		return "", errors.New("not a valid domain name")
	}
	for _, l := range dns.SplitDomainName(fq) {
		if l == "" {
			return "", errors.New("empty label")
		}
	}
	return fq, nil
}

// result is the outcome of looking a question up in the zone.
type result struct {
	rcode  int
	answer []dns.RR
	ns     []dns.RR
	extra  []dns.RR
	// capped: some RRset was cut to its window.
	capped bool
}

// window returns at most limit of rrs: all of them when they fit, else
// limit consecutive ones (wrapping around) starting at id modulo their
// number. The answer is a function of the query alone (a retry gets the
// same one), and since clients pick query IDs at random, the window moves
// from query to query and serves every record over time, so that no
// host beyond the first limit is left out of every answer.
func window(rrs []dns.RR, id uint16, limit int) ([]dns.RR, bool) {
	if len(rrs) <= limit {
		return rrs, false
	}
	start := int(id) % len(rrs)
	out := make([]dns.RR, 0, limit)
	out = append(out, rrs[start:min(len(rrs), start+limit)]...)
	return append(out, rrs[:limit-len(out)]...), true
}

// lookup answers qname/qtype from z, with at most limit records of one
// type for one name, chosen by window with the query's id. qname must be
// lower case and inside the zone.
func (z *Zone) lookup(qname string, qtype, id uint16, limit int) result {
	n, ok := z.nodes[qname]
	if !ok {
		return result{rcode: dns.RcodeNameError, ns: z.negative()}
	}
	switch qtype {
	case dns.TypeANY:
		// RFC 8482: a minimal answer rather than every RRset, so ANY
		// queries are no amplification tool.
		if len(n.sets) == 0 {
			return result{ns: z.negative()}
		}
		return result{answer: []dns.RR{&dns.HINFO{Hdr: hdr(qname, dns.TypeHINFO, z.soa.Minttl), Cpu: "RFC8482"}}}
	}
	rrs := n.sets[qtype]
	if len(rrs) == 0 {
		return result{ns: z.negative()}
	}
	var r result
	r.answer, r.capped = window(rrs, id, limit)
	glue := func(target string) {
		tn := z.nodes[target]
		if tn == nil {
			return
		}
		for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
			g, capped := window(tn.sets[t], id, limit)
			r.extra = append(r.extra, g...)
			r.capped = r.capped || capped
		}
	}
	switch qtype {
	case dns.TypeSRV:
		seen := map[string]bool{}
		for _, rr := range r.answer {
			target := rr.(*dns.SRV).Target
			if seen[target] {
				continue
			}
			seen[target] = true
			glue(target)
		}
	case dns.TypeNS:
		for _, rr := range r.answer {
			glue(rr.(*dns.NS).Ns)
		}
	}
	return r
}

// negative is the authority section of NXDOMAIN and NODATA answers.
func (z *Zone) negative() []dns.RR { return z.neg }

// negativeSOA is soa with the negative-caching TTL of RFC 2308.
func negativeSOA(soa *dns.SOA) []dns.RR {
	c := *soa
	c.Hdr.Ttl = min(c.Hdr.Ttl, c.Minttl)
	return []dns.RR{&c}
}

// CheckHostmaster checks a zone's hostmaster (--dns-hostmaster, standalone's
// dns.hostmaster), the SOA mailbox: a mail
// address whose domain is a hostname (contract.Hostname) and whose local
// part has letters, digits and ".", "-", "_", "+" only, not starting or
// ending with a dot nor holding two in a row; or a hostname, whose first
// label is the mailbox.
func CheckHostmaster(s string) error {
	local, domain, isMail := strings.Cut(s, "@")
	if !isMail {
		domain = s
	}
	if _, err := contract.Hostname(domain); err != nil || strings.HasPrefix(domain, "*") {
		if err == nil {
			err = errors.New("a wildcard")
		}
		return fmt.Errorf("domain %.80q: %w", domain, err)
	}
	if !isMail {
		return nil
	}
	switch {
	case local == "":
		return errors.New("nothing before the @")
	case len(local) > 63:
		return errors.New("the part before the @ is longer than 63 characters")
	case local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, ".."):
		return errors.New("the part before the @ starts or ends with a dot, or has two in a row")
	}
	for _, c := range local {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune(".-_+", c) {
			return fmt.Errorf("%q before the @: want letters, digits, '.', '-', '_' and '+'", c)
		}
	}
	return nil
}
