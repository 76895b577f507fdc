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
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"
)

// On loopback every 127/8 address is local, so the proxy, the stand-in
// ClusterIP and the clients each get their own address and may share port
// numbers, as they do across network namespaces.
var (
	proxyAddr   = netip.MustParseAddr("127.0.0.2")
	clusterIP   = netip.MustParseAddr("127.0.0.3")
	allowedAddr = netip.MustParseAddr("127.0.0.4")
	refusedAddr = netip.MustParseAddr("127.0.0.5")
	allowOnly   = SourceRanges{netip.MustParsePrefix("127.0.0.4/32")}
)

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tcpBackend listens on the ClusterIP and answers each connection with
// handle.
func tcpBackend(t testing.TB, handle func(c *net.TCPConn)) uint16 {
	t.Helper()
	return tcpServer(t, clusterIP, handle)
}

// echo copies the connection back until the client's FIN, then sends its own.
func echo(c *net.TCPConn) {
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
}

// sumAfterEOF reads to EOF, then answers with the SHA-256 of what it read:
// it only answers after the client's half-close has come through.
func sumAfterEOF(c *net.TCPConn) {
	h := sha256.New()
	if _, err := io.Copy(h, c); err != nil {
		return
	}
	_, _ = c.Write(h.Sum(nil))
}

type runningProxy struct {
	*Proxy
	metrics *Metrics
	stop    context.CancelFunc
	done    chan error
}

// startProxy starts a proxy with cfg and stops it when the test ends.
func startProxy(t testing.TB, cfg Config) *runningProxy {
	t.Helper()
	m := NewMetrics()
	p, err := New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	if err := p.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	rp := &runningProxy{Proxy: p, metrics: m, stop: cancel, done: make(chan error, 1)}
	go func() { rp.done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-rp.done; err != nil {
			t.Errorf("stopping proxy: %v", err)
		}
	})
	return rp
}

func dialFrom(src netip.Addr, dst netip.AddrPort) (*net.TCPConn, error) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", dst.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

func userspaceConfig(ports ...Port) Config {
	return Config{
		ClusterIPs: []netip.Addr{clusterIP}, Ports: ports, Mode: ModeUserspace,
		ListenAddress: proxyAddr, SourceRanges: allowOnly, DrainTimeout: 2 * time.Second,
	}
}

