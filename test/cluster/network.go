package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Addressing. Everything the harness creates lives in 198.18.0.0/15 and the
// service range 198.19.0.0/16; 198.18.100.0/24–198.18.127.0/24 and
// 198.18.200.0/24 belong to other tests and are never used.
const (
	bridgeName   = "plt-br0"
	bridgeCIDR   = "198.18.0.1/22" // bridge, node InternalIPs (.1.x), ExternalIPs (.2.x), clients (.3.x)
	bridgeIP     = HostIP
	bridgePrefix = 22
	clientNS     = "plt-client"
	clientIP     = "198.18.3.1"
	// ServiceCIDR is the cluster's Service (ClusterIP) range.
	ServiceCIDR = "198.19.0.0/16"
	// APIServiceIP is the ClusterIP of the kubernetes Service.
	APIServiceIP = "198.19.0.1"
	// PodCIDR covers every pod CIDR: node n gets 198.18.(128+n).0/24.
	PodCIDR = "198.18.128.0/17"
	// maxNetNodes keeps pod CIDRs below 198.18.192.0/18, where light-node pod
	// addresses come from (they carry no traffic).
	maxNetNodes = 63
	// maxLightNodes fit light-node InternalIPs into 198.18.4.0/22.
	maxLightNodes = 1000
	// guardMetric marks the root-namespace "unreachable" routes that keep
	// traffic for our ranges from ever leaving the machine.
	guardMetric = "4242"
)

func nodeInternalIP(n int) string { return fmt.Sprintf("198.18.1.%d", n) }
func nodeExternalIP(n int) string { return fmt.Sprintf("198.18.2.%d", n) }
func nodePodCIDR(n int) string    { return fmt.Sprintf("198.18.%d.0/24", 128+n) }
func nodePodGateway(n int) string { return fmt.Sprintf("198.18.%d.1", 128+n) }

// bridgeMAC returns the fixed, locally administered MAC address of bridge i:
// 0 is the root bridge, n the pod bridge of node n. A bridge created without
// one takes the lowest MAC of its ports and changes it whenever a port with
// a lower one joins: every neighbour that had resolved the bridge's address
// then sends to a MAC nobody answers until its ARP entry expires (up to about
// 45 s), which cut off a node's kube-proxy from the API server when a later
// node joined the bridge. An address set at creation never changes.
func bridgeMAC(i int) string {
	return fmt.Sprintf("02:c6:12:%02x:%02x:01", (i>>8)&0xff, i&0xff)
}

// addBridge returns the command creating bridge name with bridgeMAC(i), in
// namespace ns (the root namespace when ns is empty).
func addBridge(ns, name string, i int) []string {
	cmd := []string{"ip"}
	if ns != "" {
		cmd = append(cmd, "-n", ns)
	}
	return append(cmd, "link", "add", name, "address", bridgeMAC(i), "type", "bridge")
}

// lightPodIP returns the i-th pod address handed to pods on light nodes,
// from 198.18.192.0/21; nothing answers there and nothing routes there.
func lightPodIP(i int) string {
	a := netip.MustParseAddr("198.18.192.2")
	for range i % 2040 {
		a = a.Next()
	}
	return a.String()
}

