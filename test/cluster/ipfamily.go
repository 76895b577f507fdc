package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// IPv6 addressing, used when Options.IPFamilies includes IPv6. Every
// address is a ULA inside fd00:198:18::/48 (the Service range
// fd00:198:19::/112 aside), used only inside the namespaces the harness
// creates; the root namespace gets "unreachable" guard routes for both.
//
// The IPv4 plumbing of namespaces (addresses, routes) is there in every
// cluster, IPv6-only ones included: it is how the harness itself reaches
// pods and nodes. What Kubernetes sees follows Options.IPFamilies: node
// addresses, pod and host IPs, pod CIDRs, Service CIDRs, the kubernetes
// Service and kube-proxy's families.
const (
	bridgeIP6   = "fd00:198:18::1"
	bridgeCIDR6 = "fd00:198:18::1/64" // bridge, InternalIPs (::1:N), ExternalIPs (::2:N), client (::3:1)
	clientIP6   = "fd00:198:18::3:1"
	ulaRange6   = "fd00:198:18::/48"
	// ServiceCIDR6 is the cluster's IPv6 Service (ClusterIP) range.
	ServiceCIDR6 = "fd00:198:19::/112"
	// APIServiceIP6 is the ClusterIP of the kubernetes Service when IPv6
	// is the cluster's first family.
	APIServiceIP6 = "fd00:198:19::1"
	// PodCIDR6 covers every IPv6 pod CIDR: node n gets fd00:198:18:(100+n)::/64.
	PodCIDR6 = "fd00:198:18:100::/56"
)

// BridgeIP6 is the root namespace's IPv6 address on the nodes' bridge.
const BridgeIP6 = bridgeIP6

// ClientIP6 is the client namespace's IPv6 address, in clusters with IPv6.
const ClientIP6 = clientIP6

func nodeInternalIP6(n int) string { return fmt.Sprintf("fd00:198:18::1:%d", n) }
func nodeExternalIP6(n int) string { return fmt.Sprintf("fd00:198:18::2:%d", n) }
func nodePodCIDR6(n int) string    { return fmt.Sprintf("fd00:198:18:%d::/64", 100+n) }
func nodePodGateway6(n int) string { return fmt.Sprintf("fd00:198:18:%d::1", 100+n) }

// lightIP6 is light node i's IPv6 InternalIP; nothing answers there.
func lightIP6(i int) string { return fmt.Sprintf("fd00:198:18::4:%d", i) }

// podIP6 returns the IPv6 twin of a pod's IPv4 address 198.18.X.Y:
// fd00:198:18:(X-28)::Y for a node's pod (X = 128+n, so inside node n's
// pod CIDR), fd00:198:18:1X::Y for a light node's pod (routed nowhere).
func podIP6(ip4 string) string {
	a, err := netip.ParseAddr(ip4)
	if err != nil || !a.Is4() {
		return ""
	}
	b := a.As4()
	if b[2] >= 192 {
		return fmt.Sprintf("fd00:198:18:1%d::%d", b[2], b[3])
	}
	return fmt.Sprintf("fd00:198:18:%d::%d", int(b[2])-28, b[3])
}

// ParseIPFamilies parses the families of a cluster as the command line
// gives them: "ipv4", "ipv4,ipv6", "ipv6,ipv4" or "ipv6"; the first is the
// cluster's primary family.
func ParseIPFamilies(s string) ([]corev1.IPFamily, error) {
	var out []corev1.IPFamily
	for f := range strings.SplitSeq(s, ",") {
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "ipv4":
			out = append(out, corev1.IPv4Protocol)
		case "ipv6":
			out = append(out, corev1.IPv6Protocol)
		default:
			return nil, fmt.Errorf("IP family %q: want ipv4 or ipv6", f)
		}
	}
	if err := validIPFamilies(out); err != nil {
		return nil, err
	}
	return out, nil
}

func validIPFamilies(fams []corev1.IPFamily) error {
	if len(fams) > 2 || (len(fams) == 2 && fams[0] == fams[1]) {
		return fmt.Errorf("IP families %v: want one family, or IPv4 and IPv6 in either order", fams)
	}
	for _, f := range fams {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return fmt.Errorf("IP family %q: want IPv4 or IPv6", f)
		}
	}
	return nil
}

