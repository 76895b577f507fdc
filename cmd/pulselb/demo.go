package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/standalone"
)

const demoUsage = `Usage: pulselb demo [flags]

Starts three loopback hosts (127.0.0.11, 127.0.0.12, 127.0.0.13), each with
an HTTP backend (/healthz), a TCP echo and a UDP echo, and runs standalone
mode against them with its DNS server on a free loopback port. After a few
seconds it takes host b down (closes its listeners), shows the DNS answer
losing 127.0.0.12, brings the host back, shows the address returning, and
prints a summary. Needs no root and no configuration; on Linux every
127.0.0.0/8 address is loopback (elsewhere, add aliases for the three).

With --serve it keeps running afterwards and prints the dashboard URL.

Flags:
`

const (
	demoZone    = "demo.pulselb.test."
	demoService = "web"
	demoVictim  = "b"
)

var demoHostAddrs = []struct {
	name string
	addr netip.Addr
}{
	{"a", netip.MustParseAddr("127.0.0.11")},
	{"b", netip.MustParseAddr("127.0.0.12")},
	{"c", netip.MustParseAddr("127.0.0.13")},
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	interval := fs.Duration("interval", 500*time.Millisecond, "probe interval")
	settle := fs.Duration("settle", 3*time.Second, "how long all hosts run before host b goes down")
	down := fs.Duration("down", 3*time.Second, "how long host b stays down")
	wait := fs.Duration("wait", 15*time.Second, "longest wait for DNS to follow a change")
	serve := fs.Bool("serve", false, "keep running after the demo and print the dashboard URL; stop with Ctrl-C")
	httpListen := fs.String("http-listen", "127.0.0.1:0", "dashboard address")
	verbosity := fs.Int("v", -1, "log verbosity; -1 logs errors only")
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "pulselb demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *interval < standalone.MinInterval:
		fmt.Fprintf(stderr, "pulselb demo: --interval=%s: want at least %s\n", *interval, standalone.MinInterval)
		return 2
	case *settle < 0 || *down < 0 || *wait <= 0:
		fmt.Fprintln(stderr, "pulselb demo: --settle, --down and --wait must not be negative")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Quiet by default: the demo's own output tells the story, and only
	// errors are logged (a logger's Error ignores its verbosity).
	logger := klog.Background().WithName("demo").V(10)
	if *verbosity >= 0 {
		setVerbosity(*verbosity)
		logger = klog.Background().WithName("demo")
	}
	ctx = klog.NewContext(ctx, logger)
	d := &demo{out: newDemoPrinter(stdout), interval: *interval, wait: *wait}
	if err := d.run(ctx, *settle, *down, *httpListen, *serve); err != nil {
		d.out.line("pulselb demo: %v", err)
		return 1
	}
	return 0
}

type demo struct {
	out      *demoPrinter
	interval time.Duration
	wait     time.Duration
	hosts    []*demoHost
	runner   *standalone.Runner
	start    time.Time
}

