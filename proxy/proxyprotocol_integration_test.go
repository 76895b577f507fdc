package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The PROXY protocol ports of TestProxyProtocolBackends: HAProxy with
// accept-proxy and nginx with proxy_protocol, each reached once with a
// version 1 and once with a version 2 header. Each answers an HTTP GET with
// the client address it learnt from the header, and logs it.
const (
	haproxyV1Port = 8181
	haproxyV2Port = 8182
	nginxV1Port   = 8183
	nginxV2Port   = 8184
	// haproxyTrustPort is HAProxy as docs/operations.md configures it:
	// the header expected only from trusted sources (expect-proxy).
	haproxyTrustPort = 8185
)

// requireBinary skips without bin, unless CI=true, where it must be there.
func requireBinary(t *testing.T, bin, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs %s (Debian package %s), and CI=true", bin, pkg)
	}
	t.Skipf("needs %s (Debian package %s)", bin, pkg)
	return ""
}

// startBackendServer starts a server in the backend namespace and returns
// what it writes to stdout and stderr; it is killed when the test ends.
func (tp *topology) startBackendServer(t *testing.T, args ...string) *syncWriter {
	t.Helper()
	out := &syncWriter{}
	cmd := exec.Command("ip", append([]string{"netns", "exec", tp.backend}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", args[0], out.buf.String())
		}
	})
	return out
}

// startHAProxy runs HAProxy with accept-proxy on haproxyV1Port and
// haproxyV2Port, logging "client=ADDR:PORT" to stdout for each request.
func (tp *topology) startHAProxy(t *testing.T) *syncWriter {
	t.Helper()
	bin := requireBinary(t, "haproxy", "haproxy")
	cfg := fmt.Sprintf(`global
	log stdout format raw local0
defaults
	mode http
	log global
	timeout connect 2s
	timeout client 5s
	timeout server 5s
frontend pp
	bind :::%d v4v6 accept-proxy
	bind :::%d v4v6 accept-proxy
	log-format "client=%%ci:%%cp"
	http-request return status 200 content-type text/plain lf-string "%%ci"
frontend trusted
	bind :::%d v4v6
	tcp-request connection expect-proxy layer4 if { src 198.18.0.0/15 fd00:198::/32 }
	log-format "client=%%ci:%%cp"
	http-request return status 200 content-type text/plain lf-string "%%ci"
`, haproxyV1Port, haproxyV2Port, haproxyTrustPort)
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out := tp.startBackendServer(t, bin, "-db", "-f", path)
	tp.waitBackendListening(t, haproxyV1Port, haproxyV2Port, haproxyTrustPort)
	return out
}

