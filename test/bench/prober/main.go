// Command prober measures pulselb's probe engine against its anchor,
// Debian's prometheus-blackbox-exporter, in one run on loopback:
//
//   - probes per CPU-second for tcp and http: blackbox_exporter driven
//     through its /probe API at the highest rate it sustains, then pulselb's
//     scheduler at the same rate; the CPU of each prober process is read
//     from /proc, and the ratio printed;
//   - 10,000 tcp targets at a 1 s interval: CPU (cores) and peak RSS of a
//     pulselb prober process, whether it kept the 10,000 probes/s its
//     schedule asks for, and if not whether the machine was saturated; the
//     loopback servers' CPU (this process) is reported on its own line.
//
// The servers being probed run in this process, the probers in their own,
// so each prober's CPU is its own.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/test/bench/cpuprofile"
	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/traffic"
)

func main() {
	role := flag.String("role", "", "internal: run as a pulselb prober child")
	duration := flag.Duration("duration", 10*time.Second, "measuring time per run")
	blackbox := flag.String("blackbox", "/usr/bin/prometheus-blackbox-exporter", "blackbox_exporter binary")
	scaleTargets := flag.Int("scale-targets", 10000, "targets in the scale run")
	scaleDuration := flag.Duration("scale-duration", 20*time.Second, "measuring time of the scale run")
	// Child flags.
	spec := flag.String("spec", "tcp", "child: probe spec")
	addrs := flag.String("addrs", "", "child: comma-separated target addresses")
	targets := flag.Int("targets", 100, "child: number of targets")
	interval := flag.Duration("interval", time.Second, "child: probe interval")
	childFor := flag.Duration("for", 0, "child: stop after this long (0: when killed)")
	cpuProfile := flag.String("cpuprofile", "", "child: write a CPU profile here")
	flag.Parse()
	log.SetFlags(0)

	if *role == "pulselb" {
		defer cpuprofile.Start(*cpuProfile)()
		runChild(*spec, strings.Split(*addrs, ","), *targets, *interval, *childFor)
		return
	}

	servers, err := startServers(20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("# prober benchmark, %s, %d CPUs, %s per run\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), *duration)
	fmt.Printf("%-6s %-18s %10s %10s %14s\n", "proto", "prober", "probes/s", "cpu-s", "probes/cpu-s")
	for _, proto := range []string{"tcp", "http"} {
		bbRate, bbEff, err := runBlackbox(*blackbox, proto, servers, *duration)
		if err != nil {
			log.Fatalf("blackbox_exporter %s: %v", proto, err)
		}
		// pulselb at the same probe rate: N targets at interval I.
		n := max(1, int(bbRate/10))
		rate, eff, _, err := runPulselb(proto, servers, n, 100*time.Millisecond, *duration)
		if err != nil {
			log.Fatalf("pulselb %s: %v", proto, err)
		}
		_ = rate
		fmt.Printf("ratio  %-6s pulselb/blackbox_exporter probes per CPU-second = %.2fx\n", proto, eff/bbEff)
	}
	_, _, scale, err := runPulselb("tcp", servers, *scaleTargets, time.Second, *scaleDuration)
	if err != nil {
		log.Fatalf("pulselb scale: %v", err)
	}
	fmt.Printf("scale  %d tcp targets at 1s: %.0f probes/s, %.3f cores, peak RSS %.1f MiB\n",
		*scaleTargets, scale.rate, scale.cores, scale.rssMiB)
	fmt.Printf("scale  schedule: %s\n", scheduleVerdict(scale, float64(*scaleTargets)))
	fmt.Printf("scale  loopback servers (this process, not charged to the prober): %.3f cores; machine %.0f %% busy of %d CPUs\n",
		scale.serverCores, scale.machineBusy, runtime.NumCPU())
}

// scheduleVerdict says whether the scale run kept the rate its schedule
// asks for (within 1 %), and when it did not, whether the machine had CPU
// to spare (the prober fell behind) or not (the prober was starved by
// what shares the machine, the loopback servers first).
func scheduleVerdict(r scaleResult, want float64) string {
	kept := r.rate >= 0.99*want
	switch {
	case kept:
		return fmt.Sprintf("kept: %.0f of %.0f probes/s", r.rate, want)
	case r.machineBusy >= 95:
		return fmt.Sprintf("NOT kept: %.0f of %.0f probes/s, with the machine %.0f %% busy: starved of CPU by other work (loopback servers %.2f cores), not the prober's own limit",
			r.rate, want, r.machineBusy, r.serverCores)
	default:
		return fmt.Sprintf("NOT kept: %.0f of %.0f probes/s, with the machine only %.0f %% busy: the prober fell behind", r.rate, want, r.machineBusy)
	}
}

type servers struct {
	tcp  []string // accept-and-close listeners
	http []string // HTTP 200 servers
}

// startServers starts n TCP and n HTTP loopback servers, so the scale run's
// connections spread over many 4-tuples.
func startServers(n int) (*servers, error) {
	s := &servers{}
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		go traffic.Serve(ln, nil)
		s.tcp = append(s.tcp, ln.Addr().String())
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok\n")
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(hl) }()
		s.http = append(s.http, hl.Addr().String())
	}
	return s, nil
}

