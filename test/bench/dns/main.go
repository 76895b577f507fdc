// Command dns measures pulselb's authoritative DNS server against CoreDNS
// (file plugin), BIND 9 and NSD, in one run on loopback: each serves the
// same 1,000-name zone in turn, and dnsperf measures
//
//   - throughput: queries per second answered with dnsperf sending as fast
//     as it can for -duration;
//   - latency: the 99th percentile at a fixed, moderate load (-latency-qps
//     for -latency-duration), where it reflects the server, not a queue.
//
// It prints the ratios pulselb/CoreDNS and pulselb/BIND (targets >= 1.0x;
// for latency the ratio is other/pulselb, so higher is better too). NSD is
// the upper bound. pulselb runs as a child process, like the others, so
// every server has the same CPUs to itself.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/test/bench/cpuprofile"
)

const origin = "bench.example."

func main() {
	role := flag.String("role", "", "internal: run as the pulselb server child")
	port := flag.Int("port", 0, "child: port to serve on")
	names := flag.Int("names", 1000, "names in the zone")
	duration := flag.Duration("duration", 3*time.Second, "throughput run per server and round")
	latDuration := flag.Duration("latency-duration", 1*time.Second, "latency run per server and round")
	rounds := flag.Int("rounds", 3, "rounds; each round measures every server, in a rotated order, and the median is reported")
	latQPS := flag.Int("latency-qps", 20000, "query rate of the latency run")
	coredns := flag.String("coredns", "", "CoreDNS binary (default: coredns in $PATH or $GOBIN)")
	only := flag.String("only", "", "comma-separated servers to run (default: all)")
	cpuProfile := flag.String("cpuprofile", "", "child: write a CPU profile of the pulselb server here")
	flag.Parse()
	log.SetFlags(0)

	if *role == "pulselb" {
		defer cpuprofile.Start(*cpuProfile)()
		if err := runPulselb(*port, *names); err != nil {
			log.Fatal(err)
		}
		return
	}

	dir, err := os.MkdirTemp("", "pulselb-dnsbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	zoneFile, queryFile, err := writeZone(dir, *names)
	if err != nil {
		log.Fatal(err)
	}
	servers := []server{
		{name: "pulselb", start: startPulselb},
		{name: "CoreDNS", start: func(dir, zone string, port int) (*exec.Cmd, error) { return startCoreDNS(*coredns, dir, zone, port) }},
		{name: "BIND", start: startBIND},
		{name: "NSD", start: startNSD},
	}
	var selected []server
	for _, s := range servers {
		if *only == "" || slices.Contains(strings.Split(*only, ","), s.name) {
			selected = append(selected, s)
		}
	}
	fmt.Printf("# dns benchmark, %s, %d CPUs, %d names, %d rounds of dnsperf %s + %s at %d qps per server, median\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), *names, *rounds, *duration, *latDuration, *latQPS)
	// Every server runs for the whole benchmark (an idle one costs
	// nothing), and the rounds interleave them, so a burst of load from
	// elsewhere on the machine does not fall on one server only.
	ports := map[string]int{}
	for _, s := range selected {
		port, stop, err := launch(s, dir, zoneFile)
		if err != nil {
			log.Printf("%s: %v", s.name, err)
			continue
		}
		defer stop()
		ports[s.name] = port
	}
	samples := map[string][]result{}
	for round := range *rounds {
		for i := range selected {
			s := selected[(i+round)%len(selected)]
			port, ok := ports[s.name]
			if !ok {
				continue
			}
			r, err := measure(port, queryFile, *duration, *latDuration, *latQPS)
			if err != nil {
				log.Printf("%s: %v", s.name, err)
				continue
			}
			samples[s.name] = append(samples[s.name], r)
		}
	}
	fmt.Printf("%-8s %12s %8s %12s %12s  %s\n", "server", "qps", "lost%", "p50 ms", "p99 ms", "version")
	results := map[string]result{}
	for _, s := range selected {
		if len(samples[s.name]) == 0 {
			continue
		}
		r := median(samples[s.name])
		results[s.name] = r
		fmt.Printf("%-8s %12.0f %8.2f %12.3f %12.3f  %s\n", s.name, r.qps, r.lostPct, r.p50*1e3, r.p99*1e3, version(s.name, *coredns))
	}
	p, ok := results["pulselb"]
	if !ok {
		return
	}
	for _, other := range []string{"CoreDNS", "BIND", "NSD"} {
		o, ok := results[other]
		if !ok {
			continue
		}
		fmt.Printf("ratio pulselb/%-7s qps = %.2fx   p99 latency (%s/pulselb, higher is better) = %.2fx\n",
			other, p.qps/o.qps, other, o.p99/p.p99)
	}
}

type server struct {
	name  string
	start func(dir, zoneFile string, port int) (*exec.Cmd, error)
}

type result struct {
	qps, lostPct float64
	p50, p99     float64 // seconds
}

// benchServices is the zone's content: one Service per name, each with
// one IPv4 address and an HTTP port.
func benchServices(n int) []dnsexport.Service {
	out := make([]dnsexport.Service, n)
	for i := range out {
		out[i] = dnsexport.Service{
			Namespace: "bench",
			Name:      fmt.Sprintf("svc-%04d", i),
			IPs:       []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})},
			TTL:       5,
		}
	}
	return out
}

