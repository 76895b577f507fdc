package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/loopback"
)

const checkUsage = `Usage: pulselb check [flags] SPEC ADDR:PORT

Probes ADDR:PORT with the probe SPEC (for example "http path=/healthz") and
prints the typed outcome, per-phase timings, the TLS certificate summary and
the MySQL server version. ADDR may be an IP address or a host name.
With --serve, ADDR:PORT is omitted: pulselb starts a throwaway loopback
server for SPEC's protocol and probes that; for tls and https the probe
trusts the server's self-signed certificate, so verification succeeds.
A backend that requires a PROXY protocol header (HAProxy accept-proxy, nginx
proxy_protocol) is probed with proxy-protocol=v1 or proxy-protocol=v2 in SPEC,
for example "http proxy-protocol=v2 path=/healthz".

Exit status: 0 when every probe was up, 1 when any was down, 2 for a bad
spec, address or flag.

Flags:
`

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("count", 1, "number of probes")
	interval := fs.Duration("interval", time.Second, "time between probes when --count > 1")
	timeout := fs.Duration("timeout", 0, fmt.Sprintf("probe timeout, %v to %v (default: the spec's timeout=, else %v)", probespec.MinTimeout, probespec.MaxTimeout, prober.DefaultTimeout))
	jsonOut := fs.Bool("json", false, "print one JSON object per probe")
	secretsDir := fs.String("secrets-dir", "", "directory holding Secrets as DIR/NAME/password, for secret=")
	source := fs.String("source", "", "source IP address of the probes")
	serve := fs.Bool("serve", false, "start a loopback server for SPEC's protocol and probe it")
	fs.Usage = func() {
		fmt.Fprint(stderr, checkUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	want := 2
	if *serve {
		want = 1
	}
	if len(pos) != want {
		fmt.Fprintf(stderr, "pulselb check: want %d arguments (SPEC%s), got %d\n", want,
			map[bool]string{true: "", false: " ADDR:PORT"}[*serve], len(pos))
		fs.Usage()
		return 2
	}
	if *count < 1 || *count > 100000 {
		fmt.Fprintf(stderr, "pulselb check: --count=%d: want 1 to 100000\n", *count)
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["timeout"] && (*timeout < probespec.MinTimeout || *timeout > probespec.MaxTimeout) {
		fmt.Fprintf(stderr, "pulselb check: --timeout=%v: want between %v and %v, as the spec's timeout=\n", *timeout, probespec.MinTimeout, probespec.MaxTimeout)
		return 2
	}
	if *interval < 0 {
		fmt.Fprintf(stderr, "pulselb check: --interval=%v: want zero or a positive duration\n", *interval)
		return 2
	}
	spec, err := probespec.Parse(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "pulselb check: %v\n", err)
		return 2
	}
	opts := prober.Options{}
	if *secretsDir != "" {
		opts.Secrets = prober.DirSecrets(*secretsDir)
	}
	if *source != "" {
		a, err := netip.ParseAddr(*source)
		if err != nil {
			fmt.Fprintf(stderr, "pulselb check: --source=%q: not an IP address\n", *source)
			return 2
		}
		if err := checkLocalAddr(a); err != nil {
			fmt.Fprintf(stderr, "pulselb check: --source=%q: %v\n", *source, err)
			return 2
		}
		opts.LocalAddr = a
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var target netip.AddrPort
	if *serve {
		srv, err := loopback.Serve(ctx, spec)
		if err != nil {
			fmt.Fprintf(stderr, "pulselb check: --serve: %v\n", err)
			return 2
		}
		defer srv.Close()
		target = srv.Addr
		// The server's certificate is made up for this run: trusting it
		// lets verify=true pass, and still shows how a probe verifies.
		opts.RootCAs = srv.Roots
		if !*jsonOut {
			trusted := ""
			if srv.Roots != nil {
				trusted = " (its throwaway self-signed certificate is trusted for this check)"
			}
			fmt.Fprintf(stdout, "serving a loopback %s server on %s%s\n", spec.Protocol, target, trusted)
		}
	} else if target, err = resolveTarget(ctx, pos[1]); err != nil {
		fmt.Fprintf(stderr, "pulselb check: %v\n", err)
		return 2
	}
	if src := opts.LocalAddr; src.IsValid() && src.Unmap().Is4() != target.Addr().Unmap().Is4() {
		fmt.Fprintf(stderr, "pulselb check: --source=%q is an %s address and the target %s is %s: a probe's source must be of the target's family\n",
			*source, family(src), target, family(target.Addr()))
		return 2
	}

	p, err := prober.New(spec, opts)
	if err != nil {
		fmt.Fprintf(stderr, "pulselb check: %v\n", err)
		return 2
	}
	probeTimeout := prober.DefaultTimeout
	switch {
	case *timeout > 0:
		probeTimeout = *timeout
	case spec.Timeout > 0:
		probeTimeout = spec.Timeout
	}

	var up, down int
	var totals []time.Duration
	for i := 0; i < *count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(*interval):
			}
		}
		if ctx.Err() != nil {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		r := p.Probe(pctx, target)
		cancel()
		if r.Up() {
			up++
		} else {
			down++
		}
		totals = append(totals, r.Timings.Total)
		if *jsonOut {
			writeJSON(stdout, spec, target, r)
		} else {
			writeText(stdout, spec, target, r)
		}
	}
	if *count > 1 && !*jsonOut {
		writeSummary(stdout, up, down, totals)
	}
	if down > 0 || up == 0 {
		return 1
	}
	return 0
}

