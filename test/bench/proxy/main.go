// Command proxy measures pulselb's proxy data plane against its anchors in
// one run on one namespace topology (run as root):
//
//	client ns ── node ns ── pod ns (the proxy under test)
//	                │
//	                └────── backend ns (the ClusterIP on lo: iperf3 -s, an echo server)
//
// Five cases: direct (the client talks to the ClusterIP, routed by the node,
// no proxy), the pod hop with two hand-written DNAT rules in the pod (the
// floor of any proxy pod), pulselb iptables mode, pulselb userspace mode, and HAProxy in
// TCP mode (Debian's haproxy) in the pod. In the proxied cases the node DNATs
// nodeIP:port to the pod, as a hostPort does. For each case: TCP throughput
// (iperf3, one stream), UDP packets per second (iperf3, 64-byte datagrams,
// unlimited rate), request/response latency p50/p99 (1-byte ping-pong over
// one TCP connection), and the CPU of the proxy process and of the machine.
//
// Then the relay cases (proxyprotocol.go): pulselb's relay writing a version
// 2 header against HAProxy with send-proxy-v2, to backends that read the
// header, and both without a header, to backends that do not: throughput,
// connections per second, latency, CPU per GB and per connection.
//
// Addresses are 198.18.110.0/24–198.18.112.0/24 and 198.19.100.0/24 inside
// namespaces this program creates and deletes.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pulselb/pulselb/test/traffic"
)

const (
	nodeIP    = "198.18.110.1"
	clientIP  = "198.18.110.2"
	podIP     = "198.18.111.2"
	clusterIP = "198.19.100.10"
	iperfPort = 5201
	rrPort    = 7000
)

var (
	duration = flag.Duration("duration", 3*time.Second, "measuring time of each iperf3 run and each latency run")
	keep     = flag.Bool("keep", false, "keep the namespaces after the run, for debugging")
	ppOnly   = flag.Bool("proxy-protocol-only", false, "run only the relay cases (relay with v2 against HAProxy send-proxy-v2, and both without a header)")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if os.Geteuid() != 0 {
		log.Fatal("bench/proxy: needs root to create network namespaces")
	}
	for _, bin := range []string{"ip", "iptables", "iperf3", "haproxy"} {
		if _, err := exec.LookPath(bin); err != nil {
			log.Fatalf("bench/proxy: needs %s (make deps installs it)", bin)
		}
	}
	tmp, err := os.MkdirTemp("", "pulselb-bench-proxy-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "pulselb")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pulselb/pulselb/cmd/pulselb").CombinedOutput(); err != nil {
		log.Fatalf("bench/proxy: building pulselb: %v\n%s", err, out)
	}

	tp := topology(fmt.Sprintf("plbbench-%d-", os.Getpid()))
	defer func() {
		if !*keep {
			tp.remove()
		}
	}()
	if err := tp.create(); err != nil {
		tp.remove()
		log.Fatalf("bench/proxy: %v", err)
	}
	stopServers, err := tp.startServers()
	if err != nil {
		tp.remove()
		log.Fatalf("bench/proxy: %v", err)
	}
	defer stopServers()

	cases := []struct {
		name   string
		target string
		start  func() (*exec.Cmd, error)
		udp    bool
	}{
		{"direct (no proxy)", clusterIP, nil, true},
		{"pod hop, 2 DNAT rules", nodeIP, func() (*exec.Cmd, error) { return nil, tp.minimalDNAT(true) }, true},
		{"node netns DNAT, no pod hop", nodeIP, func() (*exec.Cmd, error) { return nil, tp.nodeDNAT(true) }, true},
		{"pulselb iptables", nodeIP, func() (*exec.Cmd, error) { return tp.startPulselb(bin, "iptables") }, true},
		{"pulselb userspace", nodeIP, func() (*exec.Cmd, error) { return tp.startPulselb(bin, "userspace") }, true},
		{"haproxy (tcp mode)", nodeIP, func() (*exec.Cmd, error) { return tp.startHAProxy(tmp) }, false},
	}
	if *ppOnly {
		cases = nil
	}
	var results []result
	for _, c := range cases {
		r := result{name: c.name}
		var proc *exec.Cmd
		if c.start != nil {
			if proc, err = c.start(); err != nil {
				log.Printf("bench/proxy: %s: %v", c.name, err)
				continue
			}
		}
		pid := 0
		if proc != nil {
			pid = proc.Process.Pid
		}
		r.tcpGbps, r.proxyCPU, r.machineCPU, err = measure(pid, func() (float64, error) { return tp.iperf(c.target, false) })
		if err != nil {
			log.Printf("bench/proxy: %s: tcp: %v", c.name, err)
		}
		if c.udp {
			if r.udpPPS, err = tp.iperf(c.target, true); err != nil {
				log.Printf("bench/proxy: %s: udp: %v", c.name, err)
			}
		}
		if r.p50, r.p99, err = tp.latency(c.target); err != nil {
			log.Printf("bench/proxy: %s: latency: %v", c.name, err)
		}
		if proc != nil {
			_ = proc.Process.Signal(unix.SIGTERM)
			_ = proc.Wait()
		}
		if strings.HasPrefix(c.name, "pod hop") {
			if err := tp.minimalDNAT(false); err != nil {
				log.Fatalf("bench/proxy: %v", err)
			}
		}
		if strings.HasPrefix(c.name, "node netns") {
			if err := tp.nodeDNAT(false); err != nil {
				log.Fatalf("bench/proxy: %v", err)
			}
		}
		results = append(results, r)
		log.Printf("%-20s done", c.name)
	}
	if len(results) > 0 {
		report(os.Stdout, results)
	}
	runProxyProtocol(tp, bin, tmp)
}

