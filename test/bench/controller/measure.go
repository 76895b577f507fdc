package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// controllerRun is what measureController measured.
type controllerRun struct {
	// start is the first creation; created how long the creations took;
	// total from start until every Service had a status.
	start          time.Time
	created, total time.Duration
	// latencies are each Service's, creation to status, sorted.
	latencies []time.Duration
	// cpu and peakMiB are the controller's CPU time over the run and
	// peak RSS.
	cpu     time.Duration
	peakMiB int64
	// before and after are the counters around the run; loadavg the load
	// after it.
	before, after usage
	loadavg       string
	// anchorStart and anchorEnd are the first proxy Deployment's creation
	// and when all were ready (anchorOK).
	anchorStart, anchorEnd time.Time
	anchorOK               bool
	// metrics are the controller's own, scraped at the end (metricsErr
	// when they could not be).
	metrics    map[string]float64
	metricsErr error
	logPath    string
}

// measureController creates the Services and waits until every one has a
// status, then until every proxy Deployment is ready (the anchor), with
// the controller ctl running and sampled.
func measureController(ctx context.Context, c *cluster.Cluster, ctl *scenario.Controller, sampler *sampler, tr *tracker) (controllerRun, error) {
	m := controllerRun{logPath: ctl.LogPath}
	createClient, err := newCreateClient(c)
	if err != nil {
		return m, err
	}
	cpuBefore := sampler.cpu()
	if m.before, err = readUsage(ctx, c.Client); err != nil {
		return m, err
	}
	m.start = time.Now()
	if err := createServices(ctx, createClient, tr, nil); err != nil {
		return m, err
	}
	m.created = time.Since(m.start)
	log.Printf("created %d Services in %s", *services, m.created.Round(time.Millisecond))

	deadline := time.Now().Add(*timeout)
	for {
		if err := ctl.Alive(); err != nil {
			return m, err
		}
		published, ready := tr.counts()
		if published >= *services {
			break
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("after %s: %d of %d Services have a status, %d proxy Deployments ready; controller log %s",
				*timeout, published, *services, ready, ctl.LogPath)
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(time.Second):
			log.Printf("%6.1fs: %d Services with status, %d proxy Deployments ready, controller RSS %d MiB",
				time.Since(m.start).Seconds(), published, ready, sampler.rssMiB())
		}
	}
	sampler.sample()
	m.total = tr.lastPublished().Sub(m.start)
	if m.after, err = readUsage(ctx, c.Client); err != nil {
		return m, err
	}
	m.cpu = sampler.cpu() - cpuBefore
	m.peakMiB = sampler.peakMiB()
	m.loadavg = loadAverage()
	m.latencies = tr.latencies()

	// The anchor: the proxy Deployments' pods all ready, from the first
	// Deployment the controller created. A Service is published with its
	// first ready pod, so the last Deployments may still be finishing.
	for {
		if _, ready := tr.counts(); ready >= *services || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	m.anchorStart, m.anchorEnd, m.anchorOK = tr.deploymentSpan(*services)
	m.metrics, m.metricsErr = cluster.ScrapeMetrics(ctl.MetricsURL())
	return m, nil
}

// usage holds the counters a run reads before and after itself: the
// machine's CPU, each process' CPU time and the API server's requests.
type usage struct {
	machine  procstat.Machine
	procs    map[string]time.Duration
	requests requests
}

// readUsage reads the counters of usage now.
func readUsage(ctx context.Context, cs kubernetes.Interface) (usage, error) {
	machine, err := procstat.ReadMachine()
	if err != nil {
		return usage{}, err
	}
	u := usage{machine: machine, procs: processCPU()}
	if u.requests, err = apiRequests(ctx, cs); err != nil {
		return usage{}, err
	}
	return u, nil
}

// measureProber runs one pulselb prober for a light node for -prober-rss
// and returns its peak RSS in MiB. Light nodes run no prober pods, so it
// is assigned no targets: what it holds is its informer caches (every
// Service, Node and pod of pulselb-system), which at this scale are most
// of a prober's memory; a real prober's 60 or so targets (2,000 Services ×
// 2 proxies × 3 vantages / 200 nodes) add little.
func measureProber(ctx context.Context, c *cluster.Cluster) (int64, error) {
	nodes, err := readyNodes(ctx, c.Client)
	if err != nil || len(nodes) == 0 {
		return 0, fmt.Errorf("listing nodes for the prober: %v", err)
	}
	metrics, err := freePort()
	if err != nil {
		return 0, err
	}
	beacon, err := freePort()
	if err != nil {
		return 0, err
	}
	_, beaconPort, _ := net.SplitHostPort(beacon)
	logPath := filepath.Join(c.Dir, "logs", "pulselb-prober.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, fmt.Errorf("creating prober log: %w", err)
	}
	defer logf.Close()
	pp, err := cluster.StartPulselb(ctx, logf, "prober", "--kubeconfig="+c.Kubeconfig, "--namespace="+systemNamespace,
		"--node-name="+nodes[0].Name, "--beacon-port="+beaconPort, "--metrics-address="+metrics)
	if err != nil {
		return 0, err
	}
	defer func() { _ = pp.Stop(15 * time.Second) }()
	s := newSampler(pp.Pid())
	for end := time.Now().Add(*proberRSS); time.Now().Before(end); {
		if pp.Exited() {
			return 0, fmt.Errorf("pulselb prober exited: %w; log %s", pp.Err(), logPath)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond): // a sampling window
		}
		s.sample()
	}
	return s.peakMiB(), nil
}

// selfName names this program in cpuByProcess: it runs the light nodes'
// simulator, the informers of the tracker and the creating goroutines.
const selfName = "bench (light nodes, watches, creations)"

// processCPU returns the CPU time used so far by this program and by each of
// its child processes (the harness' control plane), by name.
func processCPU() map[string]time.Duration {
	self := os.Getpid()
	out := map[string]time.Duration{selfName: newSampler(self).cpu()}
	for pid, argv := range procstat.Children(self) {
		out[filepath.Base(argv[0])] += newSampler(pid).cpu()
	}
	return out
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
