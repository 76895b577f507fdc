package dnsexport

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

var testZoneConfig = ZoneConfig{
	Origin: "lb.example.test",
	NameServers: []NameServer{
		{Name: "ns1.lb.example.test", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{Name: "ns2.example.net"},
	},
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// rrStrings returns the records at name of type t as sorted text.
func rrStrings(z *Zone, name string, t uint16) []string {
	var out []string
	r := z.lookup(name, t, 0, MaxAnswerAddrs)
	for _, rr := range r.answer {
		out = append(out, rr.String())
	}
	slices.Sort(out)
	return out
}

func TestBuild(t *testing.T) {
	web := Service{Namespace: "default", Name: "web", IPs: addrs("192.0.2.11", "192.0.2.10", "2001:db8::1", "192.0.2.10"),
		Ports:     []Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Port: 53, Protocol: "UDP"}},
		Hostnames: []string{"www.lb.example.test", "WWW.lb.example.test.", "shop.example.com"}, TTL: 30}
	tests := []struct {
		name     string
		services []Service
		cfg      *ZoneConfig
		qname    string
		qtype    uint16
		want     []string
		rcode    int
		problems []string
	}{
		{name: "A records sorted and de-duplicated", services: []Service{web}, qname: "web.default.lb.example.test.", qtype: dns.TypeA,
			want: []string{"web.default.lb.example.test.\t30\tIN\tA\t192.0.2.10", "web.default.lb.example.test.\t30\tIN\tA\t192.0.2.11"}},
		{name: "AAAA", services: []Service{web}, qname: "web.default.lb.example.test.", qtype: dns.TypeAAAA,
			want: []string{"web.default.lb.example.test.\t30\tIN\tAAAA\t2001:db8::1"}},
		{name: "SRV for a named port", services: []Service{web}, qname: "_http._tcp.web.default.lb.example.test.", qtype: dns.TypeSRV,
			want: []string{"_http._tcp.web.default.lb.example.test.\t30\tIN\tSRV\t0 100 80 web.default.lb.example.test."}},
		{name: "SRV for an unnamed port uses the number", services: []Service{web}, qname: "_53._udp.web.default.lb.example.test.", qtype: dns.TypeSRV,
			want: []string{"_53._udp.web.default.lb.example.test.\t30\tIN\tSRV\t0 100 53 web.default.lb.example.test."}},
		{name: "hostname inside the zone", services: []Service{web}, qname: "www.lb.example.test.", qtype: dns.TypeA,
			want: []string{"www.lb.example.test.\t30\tIN\tA\t192.0.2.10", "www.lb.example.test.\t30\tIN\tA\t192.0.2.11"}},
		{name: "hostname outside the zone is skipped", services: []Service{web}, qname: "shop.example.com.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "zone default TTL", services: []Service{{Namespace: "a", Name: "b", IPs: addrs("192.0.2.1")}}, cfg: &ZoneConfig{Origin: "lb.example.test", NameServers: testZoneConfig.NameServers, DefaultTTL: 60},
			qname: "b.a.lb.example.test.", qtype: dns.TypeA, want: []string{"b.a.lb.example.test.\t60\tIN\tA\t192.0.2.1"}},
		{name: "default TTL", services: []Service{{Namespace: "a", Name: "b", IPs: addrs("192.0.2.1")}}, qname: "b.a.lb.example.test.", qtype: dns.TypeA,
			want: []string{"b.a.lb.example.test.\t5\tIN\tA\t192.0.2.1"}},
		{name: "no IPs: name exists, no SRV", services: []Service{{Namespace: "a", Name: "b", Ports: []Port{{Name: "x", Port: 1}}}},
			qname: "_x._tcp.b.a.lb.example.test.", qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
		{name: "no IPs: NODATA at the name", services: []Service{{Namespace: "a", Name: "b"}}, qname: "b.a.lb.example.test.", qtype: dns.TypeA},
		{name: "namespace is an empty non-terminal", services: []Service{web}, qname: "default.lb.example.test.", qtype: dns.TypeA},
		{name: "glue for in-zone name server", qname: "ns1.lb.example.test.", qtype: dns.TypeA,
			want: []string{"ns1.lb.example.test.\t60\tIN\tA\t127.0.0.1"}},
		{name: "apex NS", qname: "lb.example.test.", qtype: dns.TypeNS,
			want: []string{"lb.example.test.\t60\tIN\tNS\tns1.lb.example.test.", "lb.example.test.\t60\tIN\tNS\tns2.example.net."}},
		{name: "hostname conflict goes to the first service by namespace/name",
			services: []Service{
				{Namespace: "b", Name: "two", IPs: addrs("192.0.2.2"), Hostnames: []string{"app.lb.example.test"}},
				{Namespace: "a", Name: "one", IPs: addrs("192.0.2.1"), Hostnames: []string{"app.lb.example.test"}},
			},
			qname: "app.lb.example.test.", qtype: dns.TypeA, want: []string{"app.lb.example.test.\t5\tIN\tA\t192.0.2.1"},
			problems: []string{"service b/two: hostname \"app.lb.example.test\": hostname already served for another service (a/one)"}},
		{name: "hostname cannot take a canonical name",
			services: []Service{
				{Namespace: "a", Name: "one", IPs: addrs("192.0.2.1"), Hostnames: []string{"two.b.lb.example.test"}},
				{Namespace: "b", Name: "two", IPs: addrs("192.0.2.2")},
			},
			qname: "two.b.lb.example.test.", qtype: dns.TypeA, want: []string{"two.b.lb.example.test.\t5\tIN\tA\t192.0.2.2"},
			problems: []string{"service a/one: hostname \"two.b.lb.example.test\": hostname already served for another service (b/two)"}},
		{name: "wildcard hostname refused",
			services: []Service{{Namespace: "a", Name: "one", IPs: addrs("192.0.2.1"), Hostnames: []string{"*.lb.example.test"}}},
			qname:    "x.lb.example.test.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			problems: []string{`service a/one: hostname "*.lb.example.test": wildcard names are not served`}},
		{name: "invalid name does not stop others",
			services: []Service{{Namespace: "a", Name: "bad..name", IPs: addrs("192.0.2.1")}, {Namespace: "a", Name: "ok", IPs: addrs("192.0.2.2")}},
			qname:    "ok.a.lb.example.test.", qtype: dns.TypeA, want: []string{"ok.a.lb.example.test.\t5\tIN\tA\t192.0.2.2"},
			problems: []string{`service a/bad..name: name "bad..name.a": not a valid DNS label pair`}},
		{name: "no namespace: name directly under the origin",
			services: []Service{{Name: "web", IPs: addrs("192.0.2.1")}},
			qname:    "web.lb.example.test.", qtype: dns.TypeA, want: []string{"web.lb.example.test.\t5\tIN\tA\t192.0.2.1"}},
		{name: "no namespace: SRV under the name",
			services: []Service{{Name: "web", IPs: addrs("192.0.2.1"), Ports: []Port{{Port: 8080, Protocol: "TCP"}}}},
			qname:    "_8080._tcp.web.lb.example.test.", qtype: dns.TypeSRV, want: []string{"_8080._tcp.web.lb.example.test.\t5\tIN\tSRV\t0 100 8080 web.lb.example.test."}},
		{name: "no namespace: a dotted name is refused",
			services: []Service{{Name: "a.b", IPs: addrs("192.0.2.1")}},
			qname:    "a.b.lb.example.test.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			problems: []string{`service a.b: name "a.b": not a valid DNS label`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testZoneConfig
			if tc.cfg != nil {
				cfg = *tc.cfg
			}
			z, problems, err := Build(cfg, tc.services)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range problems {
				var se *ServiceError
				if !errors.As(p, &se) {
					t.Errorf("problem %v is not a *ServiceError", p)
				}
				got = append(got, p.Error())
			}
			if !slices.Equal(got, tc.problems) {
				t.Errorf("problems = %q, want %q", got, tc.problems)
			}
			r := z.lookup(tc.qname, tc.qtype, 0, MaxAnswerAddrs)
			if r.rcode != tc.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.rcode], dns.RcodeToString[tc.rcode])
			}
			if ans := rrStrings(z, tc.qname, tc.qtype); !slices.Equal(ans, tc.want) {
				t.Errorf("answer =\n%s\nwant\n%s", strings.Join(ans, "\n"), strings.Join(tc.want, "\n"))
			}
			if len(tc.want) == 0 && len(r.ns) != 1 {
				t.Errorf("negative answer has %d authority records, want the SOA", len(r.ns))
			}
		})
	}
}

