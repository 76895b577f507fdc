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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"
)

// The PROXY protocol cases: pulselb's relay writing a version 2 header and
// HAProxy with send-proxy-v2, to backends that read the header (iperf3
// cannot) and then sink or echo. The two run in the same topology, in the
// same run, against the same backends.
const (
	ppSinkPort = 7100 // reads the header, counts bytes to EOF, answers the count
	ppRRPort   = 7101 // reads the header, echoes
)

// ppResult is one PROXY protocol case.
type ppResult struct {
	name        string
	gbps        float64
	connsPerSec float64
	p50, p99    time.Duration
	proxyCPU    float64 // cores during the throughput run
}

// runProxyProtocol measures the relay with PROXY v2 against HAProxy with
// send-proxy-v2 and prints their table and ratios.
func runProxyProtocol(tp topology, bin, tmp string) {
	stop, err := tp.startPPServers()
	if err != nil {
		log.Printf("bench/proxy: PROXY protocol servers: %v", err)
		return
	}
	defer stop()
	cases := []struct {
		name  string
		start func() (*exec.Cmd, error)
	}{
		{"pulselb relay, PROXY v2", func() (*exec.Cmd, error) { return tp.startPulselbPP(bin) }},
		{"haproxy send-proxy-v2", func() (*exec.Cmd, error) { return tp.startHAProxyPP(tmp) }},
	}
	var rs []ppResult
	for _, c := range cases {
		proc, err := c.start()
		if err != nil {
			log.Printf("bench/proxy: %s: %v", c.name, err)
			continue
		}
		r := ppResult{name: c.name}
		r.gbps, r.proxyCPU, _, err = measure(proc.Process.Pid, func() (float64, error) { return tp.ppThroughput() })
		if err != nil {
			log.Printf("bench/proxy: %s: throughput: %v", c.name, err)
		}
		if r.connsPerSec, err = tp.ppConnsPerSec(); err != nil {
			log.Printf("bench/proxy: %s: connections: %v", c.name, err)
		}
		if r.p50, r.p99, err = tp.ppLatency(0); err != nil {
			log.Printf("bench/proxy: %s: latency: %v", c.name, err)
		}
		_ = proc.Process.Signal(unix.SIGTERM)
		_ = proc.Wait()
		rs = append(rs, r)
		log.Printf("%-24s done", c.name)
	}
	reportPP(os.Stdout, rs)
}

func reportPP(w io.Writer, rs []ppResult) {
	fmt.Fprintln(w, "\nPROXY protocol v2 (backends read the header, then sink or echo):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | TCP Gbit/s | connections/s | RR p50 | RR p99 | proxy CPU (cores) | proxy CPU s per GB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rs {
		perGB := 0.0
		if r.gbps > 0 {
			perGB = r.proxyCPU / (r.gbps / 8)
		}
		fmt.Fprintf(w, "| %s | %.2f | %.0f | %v | %v | %.2f | %.3f |\n", r.name, r.gbps, r.connsPerSec,
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.proxyCPU, perGB)
	}
	if len(rs) != 2 || rs[1].gbps == 0 || rs[1].connsPerSec == 0 || rs[1].proxyCPU == 0 || rs[0].gbps == 0 {
		return
	}
	u, h := rs[0], rs[1]
	fmt.Fprintln(w)
	fmt.Fprintf(w, "relay v2 / haproxy v2, TCP throughput: %.2f (target ≥ 1.0)\n", u.gbps/h.gbps)
	fmt.Fprintf(w, "relay v2 / haproxy v2, connections/s:  %.2f (target ≥ 1.0)\n", u.connsPerSec/h.connsPerSec)
	fmt.Fprintf(w, "relay v2 / haproxy v2, RR p50:         %.2f (target ≤ 1.0)\n", float64(u.p50)/float64(h.p50))
	fmt.Fprintf(w, "relay v2 / haproxy v2, RR p99:         %.2f (target ≤ 1.0)\n", float64(u.p99)/float64(h.p99))
	fmt.Fprintf(w, "relay v2 / haproxy v2, CPU per GB:     %.2f (target ≤ 1.0)\n", (u.proxyCPU/u.gbps)/(h.proxyCPU/h.gbps))
}