func (d *demo) run(ctx context.Context, settle, down time.Duration, httpListen string, serve bool) error {
	d.start = time.Now()
	ports, hosts, err := startDemoHosts(ctx)
	if err != nil {
		return err
	}
	d.hosts = hosts
	defer func() {
		for _, h := range hosts {
			h.stop()
		}
	}()
	text := demoConfig(ports, d.interval, httpListen)
	cfg, err := standalone.Parse("demo.yaml", []byte(text))
	if err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	d.runner, err = standalone.New(ctx, cfg, standalone.Options{Title: "pulselb demo", OnTransition: d.transition})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.runner.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	name := demoService + "." + demoZone
	dnsAddr := d.runner.DNSAddr().String()
	d.out.line("pulselb demo: three hosts on loopback, probed every %s with rise %d and fall %d", d.interval, cfg.Rise, cfg.Fall)
	for _, h := range hosts {
		d.out.line("  host %s  %s  http :%d (/healthz), tcp echo :%d, udp echo :%d", h.name, h.addr, ports.http, ports.tcp, ports.udp)
	}
	d.out.line("  DNS server %s, zone %s; try: dig @%s -p %d %s", dnsAddr, demoZone, d.runner.DNSAddr().Addr(), d.runner.DNSAddr().Port(), name)
	d.out.line("  dashboard  http://%s/", d.runner.HTTPAddr())
	d.out.line("")
	d.out.line("Configuration (what pulselb standalone --config would read):")
	d.out.block(text)

	all := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	victim := hosts[1]
	// At start every target is Unknown and the service fails open
	// (all-down: publish-all); wait for the probes to conclude.
	if err := d.waitAllUp(ctx); err != nil {
		return err
	}
	before, err := d.waitDNS(ctx, name, func(a []string) bool { return slices.Equal(a, all) })
	if err != nil {
		return fmt.Errorf("waiting for all three hosts in DNS: %w", err)
	}
	d.out.line("%s  DNS %s A = %s", d.stamp(), name, strings.Join(before, " "))
	d.out.table(d.runner.State())
	if err := sleepCtx(ctx, settle); err != nil {
		return err
	}

	d.out.line("%s  taking host %s (%s) down: closing its HTTP, TCP and UDP listeners", d.stamp(), victim.name, victim.addr)
	downAt := time.Now()
	victim.stop()
	during, err := d.waitDNS(ctx, name, func(a []string) bool { return !slices.Contains(a, victim.addr.String()) && len(a) > 0 })
	if err != nil {
		return fmt.Errorf("waiting for host %s to leave DNS: %w", victim.name, err)
	}
	detection := time.Since(downAt)
	d.out.line("%s  DNS %s A = %s   (%s left after %s)", d.stamp(), name, strings.Join(during, " "), victim.addr, round(detection))
	d.out.table(d.runner.State())
	if err := sleepCtx(ctx, down); err != nil {
		return err
	}

	d.out.line("%s  bringing host %s back: reopening its listeners", d.stamp(), victim.name)
	upAt := time.Now()
	if err := victim.listen(ctx, ports); err != nil {
		return fmt.Errorf("reopening host %s: %w", victim.name, err)
	}
	after, err := d.waitDNS(ctx, name, func(a []string) bool { return slices.Equal(a, all) })
	if err != nil {
		return fmt.Errorf("waiting for host %s to return to DNS: %w", victim.name, err)
	}
	recovery := time.Since(upAt)
	d.out.line("%s  DNS %s A = %s   (%s back after %s)", d.stamp(), name, strings.Join(after, " "), victim.addr, round(recovery))
	d.out.table(d.runner.State())

	d.out.line("")
	d.out.line("Summary")
	d.out.line("  failover: host %s left the DNS answer %s after its listeners closed (interval %s, fall %d)", victim.name, round(detection), d.interval, cfg.Fall)
	d.out.line("  recovery: host %s returned %s after its listeners reopened (rise %d)", victim.name, round(recovery), cfg.Rise)
	d.out.line("  DNS answers for %s A:", name)
	d.out.line("    before    %s", strings.Join(before, " "))
	d.out.line("    host down %s", strings.Join(during, " "))
	d.out.line("    recovered %s", strings.Join(after, " "))
	d.out.line("  total time %s", round(time.Since(d.start)))
	if !serve {
		return nil
	}
	d.out.line("")
	d.out.line("Serving: dashboard http://%s/ , DNS %s; press Ctrl-C to stop.", d.runner.HTTPAddr(), dnsAddr)
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		done <- err
		return err
	}
}

func (d *demo) stamp() string { return fmt.Sprintf("%6.2fs", time.Since(d.start).Seconds()) }

func (d *demo) transition(t dashboard.Transition) {
	proto := ""
	for _, svc := range d.runner.State().Services {
		for _, tg := range svc.Targets {
			if svc.Name == t.Service && tg.Node == t.Node && tg.Port == t.Port {
				proto = "/" + tg.Protocol
			}
		}
	}
	d.out.change(fmt.Sprintf("%s  %s %s %s:%d%s  %s -> %s  (%s)", d.stamp(), t.Service, t.Node, t.Address, t.Port, proto, t.From, t.To, t.Reason),
		d.runner.State)
}