// parseInterleaved parses flags that may appear before, between or after
// the positional arguments, as users type them.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlagSet(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// checkLocalAddr returns an error unless a is an address of this host, one
// a probe can use as its source.
func checkLocalAddr(a netip.Addr) error {
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return errors.New("not an address of this host (want an IP address of one of its interfaces)")
		}
		return fmt.Errorf("cannot use it as a source address: %w", err)
	}
	return pc.Close()
}

// resolveTarget parses ADDR:PORT, resolving a host name to its first address.
func resolveTarget(ctx context.Context, s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return netip.AddrPort{}, fmt.Errorf("target %q: port 0 cannot be probed (want a port from 1 to 65535)", s)
		}
		return ap, nil
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("target %q: want ADDR:PORT, such as 192.0.2.10:443 or [2001:db8::1]:53", s)
	}
	if host == "" {
		return netip.AddrPort{}, fmt.Errorf("target %q: no address before the port (want ADDR:PORT, such as 192.0.2.10:443 or [2001:db8::1]:53)", s)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("target %q: port %q is not a number from 1 to 65535", s, portStr)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("target %q: cannot resolve %q: %w", s, host, err)
	}
	if len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("target %q: %q has no addresses", s, host)
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), nil
}

// family names a's address family for a message.
func family(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
}

func writeText(w io.Writer, spec probespec.Spec, target netip.AddrPort, r prober.Result) {
	state := "UP"
	if !r.Up() {
		state = "DOWN"
	}
	msg := r.Message()
	if msg != "" {
		msg = "  " + msg
	}
	fmt.Fprintf(w, "%s %s  %s %s%s\n", spec.Protocol, target, state, r.Outcome, msg)
	fmt.Fprintf(w, "  connect %s  tls %s  first byte %s  total %s\n",
		ms(r.Timings.Connect), ms(r.Timings.TLS), ms(r.Timings.FirstByte), ms(r.Timings.Total))
	if c := r.TLS; c != nil {
		verified := "not verified"
		if c.Verified {
			verified = "verified"
		}
		fmt.Fprintf(w, "  tls: %s, %s", c.Version, verified)
		if c.ALPN != "" {
			fmt.Fprintf(w, ", alpn %s", c.ALPN)
		}
		fmt.Fprintf(w, "\n  certificate: %s, issued by %s\n", c.Subject, c.Issuer)
		if len(c.DNSNames) > 0 {
			fmt.Fprintf(w, "  names: %s\n", strings.Join(c.DNSNames, ", "))
		}
		fmt.Fprintf(w, "  expires: %s (%s)\n", c.NotAfter.UTC().Format(time.RFC3339), untilText(c.NotAfter))
		if !c.ChainNotAfter.IsZero() {
			fmt.Fprintf(w, "  chain expires: %s (%s)\n", c.ChainNotAfter.UTC().Format(time.RFC3339), untilText(c.ChainNotAfter))
		}
	}
	if r.ServerVersion != "" {
		fmt.Fprintf(w, "  server: %s\n", r.ServerVersion)
	}
}

// untilText says how far t is from now, or that it has passed.
func untilText(t time.Time) string {
	d := time.Until(t)
	if d < 0 {
		return "expired " + prober.ApproxDuration(-d) + " ago"
	}
	return "in " + prober.ApproxDuration(d)
}

func writeSummary(w io.Writer, up, down int, totals []time.Duration) {
	lo, hi, sum := totals[0], totals[0], time.Duration(0)
	for _, d := range totals {
		lo, hi, sum = min(lo, d), max(hi, d), sum+d
	}
	fmt.Fprintf(w, "%d probes: %d up, %d down; total min/avg/max %s/%s/%s\n",
		len(totals), up, down, ms(lo), ms(sum/time.Duration(len(totals))), ms(hi))
}

// checkJSON is the --json form of one probe.
type checkJSON struct {
	Time          time.Time          `json:"time"`
	Spec          string             `json:"spec"`
	Target        string             `json:"target"`
	Up            bool               `json:"up"`
	Outcome       prober.Outcome     `json:"outcome"`
	Error         string             `json:"error,omitempty"`
	Detail        string             `json:"detail,omitempty"`
	TimingsMS     map[string]float64 `json:"timingsMs"`
	TLS           *prober.CertInfo   `json:"tls,omitempty"`
	ServerVersion string             `json:"serverVersion,omitempty"`
}

func writeJSON(w io.Writer, spec probespec.Spec, target netip.AddrPort, r prober.Result) {
	out := checkJSON{
		Time:          time.Now().UTC(),
		Spec:          spec.String(),
		Target:        target.String(),
		Up:            r.Up(),
		Outcome:       r.Outcome,
		Detail:        r.Detail,
		TLS:           r.TLS,
		ServerVersion: r.ServerVersion,
		TimingsMS:     map[string]float64{},
	}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	for name, d := range map[string]time.Duration{
		"connect": r.Timings.Connect, "tls": r.Timings.TLS, "firstByte": r.Timings.FirstByte, "total": r.Timings.Total,
	} {
		if d != 0 || name == "total" {
			out.TimingsMS[name] = float64(d) / float64(time.Millisecond)
		}
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(w, "%s\n", b)
}