// startNginx runs nginx with proxy_protocol on nginxV1Port and nginxV2Port,
// logging "client=ADDR:PORT" to its access log, whose path it returns.
func (tp *topology) startNginx(t *testing.T) string {
	t.Helper()
	bin := requireBinary(t, "nginx", "nginx")
	dir := t.TempDir()
	access := filepath.Join(dir, "access.log")
	cfg := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events {}
http {
	client_body_temp_path %[1]s;
	proxy_temp_path %[1]s;
	fastcgi_temp_path %[1]s;
	uwsgi_temp_path %[1]s;
	scgi_temp_path %[1]s;
	log_format pp 'client=$proxy_protocol_addr:$proxy_protocol_port';
	access_log %[2]s pp;
	server {
		listen %[3]d proxy_protocol;
		listen [::]:%[3]d proxy_protocol;
		listen %[4]d proxy_protocol;
		listen [::]:%[4]d proxy_protocol;
		default_type text/plain;
		return 200 "$proxy_protocol_addr";
	}
}
`, dir, access, nginxV1Port, nginxV2Port)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tp.startBackendServer(t, bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path)
	tp.waitBackendListening(t, nginxV1Port, nginxV2Port)
	return access
}

// waitBackendListening waits until every port accepts on the IPv4 and the
// IPv6 ClusterIP.
func (tp *topology) waitBackendListening(t *testing.T, ports ...int) {
	t.Helper()
	for _, port := range ports {
		for _, cip := range []netip.Addr{clusterIP4, clusterIP6} {
			addr := netip.AddrPortFrom(cip, uint16(port))
			waitFor(t, 10*time.Second, "a server on "+addr.String(), func() bool {
				return inNetns(tp.backend, func() error {
					c, err := net.DialTimeout("tcp", addr.String(), time.Second)
					if err == nil {
						c.Close()
					}
					return err
				}) == nil
			})
		}
	}
}

// dnatPorts adds the hostPort DNAT of extra TCP ports in the node namespace.
func (tp *topology) dnatPorts(t *testing.T, ports ...int) {
	t.Helper()
	for _, port := range ports {
		run(t, "ip", "netns", "exec", tp.node, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", nodeIP4.String(),
			"-p", "tcp", "--dport", fmt.Sprint(port), "-j", "DNAT", "--to-destination", fmt.Sprintf("198.18.101.2:%d", port))
		run(t, "ip", "netns", "exec", tp.node, "ip6tables", "-t", "nat", "-A", "PREROUTING", "-d", nodeIP6.String(),
			"-p", "tcp", "--dport", fmt.Sprint(port), "-j", "DNAT", "--to-destination", fmt.Sprintf("[fd00:198:18:101::2]:%d", port))
	}
}

// httpGet sends a GET from src in the client namespace to node:port and
// returns the body.
func (tp *topology) httpGet(src, node netip.Addr, port int) (string, error) {
	c, err := tp.dialTCP(src, netip.AddrPortFrom(node, uint16(port)), 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: test\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	head, body, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok || !bytes.HasPrefix(head, []byte("HTTP/1.")) || !bytes.Contains(head, []byte(" 200 ")) {
		return "", fmt.Errorf("not a 200 answer: %q", b)
	}
	return string(body), nil
}

// TestProxyProtocolBackends relays clients in their own namespace, over
// IPv4 and IPv6, to HAProxy (accept-proxy) and nginx (proxy_protocol) with
// PROXY protocol version 1 and 2 headers: each backend answers and logs the
// client's own address, not the proxy pod's. In iptables mode the same
// proxy keeps forwarding its other ports with rules (the echo port); in
// userspace mode it relays every port. Probed through the proxy, as the
// probers do, the backends are Up with no header of the probe's own (the
// relay writes one) and Down with one (a second header). Probed directly, a
// backend that requires the header is Up with `pulselb check`'s option and
// Down without it.
func TestProxyProtocolBackends(t *testing.T) {
	requireRoot(t)
	bin := pulselbBinary(t)
	tp := newTopology(t)
	haLog := tp.startHAProxy(t)
	nginxLog := tp.startNginx(t)
	ppPorts := []int{haproxyV1Port, haproxyV2Port, nginxV1Port, nginxV2Port, haproxyTrustPort}
	tp.dnatPorts(t, ppPorts...)
	run(t, "ip", "netns", "exec", tp.pod, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")

	ports := fmt.Sprintf("--ports=%s,TCP:%d,TCP:%d,TCP:%d,TCP:%d,TCP:%d", servicePorts, haproxyV1Port, haproxyV2Port, nginxV1Port, nginxV2Port, haproxyTrustPort)
	headers := fmt.Sprintf("--proxy-protocol=TCP:%d=v1,TCP:%d=v2,TCP:%d=v1,TCP:%d=v2,TCP:%d=v2", haproxyV1Port, haproxyV2Port, nginxV1Port, nginxV2Port, haproxyTrustPort)
	// Each mode reads only what the servers logged since it started.
	nginxSince := func(offset int) string {
		b, _ := os.ReadFile(nginxLog)
		return string(b[min(offset, len(b)):])
	}
	for _, mode := range []Mode{ModeIPTables, ModeUserspace} {
		t.Run(string(mode), func(t *testing.T) {
			haFrom, nginxFrom := len(haLog.String()), len(nginxSince(0))
			pp := tp.startProxy(t, bin, mode, mode, ports, headers)
			if mode == ModeIPTables {
				rules := tp.rules(t)
				for _, port := range ppPorts {
					if strings.Contains(rules, fmt.Sprintf("--dport %d ", port)) {
						t.Errorf("a rule forwards PROXY protocol port %d, which must be relayed:\n%s", port, rules)
					}
				}
				if !strings.Contains(rules, fmt.Sprintf("--dport %d ", echoPort)) {
					t.Errorf("no rule forwards the echo port %d:\n%s", echoPort, rules)
				}
			}
			for _, c := range []struct{ client, node netip.Addr }{{clientOK4, nodeIP4}, {clientOK6, nodeIP6}} {
				if got, err := tp.tcpEcho(c.client, c.node, "mixed", 5*time.Second); err != nil || got != "mixed" {
					t.Errorf("echo port from %s = %q, %v", c.client, got, err)
				}
				for _, port := range ppPorts {
					got, err := tp.httpGet(c.client, c.node, port)
					if err != nil || got != c.client.String() {
						t.Errorf("port %d from %s: the backend saw %q (%v), want the client's address", port, c.client, got, err)
					}
				}
				// The logs show the client's address and a port of its.
				want := "client=" + c.client.String() + ":"
				// A server writes its log line as the request ends, which
				// may be a moment after the client read the answer.
				settle := time.Now().Add(2 * time.Second)
				for time.Now().Before(settle) && (strings.Count(haLog.String()[haFrom:], want) < 3 || strings.Count(nginxSince(nginxFrom), want) < 2) {
					time.Sleep(20 * time.Millisecond)
				}
				if got := strings.Count(haLog.String()[haFrom:], want); got != 3 {
					t.Errorf("HAProxy logged %q %d times, want 3 (v1, v2, and v2 with expect-proxy):\n%s", want, got, haLog.String()[haFrom:])
				}
				if got := strings.Count(nginxSince(nginxFrom), want); got != 2 {
					t.Errorf("nginx logged %q %d times, want 2 (v1 and v2):\n%s", want, got, nginxSince(nginxFrom))
				}
			}
			// A probe through the proxy, as pulselb's probers probe,
			// gets the relay's header like any client: it needs none of
			// its own, and one of its own is a second header, which the
			// backend refuses.
			for _, port := range []int{haproxyV2Port, nginxV1Port} {
				target := netip.AddrPortFrom(nodeIP4, uint16(port)).String()
				for _, tt := range []struct {
					spec string
					want int
				}{{"http", 0}, {"http proxy-protocol=v2", 1}} {
					cmd := exec.Command("ip", "netns", "exec", tp.client, bin, "check", "--source="+clientOK4.String(), "--timeout=2s", tt.spec, target)
					out, _ := cmd.CombinedOutput()
					if got := cmd.ProcessState.ExitCode(); got != tt.want {
						t.Errorf("through the proxy, pulselb check %q %s: exit %d, want %d\n%s", tt.spec, target, got, tt.want, out)
					}
				}
			}
			pp.stop(t)
		})
	}

	// A relayed port drains like the rules do: during the delay a new
	// client is still served with its header, after it one is refused, and
	// the proxy exits cleanly at the end.
	t.Run("drain in iptables mode", func(t *testing.T) {
		pp := tp.startProxy(t, bin, ModeIPTables, ModeIPTables, ports, headers, "--drain-delay=2s", "--drain-timeout=4s")
		pp.signal(t, syscall.SIGTERM)
		waitFor(t, 5*time.Second, "the delay phase", func() bool { return tp.healthy("phase=delay") })
		if got, err := tp.httpGet(clientOK4, nodeIP4, haproxyV2Port); err != nil || got != clientOK4.String() {
			t.Errorf("during the drain delay the backend saw %q (%v), want the client's address", got, err)
		}
		waitFor(t, 5*time.Second, "the drain phase", func() bool { return tp.healthy("phase=drain") })
		// The phase is set a moment before the listeners close.
		waitFor(t, time.Second, "the relayed port to refuse new clients", func() bool {
			_, err := tp.httpGet(clientOK4, nodeIP4, haproxyV2Port)
			return err != nil
		})
		if !tp.healthy("phase=drain") {
			t.Errorf("the proxy left the drain phase before the relayed port refused: the test proves nothing")
		}
		pp.wait(t, 10*time.Second)
	})

	t.Run("probes", func(t *testing.T) {
		for _, port := range []int{haproxyV1Port, nginxV2Port, haproxyTrustPort} {
			for _, cip := range []netip.Addr{clusterIP4, clusterIP6} {
				target := netip.AddrPortFrom(cip, uint16(port)).String()
				for _, tt := range []struct {
					spec string
					want int
				}{
					{"http proxy-protocol=v2", 0},
					{"http proxy-protocol=v1", 0},
					{"http", 1},
				} {
					cmd := exec.Command("ip", "netns", "exec", tp.client, bin, "check", "--timeout=2s", tt.spec, target)
					out, _ := cmd.CombinedOutput()
					if got := cmd.ProcessState.ExitCode(); got != tt.want {
						t.Errorf("pulselb check %q %s: exit %d, want %d\n%s", tt.spec, target, got, tt.want, out)
					}
				}
			}
		}
	})
}

// String returns what was written so far.
func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