// waitAllUp waits until the verdict on every target is Up.
func (d *demo) waitAllUp(ctx context.Context) error {
	deadline := time.Now().Add(d.wait)
	for {
		st := d.runner.State()
		up, n := 0, 0
		for _, svc := range st.Services {
			for _, t := range svc.Targets {
				n++
				if t.State == "Up" {
					up++
				}
			}
		}
		if n > 0 && up == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d targets up after %s", up, n, d.wait)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitDNS queries the demo's DNS server for name's A records until ok
// accepts the answer, and returns it sorted.
func (d *demo) waitDNS(ctx context.Context, name string, ok func([]string) bool) ([]string, error) {
	deadline := time.Now().Add(d.wait)
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	var last []string
	var lastErr error
	for time.Now().Before(deadline) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		resp, _, err := c.ExchangeContext(ctx, m, d.runner.DNSAddr().String())
		lastErr = err
		if err == nil {
			last = last[:0]
			for _, rr := range resp.Answer {
				if a, isA := rr.(*dns.A); isA {
					last = append(last, a.A.String())
				}
			}
			slices.Sort(last)
			if resp.Rcode == dns.RcodeSuccess && ok(last) {
				return last, nil
			}
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("no answer within %s: %w", d.wait, lastErr)
	}
	return nil, fmt.Errorf("still %v after %s", last, d.wait)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func demoConfig(p demoPorts, interval time.Duration, httpListen string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance: demo\nzone: %s\ndns: {listen: \"127.0.0.1:0\", ttl: 5}\nhttp: {listen: %q}\ninterval: %s\n", demoZone, httpListen, interval)
	fmt.Fprintf(&b, "services:\n  - name: %s\n    hosts:\n", demoService)
	for _, h := range demoHostAddrs {
		fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", h.name, h.addr)
	}
	fmt.Fprintf(&b, "    ports:\n")
	fmt.Fprintf(&b, "      - {name: http, port: %d, protocol: TCP, probe: \"http path=/healthz\"}\n", p.http)
	fmt.Fprintf(&b, "      - {name: echo, port: %d, protocol: TCP, probe: 'tcp send=ping expect=^ping'}\n", p.tcp)
	fmt.Fprintf(&b, "      - {name: echo, port: %d, protocol: UDP, probe: 'udp send=ping expect=^ping'}\n", p.udp)
	return b.String()
}

// demoPorts are the ports every demo host listens on.
type demoPorts struct{ http, tcp, udp uint16 }

// demoHost is one loopback host with its three backends.
type demoHost struct {
	name string
	addr netip.Addr

	mu      sync.Mutex
	httpSrv *http.Server
	tcp     net.Listener
	udp     net.PacketConn
}

// startDemoHosts picks ports free on all three addresses and starts the
// hosts' backends on them.
func startDemoHosts(ctx context.Context) (demoPorts, []*demoHost, error) {
	var lastErr error
	for range 20 {
		hosts := make([]*demoHost, len(demoHostAddrs))
		for i, h := range demoHostAddrs {
			hosts[i] = &demoHost{name: h.name, addr: h.addr}
		}
		ports, err := pickDemoPorts()
		if err == nil {
			for _, h := range hosts {
				if err = h.listen(ctx, ports); err != nil {
					break
				}
			}
		}
		if err == nil {
			return ports, hosts, nil
		}
		for _, h := range hosts {
			h.stop()
		}
		lastErr = err
		if errors.Is(err, errNoLoopbackAlias) {
			break
		}
	}
	return demoPorts{}, nil, lastErr
}

var errNoLoopbackAlias = errors.New("cannot bind the demo's loopback addresses; on Linux all of 127.0.0.0/8 is loopback, elsewhere add aliases for 127.0.0.11 to 127.0.0.13")

// pickDemoPorts asks the kernel for free ports on the first host address.
func pickDemoPorts() (demoPorts, error) {
	first := demoHostAddrs[0].addr.String()
	var p demoPorts
	for _, dst := range []*uint16{&p.http, &p.tcp} {
		ln, err := net.Listen("tcp", net.JoinHostPort(first, "0"))
		if err != nil {
			return p, fmt.Errorf("%w: %w", errNoLoopbackAlias, err)
		}
		*dst = uint16(ln.Addr().(*net.TCPAddr).Port)
		defer ln.Close()
	}
	pc, err := net.ListenPacket("udp", net.JoinHostPort(first, "0"))
	if err != nil {
		return p, fmt.Errorf("%w: %w", errNoLoopbackAlias, err)
	}
	p.udp = uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	pc.Close()
	return p, nil
}

// listen starts the host's HTTP backend, TCP echo and UDP echo.
func (h *demoHost) listen(ctx context.Context, p demoPorts) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := func(port uint16) string { return netip.AddrPortFrom(h.addr, port).String() }
	httpLn, err := net.Listen("tcp", at(p.http))
	if err != nil {
		return fmt.Errorf("host %s: %w", h.name, err)
	}
	tcp, err := net.Listen("tcp", at(p.tcp))
	if err != nil {
		httpLn.Close()
		return fmt.Errorf("host %s: %w", h.name, err)
	}
	udp, err := net.ListenPacket("udp", at(p.udp))
	if err != nil {
		httpLn.Close()
		tcp.Close()
		return fmt.Errorf("host %s: %w", h.name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "ok from host %s\n", h.name) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from host %s (%s)\n", h.name, h.addr)
	})
	h.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		BaseContext: func(net.Listener) context.Context { return ctx }}
	h.tcp, h.udp = tcp, udp
	srv := h.httpSrv
	go func() { _ = srv.Serve(httpLn) }()
	go acceptEcho(tcp)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = udp.WriteTo(buf[:n], from)
		}
	}()
	return nil
}