func TestUserspaceTCP(t *testing.T) {
	sumPort := tcpBackend(t, sumAfterEOF)
	echoPort := tcpBackend(t, echo)
	// A port with nothing behind the ClusterIP.
	closed, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(clusterIP, 0)))
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).AddrPort().Port()
	closed.Close()
	p := startProxy(t, userspaceConfig(Port{TCP, sumPort}, Port{TCP, echoPort}, Port{TCP, closedPort}))

	payload := make([]byte, 8<<20)
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	wantSum := sha256.Sum256(payload)

	tests := []struct {
		name   string
		src    netip.Addr
		port   uint16
		send   []byte
		want   []byte
		refuse bool
		reason string
	}{
		{name: "echo", src: allowedAddr, port: echoPort, send: []byte("hello"), want: []byte("hello")},
		// The backend answers only after EOF: the relay must pass the
		// client's half-close on and keep the other direction open.
		{name: "half-close, 8 MiB checksum", src: allowedAddr, port: sumPort, send: payload, want: wantSum[:]},
		{name: "outside source ranges", src: refusedAddr, port: echoPort, send: []byte("x"), refuse: true, reason: "source-range"},
		{name: "backend closed", src: allowedAddr, port: closedPort, send: []byte("x"), refuse: true, reason: "backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := dialFrom(tt.src, netip.AddrPortFrom(proxyAddr, tt.port))
			if tt.refuse && errors.Is(err, syscall.ECONNRESET) {
				// On loopback the relay's reset can beat the dialer's
				// check of the finished connect.
				if n := testutil.ToFloat64(p.metrics.Refused.WithLabelValues("tcp", tt.reason)); n < 1 {
					t.Errorf("refused_total{reason=%q} = %v, want ≥ 1", tt.reason, n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			writeErr := make(chan error, 1)
			go func() {
				_, err := c.Write(tt.send)
				if err == nil {
					err = c.CloseWrite()
				}
				writeErr <- err
			}()
			got, readErr := io.ReadAll(c)
			if tt.refuse {
				// A socket reports a reset once, to whichever call comes
				// first: the read, or the write racing it.
				wErr := <-writeErr
				reset := errors.Is(readErr, syscall.ECONNRESET) ||
					errors.Is(wErr, syscall.ECONNRESET) || errors.Is(wErr, syscall.EPIPE)
				if len(got) != 0 || !reset {
					t.Errorf("read %d bytes, %v (write: %v); want a reset", len(got), readErr, wErr)
				}
				if n := testutil.ToFloat64(p.metrics.Refused.WithLabelValues("tcp", tt.reason)); n < 1 {
					t.Errorf("refused_total{reason=%q} = %v, want ≥ 1", tt.reason, n)
				}
				return
			}
			if readErr != nil || <-writeErr != nil {
				t.Fatalf("read: %v", readErr)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("got %d bytes %.16x, want %d bytes %.16x", len(got), got, len(tt.want), tt.want)
			}
		})
	}
	waitFor(t, 5*time.Second, "the relayed bytes to be counted", func() bool {
		return testutil.ToFloat64(p.metrics.Bytes.WithLabelValues("tcp", "in")) >= float64(len(payload)+5) &&
			testutil.ToFloat64(p.metrics.Active.WithLabelValues("tcp")) == 0
	})
	if n := testutil.ToFloat64(p.metrics.Connections.WithLabelValues("tcp")); n != 2 {
		t.Errorf("connections_total = %v, want 2", n)
	}
}

// tcpServer listens on addr:0 and answers each connection with handle.
func tcpServer(t testing.TB, addr netip.Addr, handle func(c *net.TCPConn)) uint16 {
	t.Helper()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort().Port()
}

// TestUserspaceTCPNodePortTarget checks that a port with a NodePort is
// relayed to the node's IP at that NodePort, and a port without one still
// to the ClusterIP.
func TestUserspaceTCPNodePortTarget(t *testing.T) {
	nodeIP := netip.MustParseAddr("127.0.0.6")
	answer := func(who string) func(c *net.TCPConn) {
		return func(c *net.TCPConn) { _, _ = c.Write([]byte(who)) }
	}
	nodePort := tcpServer(t, nodeIP, answer("node"))
	// Both Service ports also have a ClusterIP backend, so a relay that
	// ignored the target would answer "cluster".
	local := tcpBackend(t, answer("cluster"))
	other := tcpBackend(t, answer("cluster"))
	cfg := userspaceConfig(Port{TCP, local}, Port{TCP, other})
	cfg.NodePorts = map[Port]uint16{{TCP, local}: nodePort}
	cfg.NodeIPs = []netip.Addr{nodeIP}
	startProxy(t, cfg)

	for _, tt := range []struct {
		port uint16
		want string
	}{{local, "node"}, {other, "cluster"}} {
		c, err := dialFrom(allowedAddr, netip.AddrPortFrom(proxyAddr, tt.port))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != tt.want {
			t.Errorf("port %d answered %q (%v), want %q", tt.port, got, err, tt.want)
		}
	}
}

// TestUserspaceDrain checks a shutdown: new connections are refused at once,
// an open one keeps working until the drain timeout, then is closed.
func TestUserspaceDrain(t *testing.T) {
	port := tcpBackend(t, echo)
	cfg := userspaceConfig(Port{TCP, port})
	cfg.DrainTimeout = 500 * time.Millisecond
	p := startProxy(t, cfg)
	target := netip.AddrPortFrom(proxyAddr, port)
	dial := func() (*net.TCPConn, error) { return dialFrom(allowedAddr, target) }
	c := openEcho(t, dial)
	start := time.Now()
	p.stop()
	waitRefused(t, 5*time.Second, dial)
	if err := roundTrip(c, "during drain"); err != nil {
		t.Errorf("open connection broken during drain: %v", err)
	}
	if d := p.stopped(t, start); d < cfg.DrainTimeout || d > cfg.DrainTimeout+3*time.Second {
		t.Errorf("Run returned after %v, want about the drain timeout %v", d, cfg.DrainTimeout)
	}
	wantClosed(t, c)
}

// udpEcho answers every datagram on the ClusterIP with the datagram.
func udpEcho(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(clusterIP, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
}

// udpExchange sends msg from src and returns the answer, or an error when
// none comes within wait.
func udpExchange(t *testing.T, src netip.Addr, dst netip.AddrPort, msg []byte, wait time.Duration) ([]byte, error) {
	t.Helper()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(dst))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, maxDatagram)
	n, err := c.Read(buf)
	return buf[:n], err
}