func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("running %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func netnsExists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// network creates and records the namespaces, links and rules of a cluster.
type network struct {
	rec *record
}

func (nw *network) cmd(ctx context.Context, args ...string) error {
	return run(ctx, args[0], args[1:]...)
}

// addNetns creates network namespace ns with loopback up.
func (nw *network) addNetns(ctx context.Context, ns string) error {
	if netnsExists(ns) {
		killNetnsPIDs(ns)
		if err := run(ctx, "ip", "netns", "delete", ns); err != nil {
			return err
		}
	}
	if err := nw.rec.add(item{Kind: "netns", Name: ns}); err != nil {
		return err
	}
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	return run(ctx, "ip", "-n", ns, "link", "set", "lo", "up")
}

// setupRoot creates the bridge and the guard routes in the root namespace.
func (nw *network) setupRoot(ctx context.Context) error {
	if err := nw.rec.add(item{Kind: "link", Name: bridgeName}); err != nil {
		return err
	}
	steps := [][]string{
		addBridge("", bridgeName, 0),
		{"ip", "addr", "add", bridgeCIDR, "dev", bridgeName},
		{"ip", "link", "set", bridgeName, "up"},
	}
	for _, s := range steps {
		if err := nw.cmd(ctx, s...); err != nil {
			return fmt.Errorf("creating bridge: %w", err)
		}
	}
	for _, cidr := range []string{"198.18.0.0/15", ServiceCIDR} {
		if err := nw.rootRoute(ctx, "unreachable", cidr, "metric", guardMetric); err != nil {
			return err
		}
	}
	// The client namespace stands for machines outside the cluster.
	if err := nw.addNetns(ctx, clientNS); err != nil {
		return err
	}
	return nw.attach(ctx, clientNS, "plt-hc", clientIP, "")
}

// rootRoute adds a route in the root namespace and records its removal.
func (nw *network) rootRoute(ctx context.Context, args ...string) error {
	del := append([]string{"ip", "route", "del"}, args...)
	if err := nw.rec.add(item{Kind: "route", Args: del}); err != nil {
		return err
	}
	if err := run(ctx, "ip", append([]string{"route", "replace"}, args...)...); err != nil {
		return fmt.Errorf("adding root route: %w", err)
	}
	return nil
}

// attach connects namespace ns to the bridge through a veth whose root end is
// host and whose namespace end is eth0, with address ip and optionally extra.
func (nw *network) attach(ctx context.Context, ns, host, ip, extra string) error {
	if err := nw.rec.add(item{Kind: "link", Name: host}); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", host, "master", bridgeName, "up"},
		{"ip", "-n", ns, "addr", "add", fmt.Sprintf("%s/%d", ip, bridgePrefix), "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		// Only our ranges are routed: nothing in a namespace can reach the
		// outside world. The service range needs a route for locally
		// generated packets to reach kube-proxy's DNAT in OUTPUT.
		{"ip", "-n", ns, "route", "add", ServiceCIDR, "via", bridgeIP},
	}
	if extra != "" {
		steps = append(steps, []string{"ip", "-n", ns, "addr", "add", fmt.Sprintf("%s/%d", extra, bridgePrefix), "dev", "eth0"})
	}
	for _, s := range steps {
		if err := nw.cmd(ctx, s...); err != nil {
			return fmt.Errorf("attaching %s to the bridge: %w", ns, err)
		}
	}
	return nil
}

// nsRun runs a command inside namespace ns.
func nsRun(ctx context.Context, ns string, args ...string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
}

// setupNode creates node n's namespace: eth0 on the bridge, a pod bridge
// cbr0 with the node's pod CIDR, forwarding on, and the fault chains.
func (nw *network) setupNode(ctx context.Context, n int, ns string, external bool) error {
	if err := nw.addNetns(ctx, ns); err != nil {
		return err
	}
	ext := ""
	if external {
		ext = nodeExternalIP(n)
	}
	if err := nw.attach(ctx, ns, fmt.Sprintf("plt-h%d", n), nodeInternalIP(n), ext); err != nil {
		return err
	}
	gw := nodePodGateway(n)
	steps := [][]string{
		addBridge(ns, "cbr0", n),
		{"ip", "-n", ns, "addr", "add", gw + "/24", "dev", "cbr0"},
		{"ip", "-n", ns, "link", "set", "cbr0", "up"},
		{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
		{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=0"},
		{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1"},
		// Faults live in raw PREROUTING and mangle POSTROUTING, which
		// kube-proxy does not touch and which see packets before conntrack
		// lets established flows through.
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "raw", "-N", "PLT-FAULT"},
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "raw", "-I", "PREROUTING", "-j", "PLT-FAULT"},
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "mangle", "-N", "PLT-FAULT"},
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "mangle", "-I", "POSTROUTING", "-j", "PLT-FAULT"},
		// hostPort mappings, like the CNI portmap plugin.
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "nat", "-N", "PLT-HOSTPORTS"},
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "PLT-HOSTPORTS"},
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "nat", "-I", "OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "PLT-HOSTPORTS"},
		// Pods reaching a hostPort on their own node through the node IP
		// need the reply to come back through the node.
		{"ip", "netns", "exec", ns, "iptables", "-w", "-t", "nat", "-I", "POSTROUTING", "-s", nodePodCIDR(n), "-d", nodePodCIDR(n), "-m", "conntrack", "--ctstate", "DNAT", "-j", "MASQUERADE"},
	}
	for _, s := range steps {
		if err := nw.cmd(ctx, s...); err != nil {
			return fmt.Errorf("setting up node namespace %s: %w", ns, err)
		}
	}
	return nil
}

