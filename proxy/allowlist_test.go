package proxy

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
)

// TestAllowListAllows: the rule that lets probes through a Service's
// source ranges, in both families, and nobody else.
func TestAllowListAllows(t *testing.T) {
	a := AllowList{
		Ranges:  SourceRanges{netip.MustParsePrefix("198.18.3.0/24"), netip.MustParsePrefix("fd00:198:18::3:0/112")},
		Probers: []netip.Addr{netip.MustParseAddr("198.18.129.7"), netip.MustParseAddr("fd00:198:18:101::7")},
	}
	for addr, want := range map[string]bool{
		"198.18.3.1":          true,  // in the ranges
		"::ffff:198.18.3.1":   true,  // the same, mapped
		"fd00:198:18::3:1":    true,  // in the IPv6 range
		"198.18.129.7":        true,  // a prober
		"fd00:198:18:101::7":  true,  // a prober over IPv6
		"198.18.129.8":        false, // the prober's neighbour
		"fd00:198:18:101::8":  false,
		"198.18.4.1":          false, // outside
		"::ffff:198.18.129.8": false,
	} {
		if got := a.Allows(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Allows(%s) = %v, want %v", addr, got, want)
		}
	}
	if !(AllowList{Probers: a.Probers}).Allows(netip.MustParseAddr("203.0.113.1")) {
		t.Errorf("no ranges must allow every client")
	}
	if ClosedAllowList.Allows(netip.MustParseAddr("198.18.3.1")) {
		t.Errorf("a closed list allowed a client")
	}
	// Rules: the probers are sources of their own family only.
	rs := BuildRules(netip.MustParseAddr("198.19.0.10"), []Port{{TCP, 80}}, a, NodePortTarget{})
	var sources []string
	for _, r := range rs.Rules {
		if i := slices.Index(r.Spec, "-s"); i >= 0 && r.Name == chainForward && slices.Contains(r.Spec, "ACCEPT") && !slices.Contains(r.Spec, "--sport") {
			sources = append(sources, r.Spec[i+1])
		}
	}
	if want := []string{"198.18.3.0/24", "198.18.129.7/32"}; !slices.Equal(sources, want) {
		t.Errorf("IPv4 FORWARD sources %q, want %q", sources, want)
	}
	closed := BuildRules(netip.MustParseAddr("198.19.0.10"), []Port{{TCP, 80}}, ClosedAllowList, NodePortTarget{})
	if n := strings.Count(strings.Join(ruleStrings(closed), "\n"), "-j DROP"); n != 1 {
		t.Errorf("closed list: %d DROP rules, want 1:\n%s", n, strings.Join(ruleStrings(closed), "\n"))
	}
	// The proxy and the controller name a list alike.
	if a.Hash() != contract.AllowListHash(a.Ranges, a.Probers) || (AllowList{}).Hash() != "all" || ClosedAllowList.Hash() != "closed" {
		t.Errorf("hashes %s %s %s", a.Hash(), AllowList{}.Hash(), ClosedAllowList.Hash())
	}
	ranges, probers, err := contract.ParseAllowList(contract.AllowListAnnotations(a.Ranges, a.Probers))
	if err != nil || contract.AllowListHash(ranges, probers) != a.Hash() {
		t.Errorf("annotations do not round-trip: %v", err)
	}
	if _, err := AllowListFrom(map[string]string{contract.AnnotationSourceRanges: "198.18.3.0/33"}); err == nil ||
		!strings.Contains(err.Error(), contract.AnnotationSourceRanges) {
		t.Errorf("bad annotation: %v, want an error naming it", err)
	}
}

func ruleStrings(rs RuleSet) []string {
	var out []string
	for _, r := range rs.Rules {
		out = append(out, r.String())
	}
	return out
}

