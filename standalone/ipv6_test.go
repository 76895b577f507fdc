package standalone

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// ipv6Prefix is the ULA /64 of TestIPv6HostsFailover: the root namespace
// end of a veth has ::1, the hosts' namespace ::31 to ::33. The harness
// cluster (test/cluster) does not use it.
const ipv6Prefix = "fd00:198:18:2ff::"

// TestIPv6HostsFailover runs standalone mode for three IPv6 hosts that
// live in a network namespace of the test's own, reached over a veth: the
// zone answers AAAA for the three, a host blackholed (every packet to it
// dropped, so probes time out) leaves the answer within the detection
// time, and comes back when healed.
func TestIPv6HostsFailover(t *testing.T) {
	requireNetns(t)
	ns := fmt.Sprintf("pulselb-sa6-%d", os.Getpid())
	veth := fmt.Sprintf("psa6-%d", os.Getpid()%100000)
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
	sh(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	sh(t, "ip", "addr", "add", ipv6Prefix+"1/64", "dev", veth, "nodad")
	sh(t, "ip", "link", "set", veth, "up")
	sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	var all []string
	for _, h := range []string{"31", "32", "33"} {
		sh(t, "ip", "-n", ns, "addr", "add", ipv6Prefix+h+"/64", "dev", "eth0", "nodad")
		all = append(all, ipv6Prefix+h)
	}
	sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")

	// The hosts' listeners are made inside the namespace; they accept
	// from any goroutine.
	var lns []net.Listener
	if err := inNamespace(ns, func() error {
		ln, err := net.Listen("tcp", net.JoinHostPort(all[0], "0"))
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		for _, a := range all[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, port))
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		return nil
	}); err != nil {
		t.Fatalf("listening in %s: %v", ns, err)
	}
	for _, ln := range lns {
		t.Cleanup(func() { ln.Close() })
		go acceptClose(ln)
	}
	port := uint16(lns[0].Addr().(*net.TCPAddr).Port)

	in := instance{name: "v6", interval: 300 * time.Millisecond,
		hosts: []string{`a="` + all[0] + `"`, `b="` + all[1] + `"`, `c="` + all[2] + `"`}}
	cfg := in.load(t, t.TempDir(), port)
	r := start(t, cfg)
	waitFor(t, 10*time.Second, "all IPv6 hosts up and in the AAAA answer", func() bool {
		return allUp(r.Runner, "a", "b", "c")() && slices.Equal(aaaa(t, r.Runner), all)
	})

	drop := []string{"INPUT", "-d", all[1], "-j", "DROP"}
	sh(t, append([]string{"ip", "netns", "exec", ns, "ip6tables", "-w", "-I"}, drop...)...)
	took := waitFor(t, 10*time.Second, "b gone from the AAAA answer", func() bool {
		return slices.Equal(aaaa(t, r.Runner), []string{all[0], all[2]})
	})
	// A timeout per probe (adaptive, at least 200 ms) on top of
	// TestHostDownLeavesDNS's detection time, with slack for a busy machine.
	limit := cfg.Interval + time.Duration(cfg.Fall)*(200*time.Millisecond+cfg.Interval) + time.Second
	t.Logf("blackholed IPv6 host left the AAAA answer after %s (limit %s)", took.Round(time.Millisecond), limit)
	if took > limit {
		t.Errorf("blackholed IPv6 host left after %s, more than %s", took, limit)
	}
	if tg := target(r.Runner, "b"); tg.State != "Down" || tg.Vantages[0].Outcome != "L4TOUT" {
		t.Errorf("dashboard shows b as %+v, want Down with L4TOUT", tg)
	}
	if got := answer(t, r.Runner); len(got) != 0 {
		t.Errorf("A answer %v for IPv6-only hosts, want none", got)
	}
	sh(t, append([]string{"ip", "netns", "exec", ns, "ip6tables", "-w", "-D"}, drop...)...)
	waitFor(t, 10*time.Second, "b back in the AAAA answer", func() bool { return slices.Equal(aaaa(t, r.Runner), all) })
}

// requireNetns skips without root or ip/ip6tables, or fails with CI=true.
func requireNetns(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to create a network namespace"
	}
	for _, bin := range []string{"ip", "ip6tables"} {
		if _, err := exec.LookPath(bin); why == "" && err != nil {
			why = "needs " + bin + " (Debian packages iproute2, iptables)"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true", why)
	}
	t.Skipf("%s; run as root (CI does)", why)
}

func sh(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// inNamespace runs fn on an OS thread inside network namespace ns; the
// thread is never unlocked, so it ends with fn.
func inNamespace(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// aaaa is answer for AAAA records.
func aaaa(t *testing.T, r *Runner) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("web.lb.example.test.", dns.TypeAAAA)
	resp, err := dns.Exchange(m, r.DNSAddr().String())
	if err != nil || resp.Rcode != dns.RcodeSuccess {
		return nil
	}
	out := []string{}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.AAAA); ok {
			out = append(out, a.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}