// startPPServers starts the sink and the echo on the ClusterIP; each reads
// and checks a PROXY protocol header first.
func (tp topology) startPPServers() (func(), error) {
	var sink, echo net.Listener
	err := inNetns(tp.ns("backend"), func() (err error) {
		if sink, err = net.Listen("tcp", fmt.Sprintf("%s:%d", clusterIP, ppSinkPort)); err != nil {
			return err
		}
		echo, err = net.Listen("tcp", fmt.Sprintf("%s:%d", clusterIP, ppRRPort))
		return err
	})
	if err != nil {
		if sink != nil {
			sink.Close()
		}
		return nil, err
	}
	serve := func(ln net.Listener, handle func(c net.Conn, r *bufio.Reader)) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReaderSize(c, 256<<10)
				h, err := proxyproto.Read(r)
				if err != nil || !h.Command.IsProxy() {
					log.Printf("bench/proxy: backend: no PROXY header: %v", err)
					return
				}
				handle(c, r)
			}()
		}
	}
	go serve(sink, func(c net.Conn, r *bufio.Reader) {
		n, err := io.Copy(io.Discard, r)
		if err != nil {
			return
		}
		_ = binary.Write(c, binary.BigEndian, uint64(n))
	})
	go serve(echo, func(c net.Conn, r *bufio.Reader) {
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(r, b); err != nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	})
	return func() { sink.Close(); echo.Close() }, nil
}

func (tp topology) startPulselbPP(bin string) (*exec.Cmd, error) {
	cmd := exec.Command("ip", "netns", "exec", tp.ns("pod"), bin, "proxy", "--cluster-ips="+clusterIP,
		fmt.Sprintf("--ports=TCP:%d,TCP:%d,TCP:%d", ppSinkPort, ppRRPort, rrPort),
		fmt.Sprintf("--proxy-protocol=TCP:%d=v2,TCP:%d=v2", ppSinkPort, ppRRPort), "--mode=userspace", "--drain-timeout=1s")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, tp.waitProxy(cmd)
}

func (tp topology) startHAProxyPP(dir string) (*exec.Cmd, error) {
	// The same settings as the plain HAProxy case, plus send-proxy-v2.
	cfg := fmt.Sprintf(`defaults
	mode tcp
	option splice-auto
	timeout connect 5s
	timeout client 60s
	timeout server 60s
listen sink
	bind :%d
	server backend %s:%d send-proxy-v2
listen ppecho
	bind :%d
	server backend %s:%d send-proxy-v2
listen rr
	bind :%d
	server backend %s:%d
`, ppSinkPort, clusterIP, ppSinkPort, ppRRPort, clusterIP, ppRRPort, rrPort, clusterIP, rrPort)
	path := filepath.Join(dir, "haproxy-pp.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", tp.ns("pod"), "haproxy", "-db", "-f", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, tp.waitProxy(cmd)
}

// dialClient connects from the client namespace to nodeIP:port. The
// timeout outlasts a SYN retransmission (1 s), which a loaded machine may
// need, so one dropped SYN is a slow connection, not a failed run.
func (tp topology) dialClient(port int) (net.Conn, error) {
	var c net.Conn
	err := inNetns(tp.ns("client"), func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(port)), 5*time.Second)
		return err
	})
	return c, err
}

// ppThroughput sends for the run duration over one connection and returns
// the Gbit/s the sink counted.
func (tp topology) ppThroughput() (float64, error) {
	c, err := tp.dialClient(ppSinkPort)
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

// ppConnsPerSec opens connections from 4 clients at once for the run
// duration, each sending one byte and reading its echo before closing, and
// returns the connections completed per second.
func (tp topology) ppConnsPerSec() (float64, error) {
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			b := []byte{1}
			for time.Now().Before(end) {
				c, err := tp.dialClient(ppRRPort)
				if err == nil {
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err = c.Write(b); err == nil {
						_, err = io.ReadFull(c, b)
					}
					c.Close()
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// ppLatency is latencyN over the header port.
func (tp topology) ppLatency(n int) (p50, p99 time.Duration, err error) {
	c, err := tp.dialClient(ppRRPort)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
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