// routePodCIDR makes node n's pod CIDR reachable from namespace ns (or the
// root namespace when ns is empty) through node n's InternalIP.
func (nw *network) routePodCIDR(ctx context.Context, ns string, n int) error {
	if ns == "" {
		return nw.rootRoute(ctx, nodePodCIDR(n), "via", nodeInternalIP(n))
	}
	return run(ctx, "ip", "-n", ns, "route", "replace", nodePodCIDR(n), "via", nodeInternalIP(n))
}

// setupPod creates a pod namespace with address ip on node n's pod bridge.
func (nw *network) setupPod(ctx context.Context, nodeNS string, n int, podNS, hostVeth, ip string) error {
	if err := nw.addNetns(ctx, podNS); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "-n", nodeNS, "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", podNS},
		{"ip", "-n", nodeNS, "link", "set", hostVeth, "master", "cbr0", "up"},
		{"ip", "-n", podNS, "addr", "add", ip + "/24", "dev", "eth0"},
		{"ip", "-n", podNS, "link", "set", "eth0", "up"},
		{"ip", "-n", podNS, "route", "add", "default", "via", nodePodGateway(n)},
	}
	for _, s := range steps {
		if err := nw.cmd(ctx, s...); err != nil {
			return fmt.Errorf("setting up pod namespace %s: %w", podNS, err)
		}
	}
	// Hairpin lets a pod reach itself through a Service.
	_ = run(ctx, "ip", "netns", "exec", nodeNS, "bridge", "link", "set", "dev", hostVeth, "hairpin", "on")
	return nil
}