func zoneConfig() dnsexport.ZoneConfig {
	return dnsexport.ZoneConfig{
		Origin:      origin,
		NameServers: []dnsexport.NameServer{{Name: "ns1." + origin, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}},
	}
}

// writeZone writes the zone as a master file (from the same builder the
// pulselb child uses, so every server has the same records) and the
// dnsperf query file: every name's A record, in order.
func writeZone(dir string, n int) (zoneFile, queryFile string, err error) {
	z, problems, err := dnsexport.Build(zoneConfig(), benchServices(n))
	if err != nil || len(problems) > 0 {
		return "", "", fmt.Errorf("building zone: %v %v", err, problems)
	}
	var zb, qb strings.Builder
	for _, rr := range z.WithSerial(1).Records()[1:] { // the SOA once
		zb.WriteString(rr.String() + "\n")
	}
	for _, s := range benchServices(n) {
		fmt.Fprintf(&qb, "%s.%s.%s A\n", s.Name, s.Namespace, origin)
	}
	zoneFile = filepath.Join(dir, "zone.db")
	queryFile = filepath.Join(dir, "queries.txt")
	if err := os.WriteFile(zoneFile, []byte(zb.String()), 0o644); err != nil {
		return "", "", err
	}
	return zoneFile, queryFile, os.WriteFile(queryFile, []byte(qb.String()), 0o644)
}

func runPulselb(port, n int) error {
	srv, err := dnsexport.NewServer(dnsexport.Config{
		Zone:       zoneConfig(),
		Listen:     fmt.Sprintf("127.0.0.1:%d", port),
		MaxUDPSize: 1232,
	})
	if err != nil {
		return err
	}
	if _, err := srv.Update(benchServices(n)); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return srv.Run(ctx)
}

func startPulselb(dir, zoneFile string, port int) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-role", "pulselb", "-port", strconv.Itoa(port), "-names", strconv.Itoa(countNames(zoneFile)))
	return cmd, cmd.Start()
}

// countNames counts the Services' A records in the zone file.
func countNames(zoneFile string) int {
	b, _ := os.ReadFile(zoneFile)
	return strings.Count(string(b), "\tA\t10.")
}

