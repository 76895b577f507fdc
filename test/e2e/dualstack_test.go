package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// TestDualStack runs pulselb on one dual-stack cluster of four nodes with
// ExternalIPs in both families: probers, the ProbeReport CRD and the
// controller with probe reports and DNS. shop/web is PreferDualStack with
// IPv6 first; its status, probes, proxy rules, traffic, DNS records and
// failover are checked in both families, and the PROXY protocol's client
// address in both, then address-type per family and a SingleStack IPv6
// Service. Each step is a method of dualStackEnv, run in this order on the
// same cluster.
func TestDualStack(t *testing.T) {
	e := newDualStackEnv(t)
	t.Run("StatusInFamilyOrder", e.statusInFamilyOrder)
	if t.Failed() {
		t.Fatalf("shop/web never published; controller log %s; pods: %s", e.ctl.LogPath, describePods(e.ctx, e.cs, systemNamespace))
	}
	t.Run("EachFamilyProbedOnItsOwnAddress", e.eachFamilyProbedOnItsOwnAddress)
	t.Run("ProxyRulesInBothFamilies", e.proxyRulesInBothFamilies)
	t.Run("ClientReachesBothFamilies", e.clientReachesBothFamilies)
	// The header port with version 1, whose text form differs by family
	// (TCP4, TCP6); TestPlanned checks version 2 over IPv4.
	t.Run("ClientAddressInBothFamilies", func(t *testing.T) {
		testClientAddress(e.ctx, t, e.cs, clientAddressCase{namespace: "shop", selector: map[string]string{"app": "web"},
			backendPort: intstr.FromString("http"), version: "v1",
			policy: corev1.IPFamilyPolicyRequireDualStack, families: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}})
	})
	t.Run("DNSAnswersAAndAAAA", e.dnsAnswersAAndAAAA)
	t.Run("AddressTypePerFamily", e.addressTypePerFamily)
	t.Run("NodeBlackholedLeavesBothFamilies", e.nodeBlackholedLeavesBothFamilies)
}

// dualStackEnv is TestDualStack's cluster: four dual-stack nodes with
// ExternalIPs, the probers, the controller with its DNS server on dnsAddr,
// and shop/web, PreferDualStack with IPv6 first, whose every status write
// rec records.
type dualStackEnv struct {
	ctx     context.Context
	c       *cluster.Cluster
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	dnsAddr string
	ctl     *controllerProcess
	addrs   clusterAddresses
	rec     *scenario.StatusRecorder
	// ingress is shop/web's status and webNodes its proxy nodes, as
	// StatusInFamilyOrder found them.
	ingress, webNodes []string
}

// newDualStackEnv starts the cluster, the probers (one ProbeReport from
// every node), the controller, and shop/web.
func newDualStackEnv(t *testing.T) *dualStackEnv {
	c := cluster.ForTest(t, cluster.Options{Nodes: 4, ExternalIPs: true, WaitForMachine: 30 * time.Minute,
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}})
	ctx := t.Context()
	cs := c.Client
	dyn := installProbers(t, c)
	poll(ctx, t, 90*time.Second, "a ProbeReport from every node", func() bool {
		return len(listReports(ctx, t, dyn)) == 4
	})
	dnsAddr := freeLoopbackPort(t)
	ctl := startController(t, c, dnsAddr, "--probe-reports=true")
	addrs := nodeAddresses(ctx, t, cs)

	createBackend(ctx, t, cs, "web", 2, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	rec := scenario.RecordStatus(ctx, cs, "shop", "web")
	createDualStackLB(ctx, t, cs, "web", 80, nil, corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)
	return &dualStackEnv{ctx: ctx, c: c, cs: cs, dyn: dyn, dnsAddr: dnsAddr, ctl: ctl, addrs: addrs, rec: rec}
}

// proxyNodes returns the nodes of svc's ready proxy pods, sorted.
func (e *dualStackEnv) proxyNodes(t *testing.T, svc string) []string {
	var out []string
	for _, p := range readyPods(e.ctx, t, e.cs, systemNamespace, contract.LabelServiceName+"="+svc) {
		out = append(out, p.Spec.NodeName)
	}
	slices.Sort(out)
	return out
}