func TestUserspaceUDP(t *testing.T) {
	port := udpEcho(t)
	cfg := userspaceConfig(Port{UDP, port})
	cfg.UDPIdleTimeout = 300 * time.Millisecond
	cfg.SourceRanges = SourceRanges{netip.MustParsePrefix("127.0.0.4/31")} // .4 and .5
	cfg.UDPMaxSessions = 2
	p := startProxy(t, cfg)
	target := netip.AddrPortFrom(proxyAddr, port)
	big := bytes.Repeat([]byte("u"), 60000)

	tests := []struct {
		name    string
		src     string
		msg     []byte
		answer  bool
		refused string // the refused_total reason counted
	}{
		{name: "small datagram", src: "127.0.0.4", msg: []byte("ping"), answer: true},
		{name: "60 kB datagram", src: "127.0.0.5", msg: big, answer: true},
		{name: "outside source ranges", src: "127.0.0.6", msg: []byte("ping"), refused: "source-range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A refused datagram gets no answer, so "none within 300 ms" is
			// the only observable.
			wait := 5 * time.Second
			if !tt.answer {
				wait = 300 * time.Millisecond
			}
			got, err := udpExchange(t, netip.MustParseAddr(tt.src), target, tt.msg, wait)
			if tt.answer {
				if err != nil || !bytes.Equal(got, tt.msg) {
					t.Fatalf("answer %d bytes, %v; want the %d bytes sent", len(got), err, len(tt.msg))
				}
				return
			}
			if err == nil {
				t.Fatalf("got an answer %q, want none", got)
			}
			if n := testutil.ToFloat64(p.metrics.Refused.WithLabelValues("udp", tt.refused)); n < 1 {
				t.Errorf("refused_total{reason=%q} = %v", tt.refused, n)
			}
		})
	}

	t.Run("session limit", func(t *testing.T) {
		waitFor(t, 5*time.Second, "idle sessions to end", func() bool {
			return testutil.ToFloat64(p.metrics.Active.WithLabelValues("udp")) == 0
		})
		// Two sessions from kept-open sockets fill the table.
		for range 2 {
			c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(allowedAddr, 0)), net.UDPAddrFromAddrPort(target))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("hold")); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 16)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := udpExchange(t, allowedAddr, target, []byte("third"), 300*time.Millisecond); err == nil {
			t.Error("a third session was opened beyond the limit of 2")
		}
		if n := testutil.ToFloat64(p.metrics.Refused.WithLabelValues("udp", "session-limit")); n < 1 {
			t.Errorf("refused_total{reason=session-limit} = %v", n)
		}
	})

	t.Run("idle sessions end", func(t *testing.T) {
		waitFor(t, 5*time.Second, "idle sessions to end", func() bool {
			return testutil.ToFloat64(p.metrics.Active.WithLabelValues("udp")) == 0
		})
	})
	if n := testutil.ToFloat64(p.metrics.Bytes.WithLabelValues("udp", "out")); n < float64(len(big)) {
		t.Errorf("bytes_total{udp,out} = %v, want ≥ %d", n, len(big))
	}
}

// fakeIPTablesConfig is an iptables-mode Config for one IPv4 port whose
// rules go to ipt, checked every 20 ms.
func fakeIPTablesConfig(t *testing.T, ipt *fakeIPTables) Config {
	t.Helper()
	return Config{
		ClusterIPs:     []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		Ports:          []Port{{TCP, 80}},
		Mode:           ModeIPTables,
		ResyncInterval: 20 * time.Millisecond,
		ProcSys:        fakeProcSys(t, "1", "0"),
		NewIPTables:    func(Family) (IPTables, error) { return ipt, nil },
	}
}

