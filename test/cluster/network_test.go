package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulselb/pulselb/test/traffic"
)

// TestBridgeKeepsItsMAC: a bridge made by addBridge keeps its MAC when a
// port with a lower MAC joins, while a bridge made without one takes that
// port's MAC (which is what cut a node off from the API server for 45 s:
// its ARP entry for the bridge went stale).
func TestBridgeKeepsItsMAC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx := t.Context()
	ns := fmt.Sprintf("plt-macTest-%d", os.Getpid())
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run(context.Background(), "ip", "netns", "delete", ns) })

	mac := func(link string) string {
		out, err := output(ctx, "ip", "-n", ns, "-br", "link", "show", "dev", link)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		if len(f) < 3 {
			t.Fatalf("unexpected ip -br link output %q", out)
		}
		return f[2]
	}
	// join adds a veth whose bridge end has a MAC lower than any other.
	join := func(bridge, veth string) {
		for _, s := range [][]string{
			{"ip", "-n", ns, "link", "add", veth, "address", "00:00:00:00:00:01", "type", "veth", "peer", "name", veth + "p"},
			{"ip", "-n", ns, "link", "set", veth, "master", bridge, "up"},
		} {
			if err := run(ctx, s[0], s[1:]...); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := run(ctx, "ip", "-n", ns, "link", "add", "plain", "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	before := mac("plain")
	join("plain", "vplain")
	if after := mac("plain"); after == before {
		t.Fatalf("a bridge without a set MAC kept %s when a lower port joined; the kernel's rule changed and this test no longer shows the failure", after)
	}

	cmd := addBridge(ns, "fixed", 7)
	if err := run(ctx, cmd[0], cmd[1:]...); err != nil {
		t.Fatal(err)
	}
	join("fixed", "vfixed")
	if got, want := mac("fixed"), bridgeMAC(7); got != want {
		t.Errorf("bridge made by addBridge has MAC %s after a lower port joined, want %s", got, want)
	}
}

// TestRemovedPodAnswersNoMore: a pod namespace that something still holds
// after the pod is gone (a killed container's connection still closing, here
// a listener) no longer answers at the pod's address once removePod ran, and
// the next pod given the address gets all of its connections. The soak's
// first run failed on such a leftover: node-3's everywhere proxy got the
// address of a web proxy killed while node-3 was cut off, whose namespace
// lived on the bridge and reset the connections to port 8081 (a port its
// own rules did not forward) whenever the node's ARP entry pointed at it.
func TestRemovedPodAnswersNoMore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx := t.Context()
	const n, ip, port = 61, "198.18.189.3", "8081"
	node := fmt.Sprintf("plt-ghostTest-%d", os.Getpid())
	nw := &network{rec: newRecord(t.TempDir())}
	if err := nw.addNetns(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run(context.Background(), "ip", "netns", "delete", node) })
	for _, s := range [][]string{
		addBridge(node, "cbr0", n),
		{"ip", "-n", node, "addr", "add", nodePodGateway(n) + "/24", "dev", "cbr0"},
		{"ip", "-n", node, "link", "set", "cbr0", "up"},
	} {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	// pod sets up a pod namespace with the address and returns it and the
	// node's end of its veth.
	pod := func(name string) (ns, veth string) {
		ns, veth = node+"-"+name, "vpghost"+name
		t.Cleanup(func() { _ = removePod(context.Background(), node, veth, ns) })
		if err := nw.setupPod(ctx, node, n, ns, veth, ip); err != nil {
			t.Fatal(err)
		}
		return ns, veth
	}
	// connect dials the address from the node, as a hostPort's DNAT does.
	connect := func() error {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := dialInNetns(dctx, node, "tcp", net.JoinHostPort(ip, port))
		if err == nil {
			conn.Close()
		}
		return err
	}

	old, oldVeth := pod("old")
	var held net.Listener
	if err := RunInNamespace(old, func() (err error) {
		held, err = net.Listen("tcp", ":9999")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	if err := connect(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the pod's namespace does not refuse port %s (%v): the test no longer shows what it is about", port, err)
	}
	if err := removePod(ctx, node, oldVeth, old); err != nil {
		t.Fatal(err)
	}
	if err := connect(); err == nil || errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the removed pod's namespace still answers at %s: dialling port %s got %v, want no answer", ip, port, err)
	}

	next, _ := pod("next")
	ln := listenIn(t, next, port)
	go traffic.Serve(ln, nil)
	for i := range 20 {
		if err := connect(); err != nil {
			t.Fatalf("connection %d to the next pod given %s: %v", i, ip, err)
		}
	}
}

// TestRemovedPodLeavesNoConnections: a connection the node DNATed to a
// pod, whose SYN the pod never answered, stays in the node's conntrack
// table in SYN_SENT for two minutes, and a new SYN from the same client
// address and port follows it to the pod's old address, though the
// hostPort now leads to another pod. removePod makes the node forget it.
func TestRemovedPodLeavesNoConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx := t.Context()
	const n, oldIP, nextIP, port = 62, "198.18.190.3", "198.18.190.4", "81"
	node := fmt.Sprintf("plt-ctTest-%d", os.Getpid())
	nw := &network{rec: newRecord(t.TempDir())}
	if err := nw.addNetns(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run(context.Background(), "ip", "netns", "delete", node) })
	old, oldVeth := node+"-old", "vpctold"
	next, nextVeth := node+"-next", "vpctnext"
	for _, p := range [][2]string{{old, oldVeth}, {next, nextVeth}} {
		t.Cleanup(func() { _ = removePod(context.Background(), node, p[1], p[0]) })
	}
	// hostPort maps the node's gateway address, port 81, to ip, as the
	// harness maps a hostPort, for the node's own connections.
	hostPort := func(op, ip string) []string {
		rule := []string{"ip", "netns", "exec", node, "iptables", "-w", "-t", "nat", op, "OUTPUT"}
		if op == "-R" {
			rule = append(rule, "1")
		}
		return append(rule, "-d", nodePodGateway(n), "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", net.JoinHostPort(ip, port))
	}
	for _, s := range [][]string{
		addBridge(node, "cbr0", n),
		{"ip", "-n", node, "addr", "add", nodePodGateway(n) + "/24", "dev", "cbr0"},
		{"ip", "-n", node, "link", "set", "cbr0", "up"},
		hostPort("-A", oldIP),
	} {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := nw.setupPod(ctx, node, n, old, oldVeth, oldIP); err != nil {
		t.Fatal(err)
	}
	// The old pod drops the SYN, as a pod killed with the SYN in flight
	// never answers it.
	if err := run(ctx, "ip", "netns", "exec", old, "iptables", "-w", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"); err != nil {
		t.Fatal(err)
	}
	// connect connects from the node, always from the same port, as a
	// client that reuses its source port.
	connect := func() error {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return RunInNamespace(node, func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{Port: 40404}}
			conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort(nodePodGateway(n), port))
			if err == nil {
				conn.Close()
			}
			return err
		})
	}
	if err := connect(); err == nil {
		t.Fatal("the old pod answered a SYN it drops: the test no longer shows what it is about")
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node, "conntrack", "-L", "-f", "ipv4", "--reply-src", oldIP).Output()
	if err != nil || !strings.Contains(string(out), "SYN_SENT") {
		t.Fatalf("the node tracks no unanswered connection to the old pod (%q, %v): the test no longer shows what it is about", out, err)
	}

	if err := removePod(ctx, node, oldVeth, old, oldIP); err != nil {
		t.Fatal(err)
	}
	if err := nw.setupPod(ctx, node, n, next, nextVeth, nextIP); err != nil {
		t.Fatal(err)
	}
	listenIn(t, next, port)
	moved := hostPort("-R", nextIP)
	if err := run(ctx, moved[0], moved[1:]...); err != nil {
		t.Fatal(err)
	}
	if err := connect(); err != nil {
		t.Errorf("a connection from the same port, after the old pod was removed and the hostPort leads to the next pod: %v (want it to reach the next pod)", err)
	}
}