// published waits until svc's status lists exactly want(proxy nodes), in
// that order, and, if probed, each proxy node is probed Up on both its
// internal addresses; it returns the status and the proxy nodes.
func (e *dualStackEnv) published(t *testing.T, svc string, timeout time.Duration, want func(nodes []string) []string, probed bool) ([]string, []string) {
	t.Helper()
	ctx, cs, addrs := e.ctx, e.cs, e.addrs
	var got, nodes []string
	poll(ctx, t, timeout, "shop/"+svc+" published on its 2 proxy nodes as expected", func() bool {
		e.ctl.alive(t)
		nodes = e.proxyNodes(t, svc)
		if len(nodes) != 2 {
			return false
		}
		s, err := cs.CoreV1().Services("shop").Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = got[:0]
		for _, in := range s.Status.LoadBalancer.Ingress {
			got = append(got, in.IP)
		}
		if !sameAddresses(got, want(nodes)) {
			return false
		}
		if !probed {
			return true
		}
		reports := listReports(ctx, t, e.dyn)
		for _, n := range nodes {
			for _, a := range []string{addrs[n].internal[corev1.IPv4Protocol], addrs[n].internal[corev1.IPv6Protocol]} {
				if upVotesAt(reports, "shop/"+svc, 80, n, a) < 2 {
					return false
				}
			}
		}
		return true
	})
	return got, nodes
}

// webWant is what shop/web (IPv6 first, address-type auto, so its nodes'
// ExternalIPs) publishes on nodes.
func (e *dualStackEnv) webWant(nodes []string) []string {
	return e.addrs.list(nodes, "external", corev1.IPv6Protocol, corev1.IPv4Protocol)
}

// statusInFamilyOrder waits until shop/web publishes its proxy nodes' ExternalIPs,
// IPv6 first, each node probed Up in both families, and keeps its status
// and proxy nodes for the later steps.
func (e *dualStackEnv) statusInFamilyOrder(t *testing.T) {
	start := time.Now()
	e.ingress, e.webNodes = e.published(t, "web", 90*time.Second, e.webWant, true)
	t.Logf("shop/web published %v after %s", e.ingress, time.Since(start).Round(time.Millisecond))
}

// eachFamilyProbedOnItsOwnAddress checks that every proxy node of shop/web
// is probed Up on its internal address of each family, and on no other
// address.
func (e *dualStackEnv) eachFamilyProbedOnItsOwnAddress(t *testing.T) {
	ctx := e.ctx
	reports := listReports(ctx, t, e.dyn)
	for _, n := range e.webNodes {
		for _, fam := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
			a := e.addrs[n].internal[fam]
			if v := upVotesAt(reports, "shop/web", 80, n, a); v < 2 {
				t.Errorf("%s of %s: %d Up results at %s, want at least 2", fam, n, v, net.JoinHostPort(a, "80"))
			}
		}
		for _, r := range reports {
			for _, res := range r.Status.Results {
				if res.Service == "shop/web" && res.Node == n && !slices.Contains([]string{
					net.JoinHostPort(e.addrs[n].internal[corev1.IPv4Protocol], "80"),
					net.JoinHostPort(e.addrs[n].internal[corev1.IPv6Protocol], "80")}, res.Address) {
					t.Errorf("report %s probed %s's port at %s, not one of its own addresses", r.Name, n, res.Address)
				}
			}
		}
	}
}

// proxyRulesInBothFamilies checks that every proxy of shop/web has a DNAT
// rule to each of its ClusterIPs, in iptables and ip6tables.
func (e *dualStackEnv) proxyRulesInBothFamilies(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	svc, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("shop/web ClusterIPs %v, want one per family", svc.Spec.ClusterIPs)
	}
	for _, p := range readyPods(ctx, t, cs, systemNamespace, contract.LabelServiceName+"=web") {
		for _, ip := range svc.Spec.ClusterIPs {
			tool := "iptables"
			if strings.Contains(ip, ":") {
				tool = "ip6tables"
			}
			out, err := c.PodExec(ctx, systemNamespace, p.Name, tool, "-w", "-t", "nat", "-S")
			if err != nil {
				t.Fatalf("%s in %s: %v %s", tool, p.Name, err, out)
			}
			if !strings.Contains(string(out), "DNAT") || !strings.Contains(string(out), ip) {
				t.Errorf("%s nat rules of %s have no DNAT to %s:\n%s", tool, p.Name, ip, out)
			}
		}
	}
}