type result struct {
	name                 string
	tcpGbps, udpPPS      float64
	p50, p99             time.Duration
	proxyCPU, machineCPU float64 // cores during the TCP run
}

func report(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\n%d CPUs, %s, %v per run\n\n", runtime.NumCPU(), kernel(), *duration)
	fmt.Fprintln(w, "| case | TCP Gbit/s | UDP kpps (64 B) | RR p50 | RR p99 | proxy CPU (cores) | machine CPU (cores) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rs {
		udp, cpu := "n/a", "kernel"
		if r.udpPPS > 0 {
			udp = fmt.Sprintf("%.0f", r.udpPPS/1000)
		}
		if r.proxyCPU > 0 {
			cpu = fmt.Sprintf("%.2f", r.proxyCPU)
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %v | %v | %s | %.2f |\n", r.name, r.tcpGbps, udp,
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), cpu, r.machineCPU)
	}
	get := func(prefix string) *result {
		for i := range rs {
			if strings.HasPrefix(rs[i].name, prefix) {
				return &rs[i]
			}
		}
		return nil
	}
	direct, ipt, user, ha := get("direct"), get("pulselb iptables"), get("pulselb userspace"), get("haproxy")
	floor, hostNet := get("pod hop"), get("node netns")
	fmt.Fprintln(w)
	if hostNet != nil && direct != nil && direct.tcpGbps > 0 {
		fmt.Fprintf(w, "node netns DNAT, no pod hop / direct, TCP throughput: %.2f (what rules in the node's namespace would give)\n", hostNet.tcpGbps/direct.tcpGbps)
	}
	if floor != nil && ipt != nil && floor.tcpGbps > 0 {
		fmt.Fprintf(w, "iptables / pod hop with 2 DNAT rules, TCP throughput: %.2f\n", ipt.tcpGbps/floor.tcpGbps)
		if direct != nil && direct.tcpGbps > 0 {
			fmt.Fprintf(w, "pod hop with 2 DNAT rules / direct, TCP throughput: %.2f (the cost of any proxy pod)\n", floor.tcpGbps/direct.tcpGbps)
		}
	}
	if direct != nil && ipt != nil && direct.tcpGbps > 0 {
		fmt.Fprintf(w, "iptables / direct, TCP throughput: %.2f (target ≥ 0.95)\n", ipt.tcpGbps/direct.tcpGbps)
		if direct.udpPPS > 0 {
			fmt.Fprintf(w, "iptables / direct, UDP packets/s:  %.2f\n", ipt.udpPPS/direct.udpPPS)
		}
	}
	if user != nil && ha != nil && ha.tcpGbps > 0 && ha.proxyCPU > 0 {
		fmt.Fprintf(w, "userspace / haproxy, TCP throughput: %.2f (target ≥ 1.0)\n", user.tcpGbps/ha.tcpGbps)
		fmt.Fprintf(w, "userspace / haproxy, proxy CPU:      %.2f (target ≤ 1.0)\n", user.proxyCPU/ha.proxyCPU)
		fmt.Fprintf(w, "userspace / haproxy, CPU per Gbit/s: %.2f\n", (user.proxyCPU/user.tcpGbps)/(ha.proxyCPU/ha.tcpGbps))
	}
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "linux"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// measure runs fn and returns its value with the CPU of process pid (when not
// 0) and of the whole machine, in cores, while it ran.
func measure(pid int, fn func() (float64, error)) (v, proxyCores, machineCores float64, err error) {
	p0, m0 := procCPU(pid), machineCPU()
	start := time.Now()
	v, err = fn()
	wall := time.Since(start).Seconds()
	p1, m1 := procCPU(pid), machineCPU()
	return v, (p1 - p0) / wall, (m1 - m0) / wall, err
}