// stop closes the host's listeners, as a host that went away.
func (h *demoHost) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.httpSrv != nil {
		_ = h.httpSrv.Close()
		h.httpSrv = nil
	}
	if h.tcp != nil {
		h.tcp.Close()
		h.tcp = nil
	}
	if h.udp != nil {
		h.udp.Close()
		h.udp = nil
	}
}

// demoPrinter writes the demo's output. On a terminal each verdict change
// redraws the target table in place; otherwise it prints one line per
// change, which reads well in a log.
type demoPrinter struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
	// drawn is how many lines the live table at the bottom has; 0 when
	// something was printed after it.
	drawn int
}

func newDemoPrinter(w io.Writer) *demoPrinter {
	p := &demoPrinter{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *demoPrinter) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
	p.drawn = 0
}

func (p *demoPrinter) block(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(p.w, "    %s\n", l)
	}
	p.drawn = 0
}

// change reports one verdict change.
func (p *demoPrinter) change(text string, state func() dashboard.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, text)
		return
	}
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\x1b[J", p.drawn)
	}
	lines := append([]string{text}, tableLines(state())...)
	for _, l := range lines {
		fmt.Fprintln(p.w, l)
	}
	p.drawn = len(lines)
}

// table prints the targets at a step of the demo. On a terminal the live
// table already shows them.
func (p *demoPrinter) table(s dashboard.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		return
	}
	for _, l := range tableLines(s) {
		fmt.Fprintln(p.w, l)
	}
	p.drawn = 0
}

// tableLines renders the targets of s: one row per host and port with the
// verdict, the outcome and latency of each vantage, and what DNS publishes.
func tableLines(s dashboard.State) []string {
	var out []string
	for _, svc := range s.Services {
		out = append(out, fmt.Sprintf("    %-6s %-22s %-8s %-8s %-8s %s", "HOST", "TARGET", "VERDICT", "OUTCOME", "LATENCY", "PROBE"))
		for _, t := range svc.Targets {
			outcome, latency := "-", "-"
			if len(t.Vantages) > 0 {
				v := t.Vantages[0]
				if v.Outcome != "" {
					outcome = v.Outcome
				}
				if v.LatencySeconds > 0 {
					latency = (time.Duration(v.LatencySeconds * float64(time.Second))).Round(10 * time.Microsecond).String()
				}
			}
			target := fmt.Sprintf("%s:%d/%s", t.Address, t.Port, t.Protocol)
			out = append(out, fmt.Sprintf("    %-6s %-22s %-8s %-8s %-8s %s", t.Node, target, t.State, outcome, latency, t.Probe))
		}
		out = append(out, fmt.Sprintf("    published %s.%s: %s", svc.Name, strings.TrimSuffix(demoZone, "."), strings.Join(svc.Published, " ")))
	}
	return out
}