// families returns the cluster's IP families, primary first; IPv4 when
// none were asked for.
func (o *Options) families() []corev1.IPFamily {
	if len(o.IPFamilies) == 0 {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return o.IPFamilies
}

func (o *Options) hasIPv6() bool { return slices.Contains(o.families(), corev1.IPv6Protocol) }
func (o *Options) primaryIPv6() bool {
	return o.families()[0] == corev1.IPv6Protocol
}

// byFamily returns, in the cluster's family order, v4 and v6 (each when
// the cluster has that family and it is not empty).
func (o *Options) byFamily(v4, v6 string) []string {
	var out []string
	for _, f := range o.families() {
		switch {
		case f == corev1.IPv4Protocol && v4 != "":
			out = append(out, v4)
		case f == corev1.IPv6Protocol && v6 != "":
			out = append(out, v6)
		}
	}
	return out
}

// serviceCIDRs is --service-cluster-ip-range, primary family first.
func (o *Options) serviceCIDRs() string {
	return strings.Join(o.byFamily(ServiceCIDR, ServiceCIDR6), ",")
}

// apiServiceIP is the ClusterIP of the kubernetes Service.
func (o *Options) apiServiceIP() string {
	if o.primaryIPv6() {
		return APIServiceIP6
	}
	return APIServiceIP
}

// apiServerIP is where the API server listens and what it advertises: its
// family must be that of the primary Service range.
func (o *Options) apiServerIP() string {
	if o.primaryIPv6() {
		return bridgeIP6
	}
	return bridgeIP
}

// IPFamilies returns the cluster's IP families, primary first.
func (c *Cluster) IPFamilies() []corev1.IPFamily { return slices.Clone(c.opts.families()) }

// NodeIPsOf returns every namespace node's InternalIP of family by node
// name; empty when the cluster does not have that family.
func (c *Cluster) NodeIPsOf(family corev1.IPFamily) map[string]string {
	ips := map[string]string{}
	if !slices.Contains(c.opts.families(), family) {
		return ips
	}
	for _, n := range c.kubelet.nodeList() {
		if ip := n.internalIPOf(family); ip != "" {
			ips[n.name] = ip
		}
	}
	return ips
}

func (n *simNode) internalIPOf(f corev1.IPFamily) string {
	if f == corev1.IPv6Protocol {
		return n.internalIP6
	}
	return n.internalIP4
}

// nodeAddresses are the node's addresses as its kubelet reports them:
// InternalIPs, then ExternalIPs, each in the cluster's family order.
func (o *Options) nodeAddresses(n *simNode) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, ip := range o.byFamily(n.internalIP4, n.internalIP6) {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	for _, ip := range o.byFamily(n.externalIP4, n.externalIP6) {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip})
	}
	return out
}

// podIPs are a pod's IPs in the cluster's family order.
func (rt *podRuntime) podIPs() []string {
	v6 := podIP6(rt.ip)
	if rt.netns == rt.node.ns && rt.netns != "" || rt.ip == rt.node.internalIP4 {
		v6 = rt.node.internalIP6 // host network
	}
	return rt.k.c.opts.byFamily(rt.ip, v6)
}

// setupRoot6 adds the IPv6 side of setupRoot: the bridge address, the
// guard routes and the client namespace's address.
func (nw *network) setupRoot6(ctx context.Context) error {
	if err := run(ctx, "ip", "addr", "add", bridgeCIDR6, "dev", bridgeName, "nodad"); err != nil {
		return fmt.Errorf("adding the bridge's IPv6 address: %w", err)
	}
	for _, cidr := range []string{ulaRange6, ServiceCIDR6} {
		if err := nw.rootRoute(ctx, "unreachable", cidr, "metric", guardMetric); err != nil {
			return err
		}
	}
	return attach6(ctx, clientNS, clientIP6, "")
}