// httpServer serves p's /healthz and /metrics until the test ends.
func (p *runningProxy) httpServer(t *testing.T) *httptest.Server {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := p.metrics.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(p.Proxy, reg))
	t.Cleanup(srv.Close)
	return srv
}

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestIPTablesModeWithFake runs the whole iptables life cycle against the
// fake: install, a hand-deleted rule restored by the resync, health and
// metrics, and removal on shutdown.
func TestIPTablesModeWithFake(t *testing.T) {
	ipt := newFakeIPTables()
	p := startProxy(t, fakeIPTablesConfig(t, ipt))
	if p.Mode() != ModeIPTables {
		t.Fatalf("mode %q, want iptables", p.Mode())
	}
	want := ipt.dump()
	if len(want) == 0 {
		t.Fatal("no rules installed")
	}
	ipt.edit(func(c map[Chain][]string) { c[Chain{"nat", chainPrerouting}] = nil })
	waitFor(t, 5*time.Second, "the deleted rule to be restored", func() bool {
		return slices.Equal(ipt.dump(), want)
	})
	waitFor(t, 5*time.Second, "the repair to be counted", func() bool {
		return testutil.ToFloat64(p.metrics.RuleRepairs.WithLabelValues("ipv4")) >= 1
	})

	srv := p.httpServer(t)
	for path, want := range map[string]string{
		"/healthz": "ok: mode=iptables phase=serving",
		"/metrics": `pulselb_proxy_mode{mode="iptables"} 1`,
	} {
		if code, body := get(t, srv.URL+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d %q, want 200 containing %q", path, code, body, want)
		}
	}

	p.stop()
	p.stopped(t, time.Now())
	if got := ipt.dump(); len(got) != 0 {
		t.Errorf("rules left after shutdown:\n%s", strings.Join(got, "\n"))
	}
}

// TestIPTablesModeNodePortTarget checks that the installed rules send a port
// with a NodePort to the node IP of each family, and remove them on shutdown.
func TestIPTablesModeNodePortTarget(t *testing.T) {
	ipts := map[Family]*fakeIPTables{IPv4: newFakeIPTables(), IPv6: newFakeIPTables()}
	cfg := Config{
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")},
		Ports:      []Port{{TCP, 80}, {UDP, 53}},
		NodePorts:  map[Port]uint16{{TCP, 80}: 30080},
		NodeIPs:    []netip.Addr{netip.MustParseAddr("fd00:198:18::1"), netip.MustParseAddr("198.18.0.1")},
		Mode:       ModeIPTables,
		ProcSys:    fakeProcSys(t, "1", "1"),
		NewIPTables: func(f Family) (IPTables, error) {
			return ipts[f], nil
		},
	}
	p := startProxy(t, cfg)
	for f, want := range map[Family][]string{
		IPv4: {"--to-destination 198.18.0.1:30080", "--to-destination 10.96.0.10:53"},
		IPv6: {"--to-destination [fd00:198:18::1]:30080", "--to-destination [fd00::10]:53"},
	} {
		got := strings.Join(ipts[f].dump(), "\n")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s rules lack %q:\n%s", f, w, got)
			}
		}
	}
	p.stop()
	p.stopped(t, time.Now())
	for f, ipt := range ipts {
		if got := ipt.dump(); len(got) != 0 {
			t.Errorf("%s rules left after shutdown:\n%s", f, strings.Join(got, "\n"))
		}
	}
}

