// Command probers measures what the probers' heartbeats cost the API server
// at scale (run as root): -agents prober agents (prober/agent, the code of
// `pulselb prober`) in this one process, each for its own node, against the
// harness' control plane without node processes, and -services LoadBalancer
// Services with two proxy pods each whose targets are loopback listeners.
//
// Setup. The nodes are Node objects only (no kubelet): each gets an
// InternalIP 127.1.x.y and a Ready condition once, and a grace period of an
// hour keeps the node lifecycle controller from marking them NotReady. Each
// node has a prober pod object (Running, Ready) in pulselb-system, so every
// agent computes the real vantage assignment (K=3), and a beacon listener on
// its IP's port 9472. Each Service i has port 10000+i and two proxy pod
// objects on nodes i and i+agents/2 (mod agents), each with a listener on
// the node's IP and that port that accepts and closes. The agents share one
// client and one set of informers (a real DaemonSet pod has its own; the
// agents' memory is reported without the shared caches), and they all
// write as the harness' admin: the API server's cost per write does not
// depend on who writes.
//
// Modes, one after the other in the same run: "lease" (the agent's
// default: a Lease renewed every 10 s, the report written only on change)
// and "report" (Config.Leases nil: the report rewritten every 10 s as the
// heartbeat, as before Leases). Each mode warms up until every agent has
// written its report plus -warmup, then measures -window of steady state
// (no change), then blackholes one node (closes its beacon and proxy
// listeners) and measures until 2 of its 3 beacon vantages report it Down
// (the controller's quorum) and -failover-window after, then restores it.
//
// Writes and bytes come from the API server's own metrics, read before and
// after each window: apiserver_request_total (verbs POST, PUT, PATCH),
// apiserver_request_body_size_bytes (bytes the writers sent) and
// apiserver_watch_events_sizes (bytes sent to watchers), by resource. A
// baseline window before the agents start measures the control plane's own
// Lease writes (leader election), which are subtracted.
//
// The controller runs as a process (`pulselb controller --class-only
// --probe-reports`): with --class-only it serves none of the Services (they
// have no class), so it places nothing and judges the node beacons only
// (one target per node, 3 vantages each); its CPU time over each window is
// read from /proc/PID/stat.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/test/bench/loopnodes"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
)

const (
	systemNS   = "pulselb-system"
	benchNS    = "bench"
	firstPort  = 10000
	beaconPort = 9472
)

var (
	agents         = flag.Int("agents", 1000, "prober agents, one per node")
	services       = flag.Int("services", 2000, "LoadBalancer Services, two proxy pods each")
	window         = flag.Duration("window", 5*time.Minute, "steady-state measurement window of each mode")
	warmup         = flag.Duration("warmup", time.Minute, "time after every agent has written its report before measuring")
	baseline       = flag.Duration("baseline", 30*time.Second, "window before the agents start, to measure the control plane's own writes")
	failoverWindow = flag.Duration("failover-window", 30*time.Second, "measurement window after a node is blackholed")
	probeInterval  = flag.Duration("probe-interval", 10*time.Second, "probe interval of every Service target (pulselb.io/probe-interval)")
	beaconInterval = flag.Duration("beacon-interval", 10*time.Second, "probe interval of the node beacons (the prober's default is 1s: with every agent in one process that many probes overload a small machine), which the failover is timed on")
	modes          = flag.String("modes", "lease,report", "modes to measure in order: lease (Lease heartbeats, reports on change), report (report heartbeats, as before Leases)")
	workers        = flag.Int("create-workers", 32, "parallel object creations during setup")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	if os.Geteuid() != 0 {
		log.Fatal("bench/probers: needs root for the harness")
	}
	switch {
	case *agents < 4 || *agents > 60000:
		log.Fatalf("bench/probers: -agents=%d: want 4..60000", *agents)
	case *services < 1 || *services > 50000:
		log.Fatalf("bench/probers: -services=%d: want 1..50000", *services)
	case *window <= 0 || *warmup < 0 || *baseline <= 0 || *failoverWindow <= 0 || *probeInterval <= 0 || *beaconInterval <= 0:
		log.Fatal("bench/probers: -window, -baseline, -failover-window, -probe-interval and -beacon-interval must be positive, -warmup not negative")
	case *workers < 1:
		log.Fatalf("bench/probers: -create-workers=%d: want at least 1", *workers)
	}
	for _, m := range strings.Split(*modes, ",") {
		if m != "lease" && m != "report" {
			log.Fatalf("bench/probers: -modes=%q: want lease and/or report, comma-separated", *modes)
		}
	}
	if err := run(); err != nil {
		log.Fatalf("bench/probers: %v", err)
	}
}

func run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	klog.SetOutput(os.Stderr)
	if err := loopnodes.RaiseFileLimit(uint64(*agents+2**services)*2 + 4096); err != nil {
		return err
	}

	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{NoKubeProxy: true, NodeGracePeriod: time.Hour, ControlPlaneQPS: 400})
	if err != nil {
		return fmt.Errorf("starting the harness: %w", err)
	}
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			log.Printf("stopping the harness: %v", err)
		}
	}()
	log.Printf("control plane up in %s (dir %s)", time.Since(began).Round(time.Millisecond), c.Dir)

	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating dynamic client: %w", err)
	}
	if err := c.CreateNamespaces(ctx, systemNS, benchNS); err != nil {
		return err
	}
	if err := deploy.InstallProbeReportCRD(ctx, dyn, systemNS); err != nil {
		return err
	}
	nodes, err := setup(ctx, cs)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := n.Listen(ctx, beaconPort); err != nil {
			return err
		}
	}
	log.Printf("%d nodes, prober pods and beacons; %d Services with %d proxy pods and listeners; set up in %s",
		len(nodes), *services, 2**services, time.Since(began).Round(time.Second))

	ctl, err := startController(ctx, c)
	if err != nil {
		return err
	}
	defer func() { _ = ctl.Stop(10 * time.Second) }()

	log.Printf("baseline: %s without agents", *baseline)
	before, err := scrape(ctx, cs)
	if err != nil {
		return err
	}
	time.Sleep(*baseline) // a measurement window, not synchronisation
	after, err := scrape(ctx, cs)
	if err != nil {
		return err
	}
	base := after.sub(before)

	var results []result
	for _, mode := range strings.Split(*modes, ",") {
		r, err := measure(ctx, cs, dyn, nodes, ctl.Pid(), mode, base)
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		results = append(results, r)
		// Each mode's numbers as soon as they are measured, in case a
		// later one fails; the tables at the end hold them all.
		log.Printf("%s: steady %+v; failover %+v; %s to 2 Down votes; controller %.3f cores; heap per agent %d B; report writes by reason: steady %v, failover %v",
			mode, r.steady.pick(), r.failover.pick(), r.failoverTime, r.controllerCPU, r.heapPerAgent, r.steadyReasons, r.failoverReasons)
	}
	printResults(base, results)
	return nil
}