// clientReachesBothFamilies checks that the client reaches a backend of
// shop/web through each of its published addresses.
func (e *dualStackEnv) clientReachesBothFamilies(t *testing.T) {
	ctx, c := e.ctx, e.c
	for _, ip := range e.ingress {
		url := "http://" + net.JoinHostPort(ip, "80") + "/"
		poll(ctx, t, 30*time.Second, "an echo pod answering "+url+" from the client namespace", func() bool {
			out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
			name, _ := field(string(out), "name")
			return err == nil && strings.HasPrefix(name, "shop/web-")
		})
	}
}

// dnsAnswersAAndAAAA checks that the controller's DNS server answers A and
// AAAA queries for shop/web with the published addresses of each family.
func (e *dualStackEnv) dnsAnswersAAndAAAA(t *testing.T) {
	ctx := e.ctx
	name := "web.shop." + controllerZone
	for _, q := range []struct {
		qtype uint16
		fam   corev1.IPFamily
	}{{dns.TypeA, corev1.IPv4Protocol}, {dns.TypeAAAA, corev1.IPv6Protocol}} {
		want := e.addrs.list(e.webNodes, "external", q.fam)
		var got []string
		poll(ctx, t, 10*time.Second, dns.TypeToString[q.qtype]+" "+name+" answering the status' addresses", func() bool {
			r, err := dnsQuery(e.dnsAddr, name, q.qtype)
			if err != nil || r.Rcode != dns.RcodeSuccess {
				return false
			}
			got = answerIPs(r)
			return slices.Equal(got, want)
		})
	}
}

// addressTypePerFamily creates three Services, internal and external
// dual-stack and a SingleStack IPv6 one, and checks that each publishes the
// addresses of its type in its families' order.
func (e *dualStackEnv) addressTypePerFamily(t *testing.T) {
	ctx, cs := e.ctx, e.cs
	cases := []struct {
		svc, addressType string
		port             int32
		policy           corev1.IPFamilyPolicy
		families         []corev1.IPFamily
		want             func(nodes []string) []string
	}{
		{"internal", "internal", 81, corev1.IPFamilyPolicyPreferDualStack, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			func(n []string) []string {
				return e.addrs.list(n, "internal", corev1.IPv4Protocol, corev1.IPv6Protocol)
			}},
		{"external", "external", 82, corev1.IPFamilyPolicyRequireDualStack, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			func(n []string) []string {
				return e.addrs.list(n, "external", corev1.IPv4Protocol, corev1.IPv6Protocol)
			}},
		// SingleStack IPv6: only IPv6 addresses, both types.
		{"v6only", "both", 83, corev1.IPFamilyPolicySingleStack, []corev1.IPFamily{corev1.IPv6Protocol},
			func(n []string) []string {
				return e.addrs.list(n, "both", corev1.IPv6Protocol)
			}},
	}
	for _, tc := range cases {
		createBackendFor(ctx, t, cs, tc.svc)
		createDualStackLB(ctx, t, cs, tc.svc, tc.port, map[string]string{contract.AnnotationAddressType: tc.addressType}, tc.policy, tc.families...)
	}
	for _, tc := range cases {
		t.Run(tc.svc, func(t *testing.T) {
			got, _ := e.published(t, tc.svc, 90*time.Second, tc.want, false)
			t.Logf("shop/%s (address-type %s, %s %v) published %v", tc.svc, tc.addressType, tc.policy, tc.families, got)
		})
	}
}