func startCoreDNS(bin, dir, zoneFile string, port int) (*exec.Cmd, error) {
	if bin == "" {
		if p, err := exec.LookPath("coredns"); err == nil {
			bin = p
		} else if gobin := os.Getenv("GOBIN"); gobin != "" {
			bin = filepath.Join(gobin, "coredns")
		}
	}
	if bin == "" {
		return nil, fmt.Errorf("coredns not found: go install github.com/coredns/coredns@v1.15.0 and pass -coredns")
	}
	corefile := filepath.Join(dir, "Corefile")
	conf := fmt.Sprintf("%s:%d {\n\tbind 127.0.0.1\n\tfile %s\n}\n", origin, port, zoneFile)
	if err := os.WriteFile(corefile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-conf", corefile, "-quiet")
	return cmd, cmd.Start()
}

func startBIND(dir, zoneFile string, port int) (*exec.Cmd, error) {
	bdir := filepath.Join(dir, "bind")
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	listen-on port %[2]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
};
controls { };
zone "%[3]s" { type primary; file "%[4]s"; };
`, bdir, port, strings.TrimSuffix(origin, "."), zoneFile)
	path := filepath.Join(bdir, "named.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	args := []string{"-f", "-c", path}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	cmd := exec.Command("/usr/sbin/named", args...)
	return cmd, cmd.Start()
}

func startNSD(dir, zoneFile string, port int) (*exec.Cmd, error) {
	ndir := filepath.Join(dir, "nsd")
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`server:
	ip-address: 127.0.0.1@%[2]d
	port: %[2]d
	username: ""
	chroot: ""
	zonesdir: "%[1]s"
	pidfile: "%[1]s/nsd.pid"
	database: ""
	xfrdfile: "%[1]s/xfrd.state"
	zonelistfile: "%[1]s/zone.list"
	logfile: "%[1]s/nsd.log"
	server-count: %[5]d
	verbosity: 0
remote-control:
	control-enable: no
zone:
	name: "%[3]s"
	zonefile: "%[4]s"
`, ndir, port, strings.TrimSuffix(origin, "."), zoneFile, runtime.NumCPU())
	path := filepath.Join(ndir, "nsd.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("/usr/sbin/nsd", "-d", "-c", path)
	return cmd, cmd.Start()
}

// launch starts s on a free port and waits until it answers.
func launch(s server, dir, zoneFile string) (port int, stop func(), err error) {
	if port, err = freePort(); err != nil {
		return 0, nil, err
	}
	cmd, err := s.start(dir, zoneFile, port)
	if err != nil {
		return 0, nil, err
	}
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitReady(addr, 30*time.Second); err != nil {
		stop()
		return 0, nil, err
	}
	if err := checkAnswers(addr); err != nil {
		stop()
		return 0, nil, err
	}
	return port, stop, nil
}

// measure runs dnsperf against port twice: flat out, then at latQPS.
func measure(port int, queryFile string, d, latD time.Duration, latQPS int) (result, error) {
	var r result
	out, err := dnsperf(port, queryFile, "-l", secs(d), "-c", "8", "-q", "500")
	if err != nil {
		return r, err
	}
	if r.qps, err = findFloat(out, `Queries per second:\s+([0-9.]+)`); err != nil {
		return r, err
	}
	if r.lostPct, err = findFloat(out, `Queries lost:\s+\d+ \(([0-9.]+)%\)`); err != nil {
		return r, err
	}
	if !regexp.MustCompile(`NOERROR \d+ \(100\.00%\)`).MatchString(out) {
		return r, fmt.Errorf("not every answer was NOERROR:\n%s", out)
	}
	out, err = dnsperf(port, queryFile, "-l", secs(latD), "-c", "8", "-Q", strconv.Itoa(latQPS), "-v")
	if err != nil {
		return r, err
	}
	lat := latencies(out)
	if len(lat) == 0 {
		return r, fmt.Errorf("no latencies in dnsperf -v output")
	}
	slices.Sort(lat)
	r.p50 = lat[len(lat)/2]
	r.p99 = lat[len(lat)*99/100]
	return r, nil
}

// median takes each measure's median over the rounds separately.
func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{
		qps:     pick(func(r result) float64 { return r.qps }),
		lostPct: pick(func(r result) float64 { return r.lostPct }),
		p50:     pick(func(r result) float64 { return r.p50 }),
		p99:     pick(func(r result) float64 { return r.p99 }),
	}
}

func secs(d time.Duration) string { return strconv.Itoa(max(1, int(d.Seconds()))) }

func dnsperf(port int, queryFile string, args ...string) (string, error) {
	all := append([]string{"-s", "127.0.0.1", "-p", strconv.Itoa(port), "-d", queryFile}, args...)
	out, err := exec.Command("dnsperf", all...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("dnsperf %s: %v\n%s", strings.Join(all, " "), err, out)
	}
	return string(out), nil
}

// latencies reads the per-query latencies (seconds) of dnsperf -v lines
// such as "> NOERROR svc-0001.bench.bench.example A 0.000105".
func latencies(out string) []float64 {
	var lat []float64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != ">" {
			continue
		}
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			lat = append(lat, v)
		}
	}
	return lat
}

func findFloat(out, re string) (float64, error) {
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%q not in dnsperf output:\n%s", re, out)
	}
	return strconv.ParseFloat(m[1], 64)
}

// waitReady polls addr with an SOA query until it answers NOERROR.
func waitReady(addr string, within time.Duration) error {
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion(origin, dns.TypeSOA)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if r, _, err := c.Exchange(m, addr); err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	return fmt.Errorf("%s did not answer within %s", addr, within)
}

// checkAnswers makes sure the server serves the benchmark zone: a few
// names' A records are the addresses benchServices gave them.
func checkAnswers(addr string) error {
	c := &dns.Client{Timeout: time.Second}
	for _, i := range []int{0, 1, 999} {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("svc-%04d.bench.%s", i, origin), dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err
		}
		want := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String()
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != want || !r.Authoritative {
			return fmt.Errorf("%s: answer %v, want one authoritative A %s", m.Question[0].Name, r.Answer, want)
		}
	}
	return nil
}

func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port")
}

func version(name, coredns string) string {
	var out []byte
	switch name {
	case "pulselb":
		return runtime.Version()
	case "CoreDNS":
		if coredns == "" {
			coredns, _ = exec.LookPath("coredns")
		}
		out, _ = exec.Command(coredns, "-version").CombinedOutput()
	case "BIND":
		out, _ = exec.Command("/usr/sbin/named", "-v").CombinedOutput()
	case "NSD":
		out, _ = exec.Command("/usr/sbin/nsd", "-v").CombinedOutput()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
