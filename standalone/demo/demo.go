// Package demo owns `pulselb demo`: standalone mode run against three
// loopback hosts with fake backends, one host taken down and brought back
// while the DNS answer is watched, and the table the story is told in.
package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/standalone"
)

const (
	zone    = "demo.pulselb.test."
	service = "web"
)

// Options are the demo's timings and where its dashboard listens.
type Options struct {
	// Interval is the probe interval; at least probespec.MinInterval.
	Interval time.Duration
	// Settle is how long all hosts run before host b goes down.
	Settle time.Duration
	// Down is how long host b stays down.
	Down time.Duration
	// Wait is the longest wait for DNS to follow a change.
	Wait time.Duration
	// HTTPListen is the dashboard's address.
	HTTPListen string
	// Serve keeps the demo running after its summary until ctx is done.
	Serve bool
}

// Run starts the three loopback hosts and a standalone runner probing
// them, takes host b down and back up, and writes what happens and a
// summary to stdout. It logs through ctx's logger and returns when the
// summary is written (with Options.Serve, when ctx is done).
func Run(ctx context.Context, opts Options, stdout io.Writer) error {
	d := &demo{out: newPrinter(stdout), interval: opts.Interval, wait: opts.Wait}
	return d.run(ctx, opts.Settle, opts.Down, opts.HTTPListen, opts.Serve)
}

type demo struct {
	out      *printer
	interval time.Duration
	wait     time.Duration
	hosts    []*host
	runner   *standalone.Runner
	start    time.Time
}

func (d *demo) run(ctx context.Context, settle, down time.Duration, httpListen string, serve bool) error {
	d.start = time.Now()
	ports, hosts, err := startHosts(ctx)
	if err != nil {
		return err
	}
	d.hosts = hosts
	defer func() {
		for _, h := range hosts {
			h.stop()
		}
	}()
	text := config(ports, d.interval, httpListen)
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

	name := service + "." + zone
	dnsAddr := d.runner.DNSAddr().String()
	d.out.line("pulselb demo: three hosts on loopback, probed every %s with rise %d and fall %d", d.interval, cfg.Rise, cfg.Fall)
	for _, h := range hosts {
		d.out.line("  host %s  %s  http :%d (/healthz), tcp echo :%d, udp echo :%d", h.name, h.addr, ports.http, ports.tcp, ports.udp)
	}
	d.out.line("  DNS server %s, zone %s; try: dig @%s -p %d %s", dnsAddr, zone, d.runner.DNSAddr().Addr(), d.runner.DNSAddr().Port(), name)
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

// config returns the standalone configuration of the demo, as YAML.
func config(p ports, interval time.Duration, httpListen string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance: demo\nzone: %s\ndns: {listen: \"127.0.0.1:0\", ttl: 5}\nhttp: {listen: %q}\ninterval: %s\n", zone, httpListen, interval)
	fmt.Fprintf(&b, "services:\n  - name: %s\n    hosts:\n", service)
	for _, h := range hostAddrs {
		fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", h.name, h.addr)
	}
	fmt.Fprintf(&b, "    ports:\n")
	fmt.Fprintf(&b, "      - {name: http, port: %d, protocol: TCP, probe: \"http path=/healthz\"}\n", p.http)
	fmt.Fprintf(&b, "      - {name: echo, port: %d, protocol: TCP, probe: 'tcp send=ping expect=^ping'}\n", p.tcp)
	fmt.Fprintf(&b, "      - {name: echo, port: %d, protocol: UDP, probe: 'udp send=ping expect=^ping'}\n", p.udp)
	return b.String()
}