// nodeBlackholedLeavesBothFamilies blackholes a proxy node of shop/web:
// both its addresses leave the status within 6 s, a proxy on another node
// is published, and the status is never written empty.
func (e *dualStackEnv) nodeBlackholedLeavesBothFamilies(t *testing.T) {
	ctx, c, ctl := e.ctx, e.c, e.ctl
	e.published(t, "web", 60*time.Second, e.webWant, true)
	victim := e.webNodes[0]
	gone := []string{e.addrs[victim].external[corev1.IPv4Protocol], e.addrs[victim].external[corev1.IPv6Protocol]}
	writesBefore := e.rec.Count()
	fault, left := blackholeUntilGone(ctx, t, c, e.rec, ctl, victim, gone...)
	start := fault.Start
	for i, ip := range gone {
		dropped := left[i]
		t.Logf("blackholed %s: %s left the status %s after the fault", victim, ip, dropped.Round(time.Millisecond))
		// The bound of TestHealth's IPv4 failover on the same machine.
		if dropped > 6*time.Second {
			t.Errorf("%s left after %s, want at most 6s", ip, dropped)
		}
	}
	after, _ := e.published(t, "web", 60*time.Second, e.webWant, true)
	t.Logf("a proxy on another node published after %s: %v", time.Since(start).Round(time.Millisecond), after)
	for _, w := range e.rec.Since(writesBefore) {
		if len(w.IPs) == 0 {
			t.Errorf("status written empty at %s", w.At.Format(time.RFC3339Nano))
		}
	}
}

// familyAddresses are a node's addresses by family.
type familyAddresses struct {
	internal, external map[corev1.IPFamily]string
}

// clusterAddresses are every node's addresses, by node name.
type clusterAddresses map[string]familyAddresses

// nodeAddresses reads every node's first InternalIP and ExternalIP of each
// family from the API.
func nodeAddresses(ctx context.Context, t *testing.T, cs kubernetes.Interface) clusterAddresses {
	t.Helper()
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := clusterAddresses{}
	for _, n := range l.Items {
		fa := familyAddresses{internal: map[corev1.IPFamily]string{}, external: map[corev1.IPFamily]string{}}
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			fam := corev1.IPv4Protocol
			if ip.Is6() {
				fam = corev1.IPv6Protocol
			}
			m := map[corev1.NodeAddressType]map[corev1.IPFamily]string{corev1.NodeInternalIP: fa.internal, corev1.NodeExternalIP: fa.external}[a.Type]
			if m != nil && m[fam] == "" {
				m[fam] = a.Address
			}
		}
		out[n.Name] = fa
	}
	return out
}

// list returns nodes' addresses of kind (internal, external or both) in
// families' order, each family's sorted as pulselb orders them.
func (ca clusterAddresses) list(nodes []string, kind string, families ...corev1.IPFamily) []string {
	var out []string
	for _, f := range families {
		var fam []netip.Addr
		for _, n := range nodes {
			if kind != "external" {
				fam = append(fam, netip.MustParseAddr(ca[n].internal[f]))
			}
			if kind != "internal" {
				fam = append(fam, netip.MustParseAddr(ca[n].external[f]))
			}
		}
		slices.SortFunc(fam, netip.Addr.Compare)
		for _, a := range fam {
			out = append(out, a.String())
		}
	}
	return out
}

func createBackendFor(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	createBackend(ctx, t, cs, name, 1, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
}

// createDualStackLB creates LoadBalancer Service shop/name on port, in
// front of app=name's port "http", with the families and policy given.
func createDualStackLB(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, port int32, annotations map[string]string,
	policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) {
	t.Helper()
	if _, err := cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			IPFamilyPolicy: &policy, IPFamilies: families,
			Ports: []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

// upVotesAt counts the reports saying port of service on node is Up when
// probed at ip.
func upVotesAt(reports []scenario.ProbeReport, service string, port int32, node, ip string) int {
	want := net.JoinHostPort(ip, fmt.Sprint(port))
	n := 0
	for _, r := range reports {
		for _, res := range r.Status.Results {
			if res.Service == service && res.Port == port && res.Node == node && res.Address == want && res.State == "Up" {
				n++
			}
		}
	}
	return n
}

// answerIPs returns the A and AAAA addresses of an answer, sorted.
func answerIPs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch a := rr.(type) {
		case *dns.A:
			out = append(out, a.A.String())
		case *dns.AAAA:
			out = append(out, a.AAAA.String())
		}
	}
	slices.SortFunc(out, func(x, y string) int { return netip.MustParseAddr(x).Compare(netip.MustParseAddr(y)) })
	return out
}