// procCPU returns the user+system seconds of pid and all its threads.
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// machineCPU returns the busy seconds of all CPUs, softirq included, which is
// where iptables-mode forwarding is spent.
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var busy float64
	for i, s := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseFloat(s, 64)
		busy += v
	}
	return busy / 100
}

type topology string

func (tp topology) ns(role string) string { return string(tp) + role }

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (tp topology) create() error {
	var cmds [][]string
	add := func(args ...string) { cmds = append(cmds, args) }
	node := tp.ns("node")
	for _, role := range []string{"client", "node", "pod", "backend"} {
		add("ip", "netns", "add", tp.ns(role))
		add("ip", "-n", tp.ns(role), "link", "set", "lo", "up")
	}
	for _, l := range []struct {
		role   string
		subnet int
	}{{"client", 110}, {"pod", 111}, {"backend", 112}} {
		peer := tp.ns(l.role)
		add("ip", "-n", node, "link", "add", "to-"+l.role, "type", "veth", "peer", "name", "eth0", "netns", peer)
		add("ip", "-n", node, "addr", "add", fmt.Sprintf("198.18.%d.1/24", l.subnet), "dev", "to-"+l.role)
		add("ip", "-n", peer, "addr", "add", fmt.Sprintf("198.18.%d.2/24", l.subnet), "dev", "eth0")
		add("ip", "-n", node, "link", "set", "to-"+l.role, "up")
		add("ip", "-n", peer, "link", "set", "eth0", "up")
		add("ip", "-n", peer, "route", "add", "default", "via", fmt.Sprintf("198.18.%d.1", l.subnet))
	}
	add("ip", "-n", tp.ns("backend"), "addr", "add", clusterIP+"/32", "dev", "lo")
	add("ip", "-n", node, "route", "add", "198.19.100.0/24", "via", "198.18.112.2")
	add("ip", "netns", "exec", node, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	add("ip", "netns", "exec", tp.ns("pod"), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	for _, p := range []string{"tcp", "udp"} {
		for _, port := range []int{iperfPort, rrPort, ppSinkPort, ppRRPort, plainSinkPort, plainRRPort} {
			add("ip", "netns", "exec", node, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", nodeIP, "-p", p,
				"--dport", strconv.Itoa(port), "-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", podIP, port))
		}
	}
	for _, c := range cmds {
		if err := sh(c...); err != nil {
			return err
		}
	}
	return nil
}

func (tp topology) remove() {
	for _, role := range []string{"client", "node", "pod", "backend"} {
		_ = exec.Command("ip", "netns", "del", tp.ns(role)).Run()
	}
}

// inNetns runs fn on a thread in network namespace ns; sockets it creates
// stay there.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked if the thread cannot go back
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// startServers starts iperf3 -s and a TCP echo server on the ClusterIP.
func (tp topology) startServers() (func(), error) {
	iperf := exec.Command("ip", "netns", "exec", tp.ns("backend"), "iperf3", "-s", "-B", clusterIP, "-p", strconv.Itoa(iperfPort))
	if err := iperf.Start(); err != nil {
		return nil, err
	}
	var ln net.Listener
	err := inNetns(tp.ns("backend"), func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf("%s:%d", clusterIP, rrPort))
		return err
	})
	if err != nil {
		_ = iperf.Process.Kill()
		return nil, err
	}
	go traffic.Serve(ln, func(c net.Conn) { _, _ = io.Copy(c, c) })
	return func() {
		ln.Close()
		_ = iperf.Process.Kill()
		_ = iperf.Wait()
	}, waitListening(tp.ns("client"), netip.MustParseAddrPort(fmt.Sprintf("%s:%d", clusterIP, iperfPort)))
}

