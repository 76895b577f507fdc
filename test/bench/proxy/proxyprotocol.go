package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"

	"github.com/pulselb/pulselb/test/traffic"
)

// The relay cases: pulselb's relay writing a version 2 header and HAProxy
// with send-proxy-v2, to backends that read the header (iperf3 cannot) and
// then sink or echo; and the two again on ports without a header, to
// backends that sink or echo at once. All run in the same topology, in the
// same run, against the same backends.
const (
	ppSinkPort    = 7100 // reads the header, counts bytes to EOF, answers the count
	ppRRPort      = 7101 // reads the header, echoes
	plainSinkPort = 7102 // counts bytes to EOF, answers the count
	plainRRPort   = 7103 // echoes
)

// relayPorts is a pair of ports a case is measured on: a sink and an echo.
type relayPorts struct {
	label      string // what the proxy sends before the client's bytes
	sink, echo int
}

var (
	headerPorts = relayPorts{"PROXY v2", ppSinkPort, ppRRPort}
	plainPorts  = relayPorts{"no header", plainSinkPort, plainRRPort}
)

// ppResult is one relay case.
type ppResult struct {
	name        string
	gbps        float64
	connsPerSec float64
	p50, p99    time.Duration
	proxyCPU    float64 // cores during the throughput run
	cpuPerConn  time.Duration
}

// runProxyProtocol measures the relay against HAProxy, with and without a
// PROXY v2 header, and prints their table and ratios.
func runProxyProtocol(tp topology, bin, tmp string) {
	stop, err := tp.startPPServers()
	if err != nil {
		log.Printf("bench/proxy: relay case servers: %v", err)
		return
	}
	defer stop()
	proxies := []struct {
		name  string
		start func() (*exec.Cmd, error)
	}{
		{"pulselb relay", func() (*exec.Cmd, error) { return tp.startPulselbPP(bin) }},
		{"haproxy", func() (*exec.Cmd, error) { return tp.startHAProxyPP(tmp) }},
	}
	results := map[relayPorts][]ppResult{}
	for _, p := range proxies {
		proc, err := p.start()
		if err != nil {
			log.Printf("bench/proxy: %s: %v", p.name, err)
			continue
		}
		for _, ports := range []relayPorts{headerPorts, plainPorts} {
			name := p.name + ", " + ports.label
			results[ports] = append(results[ports], tp.measureRelay(name, proc.Process.Pid, ports))
			log.Printf("%-28s done", name)
		}
		_ = proc.Process.Signal(unix.SIGTERM)
		_ = proc.Wait()
	}
	for _, ports := range []relayPorts{headerPorts, plainPorts} {
		reportPP(os.Stdout, ports.label, results[ports])
	}
}

// measureRelay measures the proxy process pid on one pair of ports.
func (tp topology) measureRelay(name string, pid int, ports relayPorts) ppResult {
	r := ppResult{name: name}
	var err error
	r.gbps, r.proxyCPU, _, err = measure(pid, func() (float64, error) { return tp.ppThroughput(ports.sink) })
	if err != nil {
		log.Printf("bench/proxy: %s: throughput: %v", name, err)
	}
	var cores float64
	if r.connsPerSec, cores, _, err = measure(pid, func() (float64, error) { return tp.ppConnsPerSec(ports.echo) }); err != nil {
		log.Printf("bench/proxy: %s: connections: %v", name, err)
	}
	if r.connsPerSec > 0 {
		r.cpuPerConn = time.Duration(cores / r.connsPerSec * float64(time.Second))
	}
	if r.p50, r.p99, err = tp.ppLatency(ports.echo, 0); err != nil {
		log.Printf("bench/proxy: %s: latency: %v", name, err)
	}
	return r
}

func reportPP(w io.Writer, label string, rs []ppResult) {
	fmt.Fprintf(w, "\nRelay, %s (backends read what the proxy sends, then sink or echo):\n\n", label)
	fmt.Fprintln(w, "| case | TCP Gbit/s | connections/s | RR p50 | RR p99 | proxy CPU (cores) | proxy CPU s per GB | proxy CPU per connection |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		perGB := 0.0
		if r.gbps > 0 {
			perGB = r.proxyCPU / (r.gbps / 8)
		}
		fmt.Fprintf(w, "| %s | %.2f | %.0f | %v | %v | %.2f | %.3f | %v |\n", r.name, r.gbps, r.connsPerSec,
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.proxyCPU, perGB, r.cpuPerConn.Round(time.Microsecond))
	}
	if len(rs) != 2 || rs[1].gbps == 0 || rs[1].connsPerSec == 0 || rs[1].proxyCPU == 0 || rs[0].gbps == 0 || rs[1].cpuPerConn == 0 {
		return
	}
	u, h := rs[0], rs[1]
	fmt.Fprintln(w)
	fmt.Fprintf(w, "relay / haproxy, %s, TCP throughput:      %.2f (target ≥ 1.0)\n", label, u.gbps/h.gbps)
	fmt.Fprintf(w, "relay / haproxy, %s, connections/s:       %.2f (target ≥ 1.0)\n", label, u.connsPerSec/h.connsPerSec)
	fmt.Fprintf(w, "relay / haproxy, %s, RR p50:              %.2f (target ≤ 1.0)\n", label, float64(u.p50)/float64(h.p50))
	fmt.Fprintf(w, "relay / haproxy, %s, RR p99:              %.2f (target ≤ 1.0)\n", label, float64(u.p99)/float64(h.p99))
	fmt.Fprintf(w, "relay / haproxy, %s, CPU per GB:          %.2f (target ≤ 1.0)\n", label, (u.proxyCPU/u.gbps)/(h.proxyCPU/h.gbps))
	fmt.Fprintf(w, "relay / haproxy, %s, CPU per connection:  %.2f (target ≤ 1.0)\n", label, float64(u.cpuPerConn)/float64(h.cpuPerConn))
}