// TestConntrackDeleted: conntrack -D's results, as conntrack 1.4.7 writes
// them to stderr. An entry gone between the dump and its deletion stops
// it (exit 1) with entries left: forgetConntrack runs it again.
func TestConntrackDeleted(t *testing.T) {
	exit1 := &exec.ExitError{}
	for _, tt := range []struct {
		name        string
		err         error
		stderr      string
		done, retry bool
	}{
		{"deleted", nil, "conntrack v1.4.7 (conntrack-tools): 762 flow entries have been deleted.\n", true, false},
		{"nothing matched", exit1, "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n", true, false},
		{"an entry went away", exit1, "conntrack v1.4.7 (conntrack-tools): Operation failed: such conntrack doesn't exist\n", false, true},
		{"other failure", exit1, "conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted\n", false, false},
		{"ten deleted, then a failure", exit1, "conntrack v1.4.7 (conntrack-tools): 10 flow entries have been deleted.\nOperation failed: Operation not permitted\n", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done, retry := conntrackDeleted(tt.err, tt.stderr)
			if done != tt.done || retry != tt.retry {
				t.Errorf("conntrackDeleted = done %v, retry %v; want %v, %v", done, retry, tt.done, tt.retry)
			}
		})
	}
}

// listenIn listens on TCP port in network namespace ns until the test
// ends.
func listenIn(t *testing.T, ns, port string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := RunInNamespace(ns, func() (err error) {
		ln, err = net.Listen("tcp", ":"+port)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