// removePod takes a pod namespace off its node and deletes it. The node's
// end of the veth (hostVeth in namespace nodeNS) goes first, which destroys
// the pair whatever still holds the namespace: `ip netns delete` only drops
// its name, and a socket of a killed container keeps the namespace itself
// alive (a connection still closing, say, when the node was cut off as it
// was killed). Its eth0 would stay on the node's bridge with the pod's
// address, answer ARP for the next pod given that address and reset that
// pod's connections.
//
// Then the node forgets the connections it tracked to and from the pod's
// addresses ips (forgetConntrack), once its hostPort rules are gone (stop
// deletes them first), so that no new entry can point at the pod again.
func removePod(ctx context.Context, nodeNS, hostVeth, podNS string, ips ...string) error {
	var errs []error
	if hostVeth != "" && linkExistsIn(ctx, nodeNS, hostVeth) {
		if err := run(ctx, "ip", "-n", nodeNS, "link", "delete", hostVeth); err != nil {
			errs = append(errs, fmt.Errorf("taking pod namespace %s off its node: %w", podNS, err))
		}
	}
	killNetnsPIDs(podNS)
	if netnsExists(podNS) {
		if err := run(ctx, "ip", "netns", "delete", podNS); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ip := range ips {
		if err := forgetConntrack(ctx, nodeNS, ip); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// forgetConntrack deletes namespace ns's conntrack entries from or to ip,
// NAT included: a hostPort's DNAT to a removed pod stays in the node's
// table after the pod is gone, and a connection whose SYN the pod never
// answered stays in SYN_SENT for 120 s (nf_conntrack_tcp_timeout_syn_sent).
// A new SYN from the same client address and port within that time
// belongs to that entry: it is sent to the old pod's address, and reset
// by whichever pod has the address by then (or goes unanswered), instead
// of being DNATed afresh to the pod that serves the port now.
//
// The CNI bridge and portmap plugins leave such TCP entries when a pod
// goes; the harness deletes them because its traffic clients open
// hundreds of connections a second from one address, so that they reuse
// a source port towards the same node within those 120 s, and a loss the
// tests count would come from a pod removed in an earlier scenario.
// docs/proxy.md ("Draining") says what a real client can meet.
func forgetConntrack(ctx context.Context, ns, ip string) error {
	family := "ipv4"
	if strings.Contains(ip, ":") {
		family = "ipv6"
	}
	for _, dir := range []string{"--orig-src", "--reply-src"} {
		for attempt := 1; ; attempt++ {
			var stderr bytes.Buffer
			// Its output lists every entry deleted: only its messages count.
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "conntrack", "-D", "-f", family, dir, ip)
			cmd.Stderr = &stderr
			err := cmd.Run()
			done, retry := conntrackDeleted(err, stderr.String())
			if done {
				break
			}
			if !retry || attempt == conntrackAttempts {
				return fmt.Errorf("forgetting %s's connections on %s (attempt %d): %w: %s", ip, ns, attempt, err, strings.TrimSpace(stderr.String()))
			}
		}
	}
	return nil
}

// conntrackAttempts bounds how often forgetConntrack runs conntrack -D
// for one address and direction.
const conntrackAttempts = 5

// conntrackDeleted reads the result of conntrack -D: done when it deleted
// every entry that matched (exit 0) or none matched (exit 1, "0 flow
// entries have been deleted"); retry when an entry went away between the
// dump and its deletion (it expired, or kube-proxy deleted it): conntrack
// stops at that entry ("such conntrack doesn't exist") and leaves the rest
// (a soak's UDP client leaves hundreds).
func conntrackDeleted(err error, stderr string) (done, retry bool) {
	switch {
	case err == nil, strings.Contains(stderr, " 0 flow entries have been deleted"):
		return true, false
	case strings.Contains(stderr, "such conntrack doesn't exist"):
		return false, true
	}
	return false, false
}

// linkExistsIn reports whether namespace ns has a link called name.
func linkExistsIn(ctx context.Context, ns, name string) bool {
	return run(ctx, "ip", "-n", ns, "link", "show", "dev", name) == nil
}

// ClientNamespace is the network namespace that stands for the world
// outside the cluster (198.18.3.1 on the nodes' bridge).
const ClientNamespace = clientNS

// RunInNamespace runs fn on an OS thread inside network namespace ns and
// returns its error: sockets fn creates belong to ns, also when used from
// other goroutines later. The thread is never unlocked, so it ends with fn
// instead of carrying the namespace to other goroutines.
func RunInNamespace(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- fmt.Errorf("opening network namespace: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering network namespace %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// BridgeIP is the root namespace's address on the nodes' bridge: the
// nodes and the client namespace reach the harness' own processes there.
const BridgeIP = bridgeIP

// FreePort returns host:port with the port free for both UDP and TCP on
// host at the time of the call, for a server that listens on both (DNS).
func FreePort(host string) (string, error) {
	for range 20 {
		tcp, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", fmt.Errorf("finding a free port on %s: %w", host, err)
		}
		addr := tcp.Addr().String()
		udp, err := net.ListenPacket("udp", addr)
		tcp.Close()
		if err == nil {
			udp.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("no port free for both UDP and TCP on %s", host)
}

// HostIP is the machine's own address on the cluster's bridge: pods and
// nodes reach a server the harness runs in the root namespace there (a
// cluster DNS, for one).
const HostIP = "198.18.0.1"