func TestAutoMode(t *testing.T) {
	port := tcpBackend(t, echo)
	tests := []struct {
		name       string
		requested  Mode
		forwarding string
		appendErr  error
		want       Mode
		wantErr    string
	}{
		{name: "iptables works", requested: ModeAuto, forwarding: "1", want: ModeIPTables},
		{name: "forwarding off", requested: ModeAuto, forwarding: "0", want: ModeUserspace},
		{name: "iptables fails", requested: ModeAuto, forwarding: "1", appendErr: errors.New("permission denied"), want: ModeUserspace},
		{name: "iptables required but forwarding off", requested: ModeIPTables, forwarding: "0",
			wantErr: "ipv4 forwarding is off in this network namespace (run pulselb proxy-init first)"},
		{name: "iptables required but failing", requested: ModeIPTables, forwarding: "1", appendErr: errors.New("permission denied"),
			wantErr: "installing ipv4 rules: adding rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ipt := newFakeIPTables()
			if tt.appendErr != nil {
				ipt.fail["Append"] = tt.appendErr
			}
			cfg := userspaceConfig(Port{TCP, port})
			cfg.Mode = tt.requested
			cfg.ProcSys = fakeProcSys(t, tt.forwarding, "0")
			cfg.NewIPTables = func(Family) (IPTables, error) { return ipt, nil }
			if tt.wantErr != "" {
				p, err := New(cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, ctx := ktesting.NewTestContext(t)
				err = p.Start(ctx)
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Start error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			p := startProxy(t, cfg)
			if p.Mode() != tt.want {
				t.Fatalf("mode %q, want %q", p.Mode(), tt.want)
			}
			if tt.want == ModeUserspace {
				// A failed install leaves nothing behind.
				if got := ipt.dump(); len(got) != 0 {
					t.Errorf("rules left by the failed iptables attempt:\n%s", strings.Join(got, "\n"))
				}
				c, err := dialFrom(allowedAddr, netip.AddrPortFrom(proxyAddr, port))
				if err != nil {
					t.Fatalf("userspace relay not listening: %v", err)
				}
				c.Close()
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.1")
	v6 := netip.MustParseAddr("fd00::1")
	tcp80 := []Port{{TCP, 80}}
	target := map[Port]uint16{{TCP, 80}: 30080}
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"no ClusterIP", Config{Ports: tcp80}, ErrConfig},
		{"two IPv4 ClusterIPs", Config{ClusterIPs: []netip.Addr{v4, v4}, Ports: tcp80}, ErrConfig},
		{"no ports", Config{ClusterIPs: []netip.Addr{v4}}, ErrConfig},
		{"bad mode", Config{ClusterIPs: []netip.Addr{v4}, Ports: tcp80, Mode: "ipvs"}, ErrConfig},
		{"negative drain delay", Config{ClusterIPs: []netip.Addr{v4}, Ports: tcp80, DrainDelay: -time.Second}, ErrConfig},
		{"node port of another port", Config{ClusterIPs: []netip.Addr{v4}, Ports: tcp80,
			NodePorts: map[Port]uint16{{UDP, 80}: 30080}, NodeIPs: []netip.Addr{v4}}, ErrNodePorts},
		{"node port zero", Config{ClusterIPs: []netip.Addr{v4}, Ports: tcp80,
			NodePorts: map[Port]uint16{{TCP, 80}: 0}, NodeIPs: []netip.Addr{v4}}, ErrNodePorts},
		{"no node IP", Config{ClusterIPs: []netip.Addr{v4}, Ports: tcp80, NodePorts: target}, ErrNodeIPs},
		{"no node IP of the ClusterIP's family", Config{ClusterIPs: []netip.Addr{v4, v6}, Ports: tcp80,
			NodePorts: target, NodeIPs: []netip.Addr{v4}}, ErrNodeIPs},
		{"two IPv6 node IPs", Config{ClusterIPs: []netip.Addr{v6}, Ports: tcp80,
			NodePorts: target, NodeIPs: []netip.Addr{v6, v6}}, ErrNodeIPs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil)
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrConfig) {
				t.Errorf("New error %v, want %v", err, tt.want)
			}
		})
	}
}

// TestUserspacePortInUse checks that a port another process holds fails the
// start with a message naming it, and leaves no listener behind.
func TestUserspacePortInUse(t *testing.T) {
	busy, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(proxyAddr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).AddrPort().Port()
	free := udpEcho(t) // a UDP port number nobody uses on the proxy address
	p, err := New(userspaceConfig(Port{UDP, free}, Port{TCP, port}), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	err = p.Start(ctx)
	if want := fmt.Sprintf("listening on TCP:%d", port); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start error %v, want one containing %q", err, want)
	}
	// The UDP socket opened before the failure was closed again.
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(proxyAddr, free)))
	if err != nil {
		t.Fatalf("UDP port still held after the failed start: %v", err)
	}
	c.Close()
}
