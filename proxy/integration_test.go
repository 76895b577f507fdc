package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The integration tests run the real pulselb binary in network namespaces
// built like a node that hosts a proxy pod:
//
//	client ns ──veth── node ns ──veth── pod ns (pulselb proxy)
//	                      │
//	                      └──veth── backend ns (the ClusterIP on lo)
//
// The node DNATs nodeIP:port to the pod as the CNI portmap plugin does for a
// hostPort; the backend namespace stands in for kube-proxy and the Service's
// endpoints. Every address is in 198.18.100.0/22 or 198.19.100.0/24 (and the
// matching fd00:198:… ULA ranges), inside namespaces the test creates.
var (
	nodeIP4      = netip.MustParseAddr("198.18.100.1")
	nodeIP6      = netip.MustParseAddr("fd00:198:18:100::1")
	clientOK4    = netip.MustParseAddr("198.18.100.2")
	clientOK6    = netip.MustParseAddr("fd00:198:18:100::2")
	clientNo4    = netip.MustParseAddr("198.18.100.200")
	clientNo6    = netip.MustParseAddr("fd00:198:18:100::200")
	clusterIP4   = netip.MustParseAddr("198.19.100.10")
	clusterIP6   = netip.MustParseAddr("fd00:198:19:100::10")
	sourceRanges = "198.18.100.0/25,fd00:198:18:100::/120"
)

// The Service ports: an echo, a checksum after EOF (for the 1 GiB transfer)
// and a UDP echo.
const (
	echoPort    = 8080
	sumPort     = 9000
	udpEchoPort = 5353
	healthAddr  = "127.0.0.1:9470"
)

var servicePorts = fmt.Sprintf("TCP:%d,TCP:%d,UDP:%d", echoPort, sumPort, udpEchoPort)

