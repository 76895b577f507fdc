// Command controller measures `pulselb controller` at scale on the harness
// (run as root): a real control plane with light nodes (heartbeats only,
// pods reported Running and Ready without processes), the controller as a
// process, and N LoadBalancer Services created in parallel at a bounded
// client rate. It reports the time from the first creation until every
// Service has status.loadBalancer.ingress, the controller's CPU time
// (/proc/PID/stat utime+stime) and peak RSS (/proc/PID/status VmHWM), and
// the machine's load.
//
// Anchor, from the same run: the time from the first proxy Deployment's
// creation until every proxy Deployment has all its replicas ready — the
// kube-controller-manager's Deployment and ReplicaSet controllers, the
// scheduler and the node simulator creating, placing and starting the
// N×replicas proxy pods. The controller cannot publish a Service before its
// pods are ready, so this is the floor under pulselb's own time; the ratio
// says how much the controller adds.
//
// Each Service has its own port (10000+i): every proxy pod holds its
// Service ports as host ports, so Services sharing a port could not all be
// placed on the nodes. By default the Services allocate no NodePorts:
// pulselb's proxies forward to the ClusterIP and do not need them, and the
// apiserver's NodePort allocator, one bitmap in one etcd key, serializes
// the creations (about 5 s per create at 16 in parallel on a loaded 2-core
// machine), which would measure the apiserver rather than pulselb.
//
// With -floor the controller does not run. Instead each creating goroutine,
// right after creating a Service, creates the proxy Deployment the
// controller would create for it: placement.Desired of the Service that
// Create returned (with its ClusterIP), the nodes listed once before the
// creations, and the controller's default placement.Config with
// --proxy-image=pulselb as this benchmark passes it. Services and
// Deployments share one client and its -create-qps limit. It reports the
// time from the first creation until every proxy Deployment has all its
// replicas ready, each Deployment's time from creation to ready, and the
// machine's load: what the control plane alone costs on this machine for
// the same pods, the floor under the controller's time. It also reports
// the CPU time of this program (which simulates the light nodes) and of
// each control-plane process, over the run and, first, over -floor-idle
// before any object is created.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/test/cluster"
)

const (
	systemNamespace = "pulselb-system"
	benchNamespace  = "bench"
	firstPort       = 10000
)

var (
	services   = flag.Int("services", 2000, "LoadBalancer Services to create")
	lightNodes = flag.Int("nodes", 200, "light nodes")
	createQPS  = flag.Float64("create-qps", 200, "client rate limit of the Service creations")
	creators   = flag.Int("creators", 16, "parallel creating goroutines")
	timeout    = flag.Duration("timeout", 10*time.Minute, "give up waiting for the statuses after this long")
	targetTime = flag.Duration("target-time", 60*time.Second, "target for every status set")
	targetRSS  = flag.Int("target-rss-mib", 300, "target for the controller's peak RSS")
	keepDir    = flag.String("dir", "", "cluster directory (kept, with the controller's log); default a new temporary one")
	ctlArgs    = flag.String("controller-args", "", "extra flags for pulselb controller, space-separated")
	cpQPS      = flag.Float64("control-plane-qps", 400, "client rate limit of the harness' kube-scheduler and kube-controller-manager (0: Kubernetes' defaults, 50 and 20, which make the ReplicaSet controller the bottleneck)")
	proberRSS  = flag.Duration("prober-rss", 20*time.Second, "after the statuses, run one pulselb prober against the same objects for this long and report its peak RSS (0: not)")
	nodePorts  = flag.Bool("node-ports", false, "allocate NodePorts for the Services (spec.allocateLoadBalancerNodePorts); the apiserver's NodePort allocator serializes creations on one etcd key")
	idleWindow = flag.Duration("floor-idle", 10*time.Second, "with -floor, first measure the idle harness' CPU use for this long (0: not)")
	floor      = flag.Bool("floor", false, "do not run pulselb: create each Service's proxy Deployment (placement.Desired) right after the Service and measure until every Deployment is ready: the control plane alone")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if os.Geteuid() != 0 {
		log.Fatal("bench/controller: needs root for the harness")
	}
	switch {
	case *services < 1 || *services > 50000:
		log.Fatalf("bench/controller: -services=%d: want 1..50000", *services)
	case *lightNodes < 1:
		log.Fatalf("bench/controller: -nodes=%d: want at least 1", *lightNodes)
	case *createQPS <= 0 || *creators < 1:
		log.Fatalf("bench/controller: -create-qps=%v -creators=%d: both must be positive", *createQPS, *creators)
	case *idleWindow < 0:
		log.Fatalf("bench/controller: -floor-idle=%s: want 0 or more", *idleWindow)
	case *floor && *ctlArgs != "":
		log.Fatalf("bench/controller: -controller-args=%q: no controller runs with -floor", *ctlArgs)
	}
	if err := run(); err != nil {
		log.Fatalf("bench/controller: %v", err)
	}
}

// run starts the harness and the tracker (setup.go), then either the
// floor (floor.go) or the controller, measured (measure.go) and reported
// (report.go).
func run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	klog.SetOutput(os.Stderr)

	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: *keepDir, LightNodes: *lightNodes, NoKubeProxy: true, ControlPlaneQPS: float32(*cpQPS)})
	if err != nil {
		return fmt.Errorf("starting the harness: %w", err)
	}
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			log.Printf("stopping the harness: %v", err)
		}
	}()
	log.Printf("harness with %d light nodes up in %s (dir %s)", *lightNodes, time.Since(began).Round(time.Millisecond), c.Dir)

	if err := c.CreateNamespaces(ctx, systemNamespace, benchNamespace); err != nil {
		return err
	}

	// The watcher's own client, so that its lists do not queue behind the
	// creations.
	watchCfg := rest.CopyConfig(c.RESTConfig)
	watchCfg.QPS, watchCfg.Burst = 50, 100
	watchClient, err := kubernetes.NewForConfig(watchCfg)
	if err != nil {
		return fmt.Errorf("creating watch client: %w", err)
	}
	tr := newTracker()
	stopInformers, err := tr.watch(ctx, watchClient)
	if err != nil {
		return err
	}
	defer stopInformers()

	if *floor {
		return runFloor(ctx, c, tr)
	}

	ctl, err := startController(ctx, c)
	if err != nil {
		return err
	}
	defer func() { _ = ctl.Stop(15 * time.Second) }()
	sampler := newSampler(ctl.Pid())
	go sampler.run(ctx, 250*time.Millisecond)

	m, err := measureController(ctx, c, ctl, sampler, tr)
	if err != nil {
		return err
	}
	m.report()
	if *proberRSS > 0 {
		rss, err := measureProber(ctx, c)
		if err != nil {
			return err
		}
		fmt.Printf("  prober peak RSS            %8d MiB (one pulselb prober, its caches filled with the same Services, Nodes and proxy pods, over %s)\n", rss, *proberRSS)
	}
	return nil
}