// attach6 gives namespace ns's eth0 (on the bridge) the IPv6 address ip
// and optionally extra, and a route to the IPv6 Service range.
func attach6(ctx context.Context, ns, ip, extra string) error {
	steps := [][]string{
		{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=0"},
		{"ip", "-n", ns, "addr", "add", ip + "/64", "dev", "eth0", "nodad"},
		{"ip", "-n", ns, "-6", "route", "add", ServiceCIDR6, "via", bridgeIP6},
	}
	if extra != "" {
		// Deprecated (preferred_lft 0): the node still answers on its
		// ExternalIP but sends from its InternalIP, as with IPv4.
		steps = append(steps, []string{"ip", "-n", ns, "addr", "add", extra + "/64", "dev", "eth0", "nodad", "preferred_lft", "0"})
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("adding IPv6 to %s: %w", ns, err)
		}
	}
	return nil
}

// setupNode6 adds the IPv6 side of setupNode: addresses, forwarding, the
// pod bridge's gateway, and ip6tables chains like the iptables ones.
func (nw *network) setupNode6(ctx context.Context, n int, ns string, external bool) error {
	ext := ""
	if external {
		ext = nodeExternalIP6(n)
	}
	if err := attach6(ctx, ns, nodeInternalIP6(n), ext); err != nil {
		return err
	}
	ip6 := func(args ...string) []string {
		return append([]string{"ip", "netns", "exec", ns, "ip6tables", "-w"}, args...)
	}
	steps := [][]string{
		{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "-n", ns, "addr", "add", nodePodGateway6(n) + "/64", "dev", "cbr0", "nodad"},
		ip6("-t", "raw", "-N", "PLT-FAULT"),
		ip6("-t", "raw", "-I", "PREROUTING", "-j", "PLT-FAULT"),
		ip6("-t", "mangle", "-N", "PLT-FAULT"),
		ip6("-t", "mangle", "-I", "POSTROUTING", "-j", "PLT-FAULT"),
		ip6("-t", "nat", "-N", "PLT-HOSTPORTS"),
		ip6("-t", "nat", "-I", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "PLT-HOSTPORTS"),
		ip6("-t", "nat", "-I", "OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "PLT-HOSTPORTS"),
		ip6("-t", "nat", "-I", "POSTROUTING", "-s", nodePodCIDR6(n), "-d", nodePodCIDR6(n), "-m", "conntrack", "--ctstate", "DNAT", "-j", "MASQUERADE"),
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("setting up IPv6 in node namespace %s: %w", ns, err)
		}
	}
	return nil
}

// routePodCIDR6 makes node n's IPv6 pod CIDR reachable from namespace ns
// (or the root namespace when ns is empty) through node n's InternalIP.
func (nw *network) routePodCIDR6(ctx context.Context, ns string, n int) error {
	if ns == "" {
		return nw.rootRoute(ctx, nodePodCIDR6(n), "via", nodeInternalIP6(n))
	}
	return run(ctx, "ip", "-n", ns, "-6", "route", "replace", nodePodCIDR6(n), "via", nodeInternalIP6(n))
}

// setupPod6 gives a pod namespace the IPv6 twin of its address and a
// default route through its node.
func setupPod6(ctx context.Context, n int, podNS, ip4 string) error {
	steps := [][]string{
		{"ip", "netns", "exec", podNS, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=0"},
		{"ip", "-n", podNS, "addr", "add", podIP6(ip4) + "/64", "dev", "eth0", "nodad"},
		{"ip", "-n", podNS, "-6", "route", "add", "default", "via", nodePodGateway6(n)},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("setting up IPv6 in pod namespace %s: %w", podNS, err)
		}
	}
	return nil
}

// iptablesFor returns the iptables command of ip's family.
func iptablesFor(ip string) string {
	if a, err := netip.ParsePrefix(ip); err == nil && a.Addr().Is6() {
		return "ip6tables"
	}
	if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
		return "ip6tables"
	}
	return "iptables"
}

// iptablesTools are the iptables commands whose chains the harness made
// in node namespaces.
func (o *Options) iptablesTools() []string {
	if o.hasIPv6() {
		return []string{"iptables", "ip6tables"}
	}
	return []string{"iptables"}
}