// TestIPv6Only runs pulselb on an IPv6-only cluster of four nodes (the
// API server, the kubernetes Service, nodes, pods and Services all IPv6):
// node beacons are probed over IPv6, shop/web is published on its proxy
// nodes' IPv6 InternalIPs, and a blackholed node leaves the status within
// the IPv4 failover bound.
func TestIPv6Only(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 4, WaitForMachine: 30 * time.Minute,
		IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}})
	ctx := t.Context()
	cs := c.Client
	dyn := installProbers(t, c)
	nodeIP := c.NodeIPsOf(corev1.IPv6Protocol)
	t.Run("BeaconsOverIPv6", func(t *testing.T) {
		// Every node's beacon Up by at least two probers, at its IPv6 address.
		poll(ctx, t, 120*time.Second, "every node's beacon probed Up over IPv6", func() bool {
			up := map[string]int{}
			for _, r := range listReports(ctx, t, dyn) {
				for _, b := range r.Status.Beacons {
					if b.State == "Up" && strings.HasPrefix(b.Address, "["+nodeIP[b.Node]+"]:") {
						up[b.Node]++
					}
				}
			}
			for n := range nodeIP {
				if up[n] < 2 {
					return false
				}
			}
			return true
		})
	})
	if t.Failed() {
		t.Fatalf("no beacons over IPv6; pods: %s", describePods(ctx, cs, systemNamespace))
	}
	ctl := startController(t, c, freeLoopbackPort(t), "--probe-reports=true")
	createBackend(ctx, t, cs, "web", 2, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	rec := scenario.RecordStatus(ctx, cs, "shop", "web")
	createHealthLB(ctx, t, cs, "web", nil, []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}})

	webUp := func(t *testing.T, timeout time.Duration) []string {
		t.Helper()
		var nodes []string
		poll(ctx, t, timeout, "shop/web published on its 2 proxy nodes' IPv6 addresses, each probed Up", func() bool {
			ctl.alive(t)
			nodes = nodes[:0]
			for _, p := range readyPods(ctx, t, cs, systemNamespace, proxyAppSelector) {
				nodes = append(nodes, p.Spec.NodeName)
			}
			if len(nodes) != 2 {
				return false
			}
			if !sameAddresses(rec.Last(), []string{nodeIP[nodes[0]], nodeIP[nodes[1]]}) {
				return false
			}
			reports := listReports(ctx, t, dyn)
			return upVotesAt(reports, "shop/web", 80, nodes[0], nodeIP[nodes[0]]) >= 2 && upVotesAt(reports, "shop/web", 80, nodes[1], nodeIP[nodes[1]]) >= 2
		})
		return nodes
	}
	var nodes []string
	t.Run("Published", func(t *testing.T) {
		nodes = webUp(t, 90*time.Second)
		for _, ip := range rec.Last() {
			url := "http://" + net.JoinHostPort(ip, "80") + "/"
			poll(ctx, t, 30*time.Second, "an echo pod answering "+url+" from the client namespace", func() bool {
				out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
				name, _ := field(string(out), "name")
				return err == nil && strings.HasPrefix(name, "shop/web-")
			})
		}
	})
	if t.Failed() {
		t.Fatalf("shop/web never published; controller log %s; pods: %s", ctl.LogPath, describePods(ctx, cs, systemNamespace))
	}
	t.Run("NodeBlackholed", func(t *testing.T) {
		victim := nodes[0]
		ip := nodeIP[victim]
		fault, gone := blackholeUntilGone(ctx, t, c, rec, ctl, victim, ip)
		start, dropped := fault.Start, gone[0]
		t.Logf("blackholed %s: %s left the status %s after the fault", victim, ip, dropped.Round(time.Millisecond))
		if dropped > 6*time.Second {
			t.Errorf("failover took %s, want at most 6s", dropped)
		}
		after := webUp(t, 60*time.Second)
		t.Logf("proxies on %v published after %s: %v", after, time.Since(start).Round(time.Millisecond), rec.Last())
	})
}

// sameAddresses reports whether got holds want's addresses with an address
// of the same IP family at each place: the families' order is the
// Service's, but within a family the status keeps the addresses already
// published in their places and adds the others after them, so that order
// depends on what was published before.
func sameAddresses(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, errG := netip.ParseAddr(got[i])
		w, errW := netip.ParseAddr(want[i])
		if errG != nil || errW != nil || g.Is4() != w.Is4() {
			return false
		}
	}
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}
