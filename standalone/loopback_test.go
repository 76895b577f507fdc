package standalone

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/dashboard"
)

// hosts is a TCP service on one port of several loopback addresses (all of
// 127.0.0.0/8 is loopback on Linux), each of which can be stopped and
// started again, as a host going away and coming back.
type hosts struct {
	t    *testing.T
	port uint16
	mu   sync.Mutex
	lns  map[string]net.Listener
}

func startHosts(t *testing.T, addrs ...string) *hosts {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		h := &hosts{t: t, port: uint16(ln.Addr().(*net.TCPAddr).Port), lns: map[string]net.Listener{addrs[0]: ln}}
		go acceptClose(ln)
		ok := true
		for _, a := range addrs[1:] {
			if err := h.start(a); err != nil {
				ok = false
				break
			}
		}
		if ok {
			t.Cleanup(func() {
				for _, a := range addrs {
					h.stop(a)
				}
			})
			return h
		}
		for _, a := range addrs {
			h.stop(a)
		}
	}
	t.Fatal("no port free on all of", addrs)
	return nil
}

func acceptClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func (h *hosts) start(addr string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(h.port)))
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.lns[addr] = ln
	h.mu.Unlock()
	go acceptClose(ln)
	return nil
}

func (h *hosts) stop(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ln := h.lns[addr]; ln != nil {
		ln.Close()
		delete(h.lns, addr)
	}
}

// instance describes one standalone instance's configuration file.
type instance struct {
	name     string
	interval time.Duration
	// hosts are name=address pairs; override maps a host name to the
	// probe-address this instance uses for it.
	hosts    []string
	override map[string]string
	peers    []Peer
	extra    string
	// maxConns is http.max-connections; 0 leaves it out.
	maxConns int
	// httpExtra is more of the http mapping, such as ", dashboard-rows: 10".
	httpExtra string
}

func (in instance) yaml(port uint16) string {
	var b strings.Builder
	iv := in.interval
	if iv == 0 {
		iv = 200 * time.Millisecond
	}
	fmt.Fprintf(&b, "instance: %s\nzone: lb.example.test.\ndns: {listen: \"127.0.0.1:0\", ttl: 5}\n", in.name)
	if in.maxConns > 0 {
		fmt.Fprintf(&b, "http: {listen: \"127.0.0.1:0\", max-connections: %d%s}\n", in.maxConns, in.httpExtra)
	} else {
		fmt.Fprintf(&b, "http: {listen: \"127.0.0.1:0\"%s}\n", in.httpExtra)
	}
	fmt.Fprintf(&b, "interval: %s\ntoken-file: token\n%s", iv, in.extra)
	if len(in.peers) > 0 {
		b.WriteString("peers:\n")
		for _, p := range in.peers {
			fmt.Fprintf(&b, "  - {name: %s, url: %q}\n", p.Name, p.URL)
		}
	}
	b.WriteString("services:\n  - name: web\n    hosts:\n")
	for _, h := range in.hosts {
		name, addr, _ := strings.Cut(h, "=")
		fmt.Fprintf(&b, "      - {name: %s, address: %s", name, addr)
		if o := in.override[name]; o != "" {
			fmt.Fprintf(&b, ", probe-address: %s", o)
		}
		b.WriteString("}\n")
	}
	fmt.Fprintf(&b, "    ports:\n      - {port: %d, protocol: TCP, probe: tcp}\n", port)
	return b.String()
}

const testToken = "0123456789abcdef-test-token"

// load writes in's configuration (and the shared token) to dir and loads it.
func (in instance) load(t *testing.T, dir string, port uint16) *Config {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, in.name+".yaml")
	if err := os.WriteFile(file, []byte(in.yaml(port)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is a Runner running until the test ends or stop is called.
type running struct {
	*Runner
	stop func()
}

func start(t *testing.T, cfg *Config) *running {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return startCtx(t, ctx, cfg)
}

// startCtx is start with the logger of ctx.
func startCtx(t *testing.T, ctx context.Context, cfg *Config) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	r, err := New(ctx, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &running{Runner: r, stop: stop}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// answer is the sorted A records of web.lb.example.test. from r's DNS
// server; nil while it answers nothing (e.g. SERVFAIL before the first
// zone).
func answer(t *testing.T, r *Runner) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("web.lb.example.test.", dns.TypeA)
	resp, err := dns.Exchange(m, r.DNSAddr().String())
	if err != nil || resp.Rcode != dns.RcodeSuccess {
		return nil
	}
	out := []string{}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// query returns the answer records of name and qtype from r's DNS server.
func query(t *testing.T, r *Runner, name string, qtype uint16) []dns.RR {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	resp, err := dns.Exchange(m, r.DNSAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Rcode != dns.RcodeSuccess || !resp.Authoritative {
		t.Fatalf("%s %s: rcode %s, authoritative %v", name, dns.TypeToString[qtype], dns.RcodeToString[resp.Rcode], resp.Authoritative)
	}
	return resp.Answer
}

// target returns the dashboard's view of host's target.
func target(r *Runner, host string) dashboard.Target {
	for _, svc := range r.State().Services {
		for _, t := range svc.Targets {
			if t.Node == host {
				return t
			}
		}
	}
	return dashboard.Target{}
}

func verdict(r *Runner, host string) string { return target(r, host).State }

func allUp(r *Runner, hosts ...string) func() bool {
	return func() bool {
		for _, h := range hosts {
			if verdict(r, h) != "Up" {
				return false
			}
		}
		return true
	}
}