// startPPServers starts the sinks and the echoes on the ClusterIP; those
// of the header ports read and check a PROXY protocol header first.
func (tp topology) startPPServers() (func(), error) {
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	err := inNetns(tp.ns("backend"), func() error {
		for _, port := range []int{ppSinkPort, ppRRPort, plainSinkPort, plainRRPort} {
			ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", clusterIP, port))
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		return nil
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	serve := func(ln net.Listener, header bool, handle func(c net.Conn, r *bufio.Reader)) {
		traffic.Serve(ln, func(c net.Conn) {
			r := bufio.NewReaderSize(c, 256<<10)
			if header {
				h, err := proxyproto.Read(r)
				if err != nil || !h.Command.IsProxy() {
					log.Printf("bench/proxy: backend: no PROXY header: %v", err)
					return
				}
			}
			handle(c, r)
		})
	}
	sink := func(c net.Conn, r *bufio.Reader) {
		n, err := io.Copy(io.Discard, r)
		if err != nil {
			return
		}
		_ = binary.Write(c, binary.BigEndian, uint64(n))
	}
	echo := func(c net.Conn, r *bufio.Reader) {
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(r, b); err != nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}
	go serve(lns[0], true, sink)
	go serve(lns[1], true, echo)
	go serve(lns[2], false, sink)
	go serve(lns[3], false, echo)
	return closeAll, nil
}

func (tp topology) startPulselbPP(bin string) (*exec.Cmd, error) {
	return tp.startProxy(bin, "proxy", "--cluster-ips="+clusterIP,
		fmt.Sprintf("--ports=TCP:%d,TCP:%d,TCP:%d,TCP:%d,TCP:%d", ppSinkPort, ppRRPort, plainSinkPort, plainRRPort, rrPort),
		fmt.Sprintf("--proxy-protocol=TCP:%d=v2,TCP:%d=v2", ppSinkPort, ppRRPort), "--mode=userspace", "--drain-timeout=1s")
}

func (tp topology) startHAProxyPP(dir string) (*exec.Cmd, error) {
	// The same settings as the plain HAProxy case, plus send-proxy-v2 on
	// the header ports.
	return tp.startHAProxyWith(filepath.Join(dir, "haproxy-pp.cfg"), fmt.Sprintf(`listen sink
	bind :%d
	server backend %s:%d send-proxy-v2
listen ppecho
	bind :%d
	server backend %s:%d send-proxy-v2
listen plainsink
	bind :%d
	server backend %s:%d
listen plainecho
	bind :%d
	server backend %s:%d
listen rr
	bind :%d
	server backend %s:%d
`, ppSinkPort, clusterIP, ppSinkPort, ppRRPort, clusterIP, ppRRPort, plainSinkPort, clusterIP, plainSinkPort,
		plainRRPort, clusterIP, plainRRPort, rrPort, clusterIP, rrPort))
}

// dialClient connects from the client namespace to nodeIP:port. The
// timeout outlasts a SYN retransmission (1 s), which a loaded machine may
// need, so one dropped SYN is a slow connection, not a failed run.
func (tp topology) dialClient(port int) (net.Conn, error) {
	var c net.Conn
	err := inNetns(tp.ns("client"), func() (err error) {
		c, err = dialNode(port)
		return err
	})
	return c, err
}

func dialNode(port int) (net.Conn, error) {
	return net.DialTimeout("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(port)), 5*time.Second)
}

// ppThroughput sends for the run duration over one connection to the sink
// at port and returns the Gbit/s the sink counted.
func (tp topology) ppThroughput(port int) (float64, error) {
	c, err := tp.dialClient(port)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	start := time.Now()
	end := start.Add(*duration)
	_ = c.SetDeadline(end.Add(10 * time.Second))
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	var n uint64
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		return 0, fmt.Errorf("reading the sink's count: %w", err)
	}
	return float64(n) * 8 / time.Since(start).Seconds() / 1e9, nil
}

// ppConnsPerSec opens connections to the echo at port from 4 clients at
// once for the run duration, each sending one byte and reading its echo
// before closing, and returns the connections completed per second. Each
// client enters the client namespace once and stays there, so the
// client's own cost per connection is a dial, not two namespace switches.
func (tp topology) ppConnsPerSec(port int) (float64, error) {
	ns, err := os.Open(filepath.Join("/run/netns", tp.ns("client")))
	if err != nil {
		return 0, err
	}
	defer ns.Close()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			// The thread never leaves the namespace: it ends with the
			// goroutine, which returns locked.
			runtime.LockOSThread()
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				fail(err)
				return
			}
			b := []byte{1}
			for time.Now().Before(end) {
				c, err := dialNode(port)
				if err == nil {
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err = c.Write(b); err == nil {
						_, err = io.ReadFull(c, b)
					}
					c.Close()
				}
				if err != nil {
					fail(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// ppLatency is latencyN over the echo at port.
func (tp topology) ppLatency(port, n int) (p50, p99 time.Duration, err error) {
	c, err := tp.dialClient(port)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	return roundTrips(c, n)
}