// waitListening polls until a TCP connect to addr from ns succeeds.
func waitListening(ns string, addr netip.AddrPort) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := inNetns(ns, func() error {
			c, err := net.DialTimeout("tcp", addr.String(), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not reachable from %s: %w", addr, ns, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tp topology) startPulselb(bin, mode string) (*exec.Cmd, error) {
	return tp.startProxy(bin, "proxy", "--cluster-ips="+clusterIP,
		fmt.Sprintf("--ports=TCP:%d,UDP:%d,TCP:%d", iperfPort, iperfPort, rrPort), "--mode="+mode, "--drain-timeout=1s")
}

// minimalDNAT installs (or, with install false, removes) the least a proxy
// pod can do to reach the ClusterIP: one DNAT rule per port and one
// MASQUERADE, in the built-in chains, with no process, no own chains, no
// source-range filter and no rule checks. It is the floor that shows the
// cost of the pod hop itself, apart from pulselb's rules.
func (tp topology) minimalDNAT(install bool) error {
	pod := tp.ns("pod")
	if !install {
		for _, chain := range []string{"PREROUTING", "POSTROUTING"} {
			if err := sh("ip", "netns", "exec", pod, "iptables", "-t", "nat", "-F", chain); err != nil {
				return err
			}
		}
		return nil
	}
	var cmds [][]string
	for _, pp := range []struct {
		proto string
		port  int
	}{{"tcp", iperfPort}, {"udp", iperfPort}, {"tcp", rrPort}} {
		cmds = append(cmds, []string{"ip", "netns", "exec", pod, "iptables", "-t", "nat", "-A", "PREROUTING",
			"-p", pp.proto, "--dport", strconv.Itoa(pp.port), "-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", clusterIP, pp.port)})
	}
	cmds = append(cmds, []string{"ip", "netns", "exec", pod, "iptables", "-t", "nat", "-A", "POSTROUTING",
		"-d", clusterIP, "-j", "MASQUERADE"})
	for _, c := range cmds {
		if err := sh(c...); err != nil {
			return err
		}
	}
	return nil
}

// nodeDNAT installs (or removes) what a proxy in the node's own network
// namespace (hostNetwork) would: one DNAT rule per port from nodeIP:port
// straight to the ClusterIP, ahead of the hostPort rules, so that traffic
// never enters the pod. pulselb does not run this way (its rules live in
// the pod, away from the host's firewall); the case measures what that
// design choice costs.
func (tp topology) nodeDNAT(install bool) error {
	op := "-I"
	if !install {
		op = "-D"
	}
	for _, pp := range []struct {
		proto string
		port  int
	}{{"tcp", iperfPort}, {"udp", iperfPort}, {"tcp", rrPort}} {
		rule := []string{"ip", "netns", "exec", tp.ns("node"), "iptables", "-t", "nat", op, "PREROUTING"}
		if install {
			rule = append(rule, "1")
		}
		rule = append(rule, "-d", nodeIP, "-p", pp.proto, "--dport", strconv.Itoa(pp.port),
			"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", clusterIP, pp.port))
		if err := sh(rule...); err != nil {
			return err
		}
	}
	return nil
}