func (s *servers) of(proto string) []string {
	if proto == "http" {
		return s.http
	}
	return s.tcp
}

// runBlackbox drives blackbox_exporter's /probe API with 32 concurrent
// clients for d and returns its probe rate and probes per CPU-second.
func runBlackbox(bin, proto string, s *servers, d time.Duration) (rate, perCPU float64, err error) {
	dir, err := os.MkdirTemp("", "pulselb-bench-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "blackbox.yml")
	if err := os.WriteFile(cfg, []byte("modules:\n  tcp:\n    prober: tcp\n    timeout: 2s\n  http:\n    prober: http\n    timeout: 2s\n"), 0o644); err != nil {
		return 0, 0, err
	}
	port, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--config.file="+cfg, "--web.listen-address="+listen, "--log.level=error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}
	ready := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + listen + "/-/healthy")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(ready) {
			return 0, 0, fmt.Errorf("blackbox_exporter not ready on %s: %w", listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	addrs := s.of(proto)
	var ok, failed atomic.Int64
	drive := func(d time.Duration) {
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; time.Now().Before(stop); i++ {
					target := addrs[i%len(addrs)]
					if proto == "http" {
						target = "http://" + target + "/"
					}
					resp, err := client.Get("http://" + listen + "/probe?module=" + proto + "&target=" + target)
					if err != nil {
						failed.Add(1)
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if strings.Contains(string(b), "probe_success 1") {
						ok.Add(1)
					} else {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	drive(time.Second) // warm up
	ok.Store(0)
	failed.Store(0)
	cpu0, err := procstat.CPUSeconds(cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	drive(d)
	elapsed := time.Since(start).Seconds()
	cpu1, err := procstat.CPUSeconds(cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	if f := failed.Load(); f > ok.Load()/100 {
		return 0, 0, fmt.Errorf("%d of %d probes failed", f, f+ok.Load())
	}
	n := float64(ok.Load())
	fmt.Printf("%-6s %-18s %10.0f %10.2f %14.0f\n", proto, "blackbox_exporter", n/elapsed, cpu1-cpu0, n/(cpu1-cpu0))
	return n / elapsed, n / (cpu1 - cpu0), nil
}

// scaleResult is a pulselb run's figures over its measuring window: probe
// rate, the prober's cores and peak RSS, the cores of this process (the
// loopback servers being probed, charged separately), and how busy the
// machine was.
type scaleResult struct{ rate, cores, rssMiB, serverCores, machineBusy float64 }

// runPulselb runs a pulselb scheduler child with n targets at interval for
// d and returns its probe rate and probes per CPU-second.
func runPulselb(proto string, s *servers, n int, interval, d time.Duration) (rate, perCPU float64, res scaleResult, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, res, err
	}
	spec := "tcp"
	if proto == "http" {
		spec = "http status=200"
	}
	cmd := exec.Command(self, "-role=pulselb", "-spec="+spec, "-addrs="+strings.Join(s.of(proto), ","),
		"-targets="+strconv.Itoa(n), "-interval="+interval.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, res, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, res, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	counter := func() (up, down int64, err error) {
		if !lines.Scan() {
			return 0, 0, fmt.Errorf("child exited: %v", lines.Err())
		}
		_, err = fmt.Sscanf(lines.Text(), "%d %d", &up, &down)
		return up, down, err
	}
	// The child prints its counters every 500ms; let it warm up for 2 s.
	var up0, down0 int64
	for i := 0; i < 4; i++ {
		if up0, down0, err = counter(); err != nil {
			return 0, 0, res, err
		}
	}
	cpu0, err := procstat.CPUSeconds(cmd.Process.Pid)
	if err != nil {
		return 0, 0, res, err
	}
	servers0, err := procstat.CPUSeconds(os.Getpid())
	if err != nil {
		return 0, 0, res, err
	}
	machine0, err := procstat.ReadMachine()
	if err != nil {
		return 0, 0, res, err
	}
	start := time.Now()
	var up1, down1 int64
	for time.Since(start) < d {
		if up1, down1, err = counter(); err != nil {
			return 0, 0, res, err
		}
	}
	elapsed := time.Since(start).Seconds()
	cpu1, err := procstat.CPUSeconds(cmd.Process.Pid)
	if err != nil {
		return 0, 0, res, err
	}
	servers1, err := procstat.CPUSeconds(os.Getpid())
	if err != nil {
		return 0, 0, res, err
	}
	machine1, err := procstat.ReadMachine()
	if err != nil {
		return 0, 0, res, err
	}
	rss, err := procstat.PeakRSSMiB(cmd.Process.Pid)
	if err != nil {
		return 0, 0, res, err
	}
	probes := float64(up1 - up0)
	if f := down1 - down0; f > int64(probes)/100 {
		return 0, 0, res, fmt.Errorf("%d of %.0f probes failed", f, probes+float64(f))
	}
	cpu := cpu1 - cpu0
	fmt.Printf("%-6s %-18s %10.0f %10.2f %14.0f\n", proto, fmt.Sprintf("pulselb (%d tgts)", n), probes/elapsed, cpu, probes/cpu)
	return probes / elapsed, probes / cpu, scaleResult{rate: probes / elapsed, cores: cpu / elapsed, rssMiB: rss,
		serverCores: (servers1 - servers0) / elapsed, machineBusy: machine1.BusyPercent(machine0)}, nil
}

// runChild is the pulselb prober process: a scheduler over n targets that
// prints "up down" probe counts every 500 ms.
func runChild(specText string, addrs []string, n int, interval, runFor time.Duration) {
	spec, err := probespec.Parse(specText)
	if err != nil {
		log.Fatal(err)
	}
	p, err := prober.New(spec, prober.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var up, down atomic.Int64
	// The prober counts its own results: the scheduler reports only state
	// changes, and counting here adds no work to the scheduler's.
	counted := prober.Func(func(ctx context.Context, addr netip.AddrPort) prober.Result {
		r := p.Probe(ctx, addr)
		if r.Up() {
			up.Add(1)
		} else {
			down.Add(1)
		}
		return r
	})
	sched := prober.NewScheduler(prober.Config{Interval: interval})
	ts := make([]prober.Target, n)
	for i := range ts {
		ts[i] = prober.Target{
			Key:      fmt.Sprintf("t%d", i),
			Addr:     netip.MustParseAddrPort(addrs[i%len(addrs)]),
			Protocol: spec.Protocol,
			Prober:   counted,
			Timeout:  2 * time.Second,
		}
	}
	sched.Set(ts)
	if runFor <= 0 {
		runFor = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for range t.C {
			fmt.Printf("%d %d\n", up.Load(), down.Load())
		}
	}()
	_ = sched.Run(ctx)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