// requireRoot skips a test that needs root, unless CI=true, where root is
// expected and its absence is a failure.
func requireRoot(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to create network namespaces and iptables rules"
	}
	for _, bin := range []string{"ip", "iptables", "ip6tables", "iptables-save"} {
		if _, err := exec.LookPath(bin); why == "" && err != nil {
			why = "needs " + bin + " (Debian packages iproute2, iptables)"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true", why)
	}
	t.Skipf("%s; run as root (CI does)", why)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// pulselbBinary builds cmd/pulselb once per test run.
func pulselbBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "pulselb-proxy-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "pulselb")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/pulselb").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building pulselb: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// TestProxyCommandFlags checks the exit status and message for malformed
// flags and variables; it needs no root.
func TestProxyCommandFlags(t *testing.T) {
	bin := pulselbBinary(t)
	base := []string{"proxy", "--cluster-ips=10.96.0.10", "--ports=TCP:80"}
	tests := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"bad port", []string{"proxy", "--cluster-ips=10.96.0.10", "--ports=TCP:80,TCP:8o"}, "", `--ports="TCP:80,TCP:8o": port "TCP:8o"`},
		{"bad protocol", []string{"proxy", "--cluster-ips=10.96.0.10", "--ports=SCTP:80"}, "", `protocol "SCTP" is not TCP or UDP`},
		{"bad CIDR", append(base, "--source-ranges=192.0.2.0/24,192.0.2.300/32"), "", `--source-ranges="192.0.2.0/24,192.0.2.300/32": source range "192.0.2.300/32"`},
		{"bad CIDR from env", base, "PULSELB_SOURCE_RANGES=10.0.0.0/40", `--source-ranges="10.0.0.0/40" (from PULSELB_SOURCE_RANGES)`},
		{"bad ClusterIP", []string{"proxy", "--cluster-ips=10.96.0", "--ports=TCP:80"}, "", `--cluster-ips="10.96.0": "10.96.0" is not an IP address`},
		{"two IPv4 ClusterIPs", []string{"proxy", "--cluster-ips=10.96.0.1,10.96.0.2", "--ports=TCP:80"}, "", "two ipv4 ClusterIPs"},
		{"bad mode", append(base, "--mode=ipvs"), "", `--mode="ipvs": mode "ipvs": want auto, iptables or userspace`},
		{"negative drain delay from env", base, "PULSELB_DRAIN_DELAY=-5s", `--drain-delay="-5s" (from PULSELB_DRAIN_DELAY): want zero or a positive duration`},
		{"no ports", []string{"proxy", "--cluster-ips=10.96.0.10"}, "", `--ports="": no ports`},
		{"bad node-port target", append(base, "--node-port-target=TCP:80=3o080"), "",
			`--node-port-target="TCP:80=3o080": node-port target "TCP:80=3o080": NodePort "3o080" is not a number`},
		{"bad node-port target from env", base, "PULSELB_NODE_PORT_TARGET=TCP:80",
			`--node-port-target="TCP:80" (from PULSELB_NODE_PORT_TARGET): node-port target "TCP:80": want PROTOCOL:PORT=NODEPORT`},
		{"node-port target of another port", append(base, "--node-port-target=UDP:80=30080", "--node-ips=198.18.0.1"), "",
			`--node-port-target="UDP:80=30080": invalid proxy configuration: node-port target: UDP:80 is not one of the ports`},
		{"bad node IP from env", append(base, "--node-port-target=TCP:80=30080"), "PULSELB_NODE_IPS=198.18.0",
			`--node-ips="198.18.0" (from PULSELB_NODE_IPS): "198.18.0" is not an IP address`},
		{"no node IP of the ClusterIP's family", append(base, "--node-port-target=TCP:80=30080", "--node-ips=fd00::1"), "",
			`--node-ips="fd00::1": invalid proxy configuration: node IPs: no ipv4 node IP for the ipv4 ClusterIP`},
		{"node-port target without node IPs", append(base, "--node-port-target=TCP:80=30080"), "",
			`--node-ips="": invalid proxy configuration: node IPs: no ipv4 node IP`},
		{"PROXY protocol on a UDP port", []string{"proxy", "--cluster-ips=10.96.0.10", "--ports=UDP:53", "--proxy-protocol=UDP:53=v2"}, "",
			`--proxy-protocol="UDP:53=v2": proxy-protocol port "UDP:53=v2": the PROXY protocol is for TCP ports only`},
		{"PROXY protocol on another port, from env", base, "PULSELB_PROXY_PROTOCOL=TCP:443=v2",
			`--proxy-protocol="TCP:443=v2" (from PULSELB_PROXY_PROTOCOL): invalid proxy configuration: proxy-protocol: TCP:443 is not one of the ports`},
		{"bad PROXY protocol version", append(base, "--proxy-protocol=TCP:80=v3"), "",
			`--proxy-protocol="TCP:80=v3": proxy-protocol port "TCP:80=v3": version "v3": want v1 or v2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = os.Environ()
			if tt.env != "" {
				cmd.Env = append(cmd.Env, tt.env)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; stderr: %s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.want)
			}
		})
	}
}

// topology is one set of network namespaces.
type topology struct {
	client, node, pod, backend string
	// wrap, when set, runs the proxy through this command (such as
	// prlimit), inside the pod namespace.
	wrap []string
}

// run runs a command, failing the test with its output on error.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var topologies int

func newTopology(t *testing.T) *topology {
	t.Helper()
	topologies++
	prefix := fmt.Sprintf("plbproxy-%d-%d-", os.Getpid(), topologies)
	tp := &topology{client: prefix + "client", node: prefix + "node", pod: prefix + "pod", backend: prefix + "backend"}
	for _, ns := range []string{tp.client, tp.node, tp.pod, tp.backend} {
		run(t, "ip", "netns", "add", ns)
		// Deleting a namespace deletes its veths and iptables rules; a
		// process still in it has been killed by its own cleanup.
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// Without duplicate address detection the IPv6 link-local
		// addresses work at once, not a second or two after setup.
		run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	// veth pairs are created inside the node namespace, so their names
	// never meet the host's.
	link := func(peerNS, nodeIf string, subnet int) {
		run(t, "ip", "-n", tp.node, "link", "add", nodeIf, "type", "veth", "peer", "name", "eth0", "netns", peerNS)
		for _, side := range []struct{ ns, dev, host string }{{tp.node, nodeIf, "1"}, {peerNS, "eth0", "2"}} {
			run(t, "ip", "-n", side.ns, "addr", "add", fmt.Sprintf("198.18.%d.%s/24", subnet, side.host), "dev", side.dev)
			run(t, "ip", "-n", side.ns, "addr", "add", fmt.Sprintf("fd00:198:18:%d::%s/64", subnet, side.host), "dev", side.dev, "nodad")
			run(t, "ip", "-n", side.ns, "link", "set", side.dev, "up")
		}
		run(t, "ip", "-n", peerNS, "route", "add", "default", "via", fmt.Sprintf("198.18.%d.1", subnet))
		run(t, "ip", "-n", peerNS, "-6", "route", "add", "default", "via", fmt.Sprintf("fd00:198:18:%d::1", subnet))
	}
	link(tp.client, "to-client", 100)
	link(tp.pod, "to-pod", 101)
	link(tp.backend, "to-backend", 102)
	run(t, "ip", "-n", tp.client, "addr", "add", clientNo4.String()+"/24", "dev", "eth0")
	run(t, "ip", "-n", tp.client, "addr", "add", clientNo6.String()+"/64", "dev", "eth0", "nodad")
	run(t, "ip", "-n", tp.backend, "addr", "add", clusterIP4.String()+"/32", "dev", "lo")
	run(t, "ip", "-n", tp.backend, "addr", "add", clusterIP6.String()+"/128", "dev", "lo")
	run(t, "ip", "-n", tp.node, "route", "add", "198.19.100.0/24", "via", "198.18.102.2")
	run(t, "ip", "-n", tp.node, "-6", "route", "add", "fd00:198:19:100::/64", "via", "fd00:198:18:102::2")
	run(t, "ip", "netns", "exec", tp.node, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	// The hostPort: what the portmap CNI plugin installs on a node.
	for _, p := range []struct {
		proto string
		port  int
	}{{"tcp", echoPort}, {"tcp", sumPort}, {"udp", udpEchoPort}} {
		run(t, "ip", "netns", "exec", tp.node, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", nodeIP4.String(),
			"-p", p.proto, "--dport", fmt.Sprint(p.port), "-j", "DNAT", "--to-destination", fmt.Sprintf("198.18.101.2:%d", p.port))
		run(t, "ip", "netns", "exec", tp.node, "ip6tables", "-t", "nat", "-A", "PREROUTING", "-d", nodeIP6.String(),
			"-p", p.proto, "--dport", fmt.Sprint(p.port), "-j", "DNAT", "--to-destination", fmt.Sprintf("[fd00:198:18:101::2]:%d", p.port))
	}
	tp.serveBackends(t)
	return tp
}

// inNetns runs fn on a thread moved into the network namespace ns. Sockets
// fn creates stay in ns for their whole life, wherever they are used later.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked if it cannot be moved back, so the
		// runtime discards it with this goroutine.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering netns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leaving netns %s: %w", ns, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// serveBackends starts the Service's servers in the backend namespace, on
// every address, so on both ClusterIPs.
func (tp *topology) serveBackends(t *testing.T) {
	t.Helper()
	var echoLn, sumLn net.Listener
	var udps []net.PacketConn
	err := inNetns(tp.backend, func() (err error) {
		if echoLn, err = net.Listen("tcp", fmt.Sprintf(":%d", echoPort)); err != nil {
			return err
		}
		if sumLn, err = net.Listen("tcp", fmt.Sprintf(":%d", sumPort)); err != nil {
			return err
		}
		// One UDP socket per ClusterIP: a wildcard socket would answer
		// from the backend's interface address, which conntrack does not
		// match to the request.
		for _, cip := range []netip.Addr{clusterIP4, clusterIP6} {
			udp, err := net.ListenPacket("udp", netip.AddrPortFrom(cip, udpEchoPort).String())
			if err != nil {
				return err
			}
			udps = append(udps, udp)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("starting backends: %v", err)
	}
	t.Cleanup(func() {
		echoLn.Close()
		sumLn.Close()
		for _, u := range udps {
			u.Close()
		}
	})
	for ln, handle := range map[net.Listener]func(*net.TCPConn){echoLn: echo, sumLn: sumAfterEOF} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					handle(c.(*net.TCPConn))
				}()
			}
		}()
	}
	for _, udp := range udps {
		go func() {
			buf := make([]byte, maxDatagram)
			for {
				n, from, err := udp.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = udp.WriteTo(buf[:n], from)
			}
		}()
	}
}

// proxyProcess is a pulselb proxy running in the pod namespace.
type proxyProcess struct {
	cmd    *exec.Cmd
	stderr *syncWriter
	exited chan struct{}
}

// log returns what the proxy has logged so far.
func (pp *proxyProcess) log() string {
	pp.stderr.mu.Lock()
	defer pp.stderr.mu.Unlock()
	return pp.stderr.buf.String()
}

// startProxy starts pulselb proxy with --mode=mode, and extra flags that
// override the test's defaults, and waits until it reports healthy in the
// mode want.
func (tp *topology) startProxy(t *testing.T, bin string, mode, want Mode, extra ...string) *proxyProcess {
	t.Helper()
	args := append(append([]string{"netns", "exec", tp.pod}, tp.wrap...), bin, "proxy",
		"--cluster-ips="+clusterIP4.String()+","+clusterIP6.String(), "--ports="+servicePorts,
		"--source-ranges="+sourceRanges, "--mode="+string(mode), "--resync-interval=200ms",
		"--drain-timeout=1s", "--health-address="+healthAddr, "-v=2")
	args = append(args, extra...)
	cmd := exec.Command("ip", args...)
	pp := &proxyProcess{cmd: cmd, stderr: &syncWriter{}, exited: make(chan struct{})}
	cmd.Stderr = pp.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(pp.exited)
	}()
	t.Cleanup(func() {
		// `ip netns exec` execs the binary, so this is pulselb's pid.
		_ = cmd.Process.Kill()
		<-pp.exited
		if t.Failed() {
			t.Logf("pulselb proxy (%s) log:\n%s", mode, pp.log())
		}
	})
	waitFor(t, 20*time.Second, "the proxy to report healthy in "+string(want)+" mode", func() bool {
		select {
		case <-pp.exited:
			t.Fatalf("pulselb proxy exited: %v\n%s", cmd.ProcessState, pp.log())
		default:
		}
		return tp.healthy("mode=" + string(want))
	})
	return pp
}

// healthy reports whether the proxy's /healthz answers 200 containing want.
func (tp *topology) healthy(want string) bool {
	resp, err := tp.httpClient().Get("http://" + healthAddr + "/healthz")
	if err != nil {
		return false
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200 && strings.Contains(string(body), want)
}

// metric returns the value of one series (name and labels exactly as
// exposed) from the running proxy's /metrics, or -1 when it is missing.
func (tp *topology) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := tp.httpClient().Get("http://" + healthAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// stop sends SIGTERM and waits for a clean exit.
func (pp *proxyProcess) stop(t *testing.T) {
	t.Helper()
	pp.signal(t, syscall.SIGTERM)
	pp.wait(t, 15*time.Second)
}

func (pp *proxyProcess) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := pp.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits up to timeout for a clean exit.
func (pp *proxyProcess) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-pp.exited:
	case <-time.After(timeout):
		t.Fatalf("pulselb proxy did not exit within %v", timeout)
	}
	if code := pp.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("pulselb proxy exited with status %d:\n%s", code, pp.log())
	}
}

// syncWriter collects the proxy's log while the test reads it.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// httpClient talks to the proxy's health port inside the pod namespace.
func (tp *topology) httpClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = inNetns(tp.pod, func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

func (tp *topology) dialTCP(src netip.Addr, dst netip.AddrPort, timeout time.Duration) (c *net.TCPConn, err error) {
	err = inNetns(tp.client, func() error {
		c, err = dialFromTimeout(src, dst, timeout)
		return err
	})
	return c, err
}

func dialFromTimeout(src netip.Addr, dst netip.AddrPort, timeout time.Duration) (*net.TCPConn, error) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: timeout}
	c, err := d.Dial("tcp", dst.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// tcpEcho sends msg from src through the node and returns what came back.
// wait bounds the connect and the answer; for a client whose SYN is dropped
// there is nothing else to wait for.
func (tp *topology) tcpEcho(src, node netip.Addr, msg string, wait time.Duration) (string, error) {
	c, err := tp.dialTCP(src, netip.AddrPortFrom(node, echoPort), wait)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	if err := c.CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// udpEcho sends msg from src through the node and returns the answer, or an
// error when none comes within wait.
func (tp *topology) udpEcho(src, node netip.Addr, msg string, wait time.Duration) (string, error) {
	var c *net.UDPConn
	err := inNetns(tp.client, func() (err error) {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(node, udpEchoPort)))
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// rules returns pulselb's rules in the pod namespace, in iptables-save
// form without counters, for both families.
func (tp *topology) rules(t *testing.T) string {
	t.Helper()
	var out []string
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		for _, line := range strings.Split(run(t, "ip", "netns", "exec", tp.pod, bin), "\n") {
			if strings.Contains(line, "PULSELB") {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}

func TestIntegration(t *testing.T) {
	requireRoot(t)
	bin := pulselbBinary(t)
	tp := newTopology(t)

	t.Run("auto without forwarding is userspace", func(t *testing.T) {
		pp := tp.startProxy(t, bin, ModeAuto, ModeUserspace)
		if !strings.Contains(pp.log(), "forwarding is off") {
			t.Errorf("log does not say why iptables mode was not used:\n%s", pp.log())
		}
		if got, err := tp.tcpEcho(clientOK4, nodeIP4, "auto", 5*time.Second); err != nil || got != "auto" {
			t.Errorf("echo through userspace = %q, %v", got, err)
		}
		pp.stop(t)
	})

	t.Run("proxy-init", func(t *testing.T) {
		out := run(t, "ip", "netns", "exec", tp.pod, bin, "proxy-init", "--ipv6")
		if !strings.Contains(out, "IPv4 and IPv6 forwarding are on") {
			t.Errorf("proxy-init said %q", out)
		}
		for _, key := range []string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"} {
			if got := strings.TrimSpace(run(t, "ip", "netns", "exec", tp.pod, "sysctl", "-n", key)); got != "1" {
				t.Errorf("%s = %s after proxy-init, want 1", key, got)
			}
		}
	})

	for _, mode := range []Mode{ModeIPTables, ModeUserspace} {
		t.Run(string(mode), func(t *testing.T) {
			pp := tp.startProxy(t, bin, mode, mode)
			trafficCases(t, tp)
			if mode == ModeIPTables {
				t.Run("deleted rule restored", func(t *testing.T) {
					want := tp.rules(t)
					run(t, "ip", "netns", "exec", tp.pod, "iptables", "-t", "nat", "-D", chainPrerouting, "1")
					run(t, "ip", "netns", "exec", tp.pod, "ip6tables", "-t", "filter", "-D", "FORWARD", "1")
					waitFor(t, 10*time.Second, "the rules to be restored", func() bool { return tp.rules(t) == want })
					if got, err := tp.tcpEcho(clientOK4, nodeIP4, "again", 5*time.Second); err != nil || got != "again" {
						t.Errorf("echo after repair = %q, %v", got, err)
					}
				})
			}
			t.Run("1 GiB transfer", func(t *testing.T) { transfer(t, tp, 1<<30) })
			t.Run("byte metrics count the transfer", func(t *testing.T) {
				var in, conns float64
				waitFor(t, 10*time.Second, "pulselb_proxy_bytes_total{in} to pass 1 GiB", func() bool {
					in = tp.metric(t, `pulselb_proxy_bytes_total{direction="in",protocol="tcp"}`)
					conns = tp.metric(t, `pulselb_proxy_connections_total{protocol="tcp"}`)
					return in >= 1<<30 && conns >= 1
				})
				t.Logf("%s mode: %.0f bytes in, %.0f TCP connections", mode, in, conns)
			})
			t.Run("SIGTERM removes rules", func(t *testing.T) {
				pp.stop(t)
				if got := tp.rules(t); got != "" {
					t.Errorf("rules left after SIGTERM:\n%s", got)
				}
				if _, err := tp.tcpEcho(clientOK4, nodeIP4, "gone", time.Second); err == nil {
					t.Error("traffic still forwarded after the proxy stopped")
				}
			})
			t.Run("drain delay", func(t *testing.T) { drainCases(t, tp, bin, mode) })
		})
	}

	t.Run("cleanup after SIGKILL", func(t *testing.T) {
		pp := tp.startProxy(t, bin, ModeIPTables, ModeIPTables)
		if err := pp.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-pp.exited
		if tp.rules(t) == "" {
			t.Fatal("no rules left behind by a killed proxy; the test proves nothing")
		}
		run(t, "ip", "netns", "exec", tp.pod, bin, "proxy", "--cleanup")
		if got := tp.rules(t); got != "" {
			t.Errorf("rules left after --cleanup:\n%s", got)
		}
	})
}

// drainCases stops a proxy that has a drain delay and checks its phases as
// clients see them: a new connection during the delay is forwarded, one
// after it is refused at once, a connection opened before the SIGTERM works
// until the drain timeout, and the rules are gone at the end. A second
// SIGTERM and a SIGINT during the delay change nothing.
func drainCases(t *testing.T, tp *topology, bin string, mode Mode) {
	const delay, timeout = 2 * time.Second, 3 * time.Second
	pp := tp.startProxy(t, bin, mode, mode, "--drain-delay="+delay.String(), "--drain-timeout="+timeout.String())
	open := openEcho(t, func() (*net.TCPConn, error) {
		return tp.dialTCP(clientOK4, netip.AddrPortFrom(nodeIP4, echoPort), 5*time.Second)
	})
	start := time.Now()
	pp.signal(t, syscall.SIGTERM)
	waitFor(t, 5*time.Second, "phase delay", func() bool { return tp.healthy("phase=delay") })
	pp.signal(t, syscall.SIGTERM)
	pp.signal(t, syscall.SIGINT)

	t.Run("new connection during the delay is forwarded", func(t *testing.T) {
		for _, c := range []struct{ src, node netip.Addr }{{clientOK4, nodeIP4}, {clientOK6, nodeIP6}} {
			if got, err := tp.tcpEcho(c.src, c.node, "during the delay", 5*time.Second); err != nil || got != "during the delay" {
				t.Errorf("echo from %s during the delay = %q, %v", c.src, got, err)
			}
		}
		if !tp.healthy("phase=delay") {
			t.Fatalf("no longer in phase delay after the checks (is the machine too slow for a %v delay?)", delay)
		}
	})
	t.Run("new connection after the delay is refused", func(t *testing.T) {
		for _, c := range []struct{ src, node netip.Addr }{{clientOK4, nodeIP4}, {clientOK6, nodeIP6}} {
			waitRefused(t, 2*delay, func() (*net.TCPConn, error) {
				return tp.dialTCP(c.src, netip.AddrPortFrom(c.node, echoPort), time.Second)
			})
		}
		if d := time.Since(start); d < delay {
			t.Errorf("refused %v after SIGTERM, before the drain delay %v", d, delay)
		}
	})
	t.Run("connection opened before SIGTERM works during the drain", func(t *testing.T) {
		if !tp.healthy("phase=drain") {
			t.Fatal("not in phase drain")
		}
		if err := roundTrip(open, "during the drain"); err != nil {
			t.Error(err)
		}
	})
	t.Run("rules gone after the timeout", func(t *testing.T) {
		pp.wait(t, delay+timeout+10*time.Second)
		if d := time.Since(start); d < delay+timeout {
			t.Errorf("exited %v after SIGTERM, before the drain delay and timeout, %v", d, delay+timeout)
		}
		if got := tp.rules(t); got != "" {
			t.Errorf("rules left after the drain:\n%s", got)
		}
		for _, msg := range []string{"Shutting down proxy after the drain delay", "Refusing new proxy connections"} {
			if !strings.Contains(pp.log(), msg) {
				t.Errorf("log lacks %q", msg)
			}
		}
	})
}

// trafficCases sends TCP and UDP over IPv4 and IPv6 from an allowed and a
// refused client.
func trafficCases(t *testing.T, tp *topology) {
	tests := []struct {
		name    string
		proto   Protocol
		src     netip.Addr
		node    netip.Addr
		allowed bool
	}{
		{"tcp ipv4", TCP, clientOK4, nodeIP4, true},
		{"tcp ipv6", TCP, clientOK6, nodeIP6, true},
		{"udp ipv4", UDP, clientOK4, nodeIP4, true},
		{"udp ipv6", UDP, clientOK6, nodeIP6, true},
		{"tcp ipv4 outside source ranges", TCP, clientNo4, nodeIP4, false},
		{"tcp ipv6 outside source ranges", TCP, clientNo6, nodeIP6, false},
		{"udp ipv4 outside source ranges", UDP, clientNo4, nodeIP4, false},
		{"udp ipv6 outside source ranges", UDP, clientNo6, nodeIP6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := "hello " + tt.name
			exchange := tp.tcpEcho
			if tt.proto == UDP {
				exchange = tp.udpEcho
			}
			// A refused client gets no answer, so waiting a second for
			// none is the test; an allowed one gets its answer at once.
			wait := 5 * time.Second
			if !tt.allowed {
				wait = time.Second
			}
			got, err := exchange(tt.src, tt.node, msg, wait)
			if tt.allowed && (err != nil || got != msg) {
				t.Errorf("echo = %q, %v; want %q", got, err, msg)
			}
			if !tt.allowed && (err == nil || got != "") {
				t.Errorf("refused client got %q, %v; want no answer", got, err)
			}
		})
	}
}

// transfer sends size pseudo-random bytes through the proxy to the checksum
// backend and compares its SHA-256 with the sender's. It is bounded by a
// 50 s deadline.
func transfer(t *testing.T, tp *topology, size int) {
	c, err := tp.dialTCP(clientOK4, netip.AddrPortFrom(nodeIP4, sumPort), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(50 * time.Second))
	// One random MiB, each copy stamped with its index, so a lost, repeated
	// or reordered MiB changes the checksum.
	chunk := make([]byte, 1<<20)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(chunk)
	sent := sha256.New()
	sendErr := make(chan error, 1)
	go func() {
		for i := 0; i < size/len(chunk); i++ {
			chunk[0], chunk[1], chunk[2], chunk[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			sent.Write(chunk)
			if _, err := c.Write(chunk); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if serr := <-sendErr; serr != nil || err != nil {
		t.Fatalf("transfer after %v: send %v, receive %v", time.Since(start), serr, err)
	}
	if want := sent.Sum(nil); !bytes.Equal(got, want) {
		t.Fatalf("checksum at the backend %x, want %x", got, want)
	}
	d := time.Since(start)
	t.Logf("%d MiB in %v (%.0f MiB/s)", size>>20, d.Round(time.Millisecond), float64(size>>20)/d.Seconds())
}