func TestBuildDeterministic(t *testing.T) {
	a := Service{Namespace: "a", Name: "x", IPs: addrs("192.0.2.1", "192.0.2.2")}
	b := Service{Namespace: "b", Name: "y", IPs: addrs("2001:db8::2"), Hostnames: []string{"y.lb.example.test"}}
	z1, _, _ := Build(testZoneConfig, []Service{a, b})
	b2 := b
	b2.IPs = addrs("2001:db8::2")
	z2, _, _ := Build(testZoneConfig, []Service{b2, {Namespace: "a", Name: "x", IPs: addrs("192.0.2.2", "192.0.2.1")}})
	if !z1.SameContent(z2) {
		t.Error("the same services in another order built a different zone")
	}
	if got, want := rrText(z1.Records()), rrText(z2.Records()); !slices.Equal(got, want) {
		t.Errorf("records differ:\n%s\n%s", got, want)
	}
	z3, _, _ := Build(testZoneConfig, []Service{a})
	if z1.SameContent(z3) {
		t.Error("a removed service left the zone content unchanged")
	}
	if !z1.SameContent(z1.WithSerial(7)) || z1.WithSerial(7).Serial() != 7 || z1.Serial() != 0 {
		t.Error("WithSerial changed the content or the original")
	}
}

func TestBuildConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  ZoneConfig
	}{
		{"no origin", ZoneConfig{NameServers: testZoneConfig.NameServers}},
		{"no name servers", ZoneConfig{Origin: "lb.example.test"}},
		{"in-zone name server without address", ZoneConfig{Origin: "lb.example.test", NameServers: []NameServer{{Name: "ns.lb.example.test"}}}},
		{"bad origin", ZoneConfig{Origin: "a..b", NameServers: testZoneConfig.NameServers}},
		// The controller's --dns-hostmaster and standalone's
		// dns.hostmaster both end here.
		{"hostmaster not a name", ZoneConfig{Origin: "lb.example.test", NameServers: testZoneConfig.NameServers, Hostmaster: "<script>"}},
		{"hostmaster mailbox with a space", ZoneConfig{Origin: "lb.example.test", NameServers: testZoneConfig.NameServers, Hostmaster: "dns admin@example.com"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Build(tc.cfg, nil); err == nil {
				t.Error("Build accepted an invalid config")
			}
		})
	}
}

func rrText(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = rr.String()
	}
	return out
}