// TestSetAllowListIPTables: a new list replaces the FORWARD allow-list in
// place (the DNAT rules untouched), the chain is never without its DROP
// while the list restricts, and the metrics name the list in force.
func TestSetAllowListIPTables(t *testing.T) {
	ipt := newFakeIPTables()
	cfg := fakeIPTablesConfig(t, ipt)
	cfg.AwaitAllowList = true
	p := startProxy(t, cfg)
	_, ctx := ktesting.NewTestContext(t)
	srv := p.httpServer(t)
	fwd := Chain{"filter", chainForward}
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the allow-list") {
		t.Errorf("healthz before the list: %d %q", code, body)
	}
	if rules := ipt.chain(fwd); !slices.ContainsFunc(rules, func(r string) bool { return strings.HasSuffix(r, "-j DROP") }) ||
		slices.ContainsFunc(rules, func(r string) bool {
			return strings.Contains(r, "-s ") && strings.HasSuffix(r, "ACCEPT") && !strings.Contains(r, "--sport")
		}) {
		t.Errorf("closed proxy's FORWARD rules admit someone: %q", rules)
	}
	dnat := ipt.chain(Chain{"nat", chainPrerouting})

	var deletes, drops []int
	ipt.set(func(f *fakeIPTables) {
		f.observe = func(op string, c Chain) {
			if c == fwd {
				deletes = append(deletes, 1)
				n := 0
				for _, r := range ipt.chains[fwd] {
					if strings.HasSuffix(r, "-j DROP") {
						n++
					}
				}
				drops = append(drops, n)
			}
		}
	})
	a := AllowList{Ranges: SourceRanges{netip.MustParsePrefix("198.18.3.0/24")}, Probers: []netip.Addr{netip.MustParseAddr("198.18.129.7")}}
	if err := p.SetAllowList(ctx, a); err != nil {
		t.Fatal(err)
	}
	ipt.set(func(f *fakeIPTables) { f.observe = nil })
	if slices.Contains(drops, 0) {
		t.Errorf("the FORWARD chain lost its DROP while the list changed (DROP rules after each delete: %v)", drops)
	}
	rules := ipt.chain(fwd)
	for _, want := range []string{"-s 198.18.3.0/24", "-s 198.18.129.7/32"} {
		if !slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, want) }) {
			t.Errorf("FORWARD rules %q lack %s", rules, want)
		}
	}
	if got := ipt.chain(Chain{"nat", chainPrerouting}); !slices.Equal(got, dnat) {
		t.Errorf("DNAT rules changed: %q, were %q", got, dnat)
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz with the list: %d", code)
	}
	if v := testutil.ToFloat64(p.metrics.AllowList.WithLabelValues(a.Hash())); v != 1 {
		t.Errorf("allow_list_info{hash=%s} = %v", a.Hash(), v)
	}
	// No ranges: everyone, no DROP.
	if err := p.SetAllowList(ctx, AllowList{}); err != nil {
		t.Fatal(err)
	}
	if rules := ipt.chain(fwd); slices.ContainsFunc(rules, func(r string) bool { return strings.HasSuffix(r, "-j DROP") }) {
		t.Errorf("open list keeps a DROP: %q", rules)
	}
	// A list that cannot be installed closes the proxy.
	ipt.set(func(f *fakeIPTables) { f.failAppendMatching = "198.18.9.0/24" })
	err := p.SetAllowList(ctx, AllowList{Ranges: SourceRanges{netip.MustParsePrefix("198.18.9.0/24")}})
	ipt.set(func(f *fakeIPTables) { f.failAppendMatching = "" })
	if err == nil {
		t.Fatal("no error for a list that could not be installed")
	}
	if !p.AllowListNow().Closed {
		t.Errorf("proxy not closed after a failed list: %s", p.AllowListNow())
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("healthz after a failed list: %d", code)
	}
	if v := testutil.ToFloat64(p.metrics.AllowListUpdates.WithLabelValues("rejected")); v != 1 {
		t.Errorf("allow_list_updates_total{rejected} = %v", v)
	}
}

// TestSetAllowListUserspace: a changed list refuses new clients at once
// and cuts the connections and sessions of clients it no longer allows.
func TestSetAllowListUserspace(t *testing.T) {
	echoPort := tcpBackend(t, echo)
	udpPort := udpEcho(t)
	cfg := userspaceConfig(Port{TCP, echoPort}, Port{UDP, udpPort})
	cfg.SourceRanges = nil
	cfg.AwaitAllowList = true
	p := startProxy(t, cfg)
	_, ctx := ktesting.NewTestContext(t)
	dst := netip.AddrPortFrom(proxyAddr, echoPort)

	if _, err := allowRoundTrip(allowedAddr, dst); err == nil {
		t.Fatalf("a proxy waiting for its list served a client")
	}
	if err := p.SetAllowList(ctx, AllowList{Ranges: SourceRanges{netip.MustParsePrefix("127.0.0.4/31")}}); err != nil {
		t.Fatal(err)
	}
	held, err := dialFrom(refusedAddr, dst) // .5 is inside .4/31
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Read(make([]byte, 1)); err != nil {
		t.Fatalf("allowed client not served: %v", err)
	}
	udp, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(refusedAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(proxyAddr, udpPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if _, err := udp.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = udp.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := udp.Read(make([]byte, 16)); err != nil {
		t.Fatalf("allowed UDP client not answered: %v", err)
	}

	// .5 leaves the list, .4 stays.
	if err := p.SetAllowList(ctx, AllowList{Ranges: SourceRanges{netip.MustParsePrefix("127.0.0.4/32")}}); err != nil {
		t.Fatal(err)
	}
	_ = held.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := held.Write([]byte("b")); err == nil {
		if _, err := held.Read(make([]byte, 1)); err == nil {
			t.Errorf("the connection of a client no longer allowed goes on")
		}
	}
	if _, err := allowRoundTrip(refusedAddr, dst); err == nil {
		t.Errorf("a client no longer allowed was served")
	}
	if _, err := allowRoundTrip(allowedAddr, dst); err != nil {
		t.Errorf("a client still allowed was refused: %v", err)
	}
	_, _ = udp.Write([]byte("y"))
	_ = udp.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := udp.Read(make([]byte, 16)); err == nil {
		t.Errorf("a UDP client no longer allowed was answered")
	}
}

// allowRoundTrip connects from src to dst, sends a byte and reads it back.
func allowRoundTrip(src netip.Addr, dst netip.AddrPort) ([]byte, error) {
	c, err := dialFrom(src, dst)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("z")); err != nil {
		return nil, err
	}
	b := make([]byte, 1)
	_, err = c.Read(b)
	return b, err
}