func (tp topology) startHAProxy(dir string) (*exec.Cmd, error) {
	return tp.startHAProxyWith(filepath.Join(dir, "haproxy.cfg"), fmt.Sprintf(`listen iperf
	bind :%d
	server backend %s:%d
listen rr
	bind :%d
	server backend %s:%d
`, iperfPort, clusterIP, iperfPort, rrPort, clusterIP, rrPort))
}

// startHAProxyWith writes HAProxy's configuration to path, its defaults
// and then listens, and starts it in the proxy pod's namespace. maxconn
// stays at HAProxy's default, which fits the file descriptor limit; option
// splice-auto gives HAProxy the kernel splice pulselb uses.
func (tp topology) startHAProxyWith(path, listens string) (*exec.Cmd, error) {
	cfg := `defaults
	mode tcp
	option splice-auto
	timeout connect 5s
	timeout client 60s
	timeout server 60s
` + listens
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return tp.startProxy("haproxy", "-db", "-f", path)
}

// startProxy starts argv in the proxy pod's namespace and waits until the
// echo port answers through the node.
func (tp topology) startProxy(argv ...string) (*exec.Cmd, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", tp.ns("pod")}, argv...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, tp.waitProxy(cmd)
}

// waitProxy waits until the echo port answers through the node.
func (tp topology) waitProxy(cmd *exec.Cmd) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := tp.latencyN(nodeIP, 1)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("proxy not forwarding after 10s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// iperf runs iperf3 from the client ns and returns Gbit/s received (TCP) or
// packets per second received (UDP).
func (tp topology) iperf(target string, udp bool) (float64, error) {
	args := []string{"netns", "exec", tp.ns("client"), "iperf3", "-c", target, "-p", strconv.Itoa(iperfPort),
		"-t", strconv.Itoa(int(duration.Seconds())), "-J"}
	if udp {
		args = append(args, "-u", "-b", "0", "-l", "64")
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return 0, fmt.Errorf("iperf3: %v: %s", err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sum struct {
				Packets     float64 `json:"packets"`
				LostPackets float64 `json:"lost_packets"`
				Seconds     float64 `json:"seconds"`
			} `json:"sum"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, fmt.Errorf("iperf3 output: %v", err)
	}
	if res.Error != "" {
		return 0, errors.New(res.Error)
	}
	if udp {
		s := res.End.Sum
		if s.Seconds == 0 {
			return 0, errors.New("iperf3 reported no UDP run")
		}
		return (s.Packets - s.LostPackets) / s.Seconds, nil
	}
	return res.End.SumReceived.BitsPerSecond / 1e9, nil
}

// latency runs 1-byte request/response round trips for the run duration.
func (tp topology) latency(target string) (p50, p99 time.Duration, err error) {
	return tp.latencyN(target, 0)
}

// latencyN runs n round trips, or as many as fit in the run duration when n
// is 0, and returns the 50th and 99th percentile.
func (tp topology) latencyN(target string, n int) (p50, p99 time.Duration, err error) {
	var c net.Conn
	err = inNetns(tp.ns("client"), func() (err error) {
		c, err = net.DialTimeout("tcp", fmt.Sprintf("%s:%d", target, rrPort), time.Second)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	return roundTrips(c, n)
}

// roundTrips runs n 1-byte request/response round trips over c, or as
// many as fit in the run duration when n is 0, and returns the 50th and
// 99th percentile.
func roundTrips(c net.Conn, n int) (p50, p99 time.Duration, err error) {
	end := time.Now().Add(*duration)
	_ = c.SetDeadline(end.Add(5 * time.Second))
	var rtts []time.Duration
	b := []byte{1}
	for i := 0; n == 0 || i < n; i++ {
		if n == 0 && time.Now().After(end) {
			break
		}
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return 0, 0, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return 0, 0, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], rtts[len(rtts)*99/100], nil
}
