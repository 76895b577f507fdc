package dnsexport

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// namedPath finds BIND's named, or says why the test cannot run. CI
// installs bind9, so there (CI=true) a missing named fails the test: the
// secondary test must never silently stop running.
func namedPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/named", "/usr/bin/named"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("named"); err == nil {
		return p
	}
	const reason = "BIND 9 named not installed (apt-get install bind9)"
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but cannot run the BIND secondary test: %s", reason)
	}
	t.Skipf("skipping the BIND secondary test: %s", reason)
	return ""
}

// freePort returns a loopback port that was free for both UDP and TCP.
func freePort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return uint16(port)
		}
	}
	t.Fatal("no free loopback port for UDP and TCP")
	return 0
}

// lockedBuffer collects a child's output for the failure message.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBIND runs named as a secondary of testOrigin, transferring it from
// primary with TSIG key "xfr", until the test ends.
func startBIND(t *testing.T, primary netip.AddrPort) (netip.AddrPort, *lockedBuffer) {
	t.Helper()
	named := namedPath(t)
	dir := t.TempDir()
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
	conf := fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	managed-keys-directory "%[1]s";
	listen-on port %[2]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
	allow-query { 127.0.0.1; };
};
controls { };
key "xfr" { algorithm hmac-sha256; secret "%[3]s"; };
zone "lb.example.test" {
	type secondary;
	file "%[1]s/lb.example.test.db";
	primaries { %[4]s port %[5]d key "xfr"; };
	allow-notify { 127.0.0.1; };
};
`, dir, addr.Port(), testSecret, primary.Addr(), primary.Port())
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-g", "-n", "1", "-c", confPath}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	cmd := exec.Command(named, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting named: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("named output:\n%s", out)
		}
	})
	return addr, out
}

// aSet asks addr for name's A records; nil on any failure.
func aSet(addr netip.AddrPort, name string) []string {
	c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
	r, _, err := c.Exchange(query(name, dns.TypeA), addr.String())
	if err != nil || r.Rcode != dns.RcodeSuccess {
		return nil
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// waitForA polls addr until name has the A set want, or the deadline.
func waitForA(t *testing.T, addr netip.AddrPort, name string, want []string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	var got []string
	for time.Now().Before(deadline) {
		if got = aSet(addr, name); slices.Equal(got, want) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("%s A at %s = %v after %s, want %v", name, addr, got, within, want)
	return 0
}

func TestBINDSecondary(t *testing.T) {
	// The primary needs the secondary's port before it starts, and
	// named needs the primary's: reserve the secondary's port first.
	namedPath(t)
	metrics := NewMetrics()
	cfg := transferConfig()
	cfg.Metrics = metrics
	cfg.NotifyTimeout = 300 * time.Millisecond
	cfg.Zone = testZoneConfig
	cfg.Listen = "127.0.0.1:0"
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	bind, _ := startBIND(t, srv.Addr())
	srv.cfg.Secondaries = []Secondary{{Addr: bind, Key: "xfr"}}
	if _, err := srv.Update(testServices()); err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)

	const name = "web.default.lb.example.test."
	took := waitForA(t, bind, name, []string{"192.0.2.10", "192.0.2.11"}, 20*time.Second)
	t.Logf("BIND loaded the zone %s after start", took.Round(time.Millisecond))

	for i, ips := range [][]string{{"192.0.2.12"}, {"192.0.2.10", "192.0.2.13"}} {
		services := testServices()
		services[0].IPs = addrs(ips...)
		if _, err := srv.Update(services); err != nil {
			t.Fatal(err)
		}
		took := waitForA(t, bind, name, ips, 2*time.Second)
		t.Logf("change %d visible at BIND %s after Update", i+1, took.Round(time.Millisecond))
	}
	// BIND serves exactly our zone: same SOA serial.
	c := &dns.Client{Timeout: time.Second}
	r, _, err := c.Exchange(query(testOrigin, dns.TypeSOA), bind.String())
	if err != nil || len(r.Answer) != 1 || r.Answer[0].(*dns.SOA).Serial != srv.Zone().Serial() {
		t.Errorf("BIND SOA %v (%v), want serial %d", r, err, srv.Zone().Serial())
	}
	if got := testutil.ToFloat64(metrics.Notifies.WithLabelValues("ok")); got < 2 {
		t.Errorf("notifies_total{ok} = %v, want >= 2", got)
	}
}
