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
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
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

	createClient, err := newCreateClient(c)
	if err != nil {
		return err
	}
	cpuBefore := sampler.cpu()
	machineBefore, err := procstat.ReadMachine()
	if err != nil {
		return err
	}
	procsBefore := processCPU()
	reqBefore, err := apiRequests(ctx, c.Client)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := createServices(ctx, createClient, tr, nil); err != nil {
		return err
	}
	created := time.Since(start)
	log.Printf("created %d Services in %s", *services, created.Round(time.Millisecond))

	deadline := time.Now().Add(*timeout)
	for {
		if err := ctl.Alive(); err != nil {
			return err
		}
		published, ready := tr.counts()
		if published >= *services {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d of %d Services have a status, %d proxy Deployments ready; controller log %s",
				*timeout, published, *services, ready, ctl.LogPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			log.Printf("%6.1fs: %d Services with status, %d proxy Deployments ready, controller RSS %d MiB",
				time.Since(start).Seconds(), published, ready, sampler.rssMiB())
		}
	}
	sampler.sample()
	total := tr.lastPublished().Sub(start)
	machineAfter, err := procstat.ReadMachine()
	if err != nil {
		return err
	}
	procsAfter := processCPU()
	reqAfter, err := apiRequests(ctx, c.Client)
	if err != nil {
		return err
	}
	cpu := sampler.cpu() - cpuBefore
	peak := sampler.peakMiB()
	loadavg := loadAverage()

	// The anchor: the proxy Deployments' pods all ready, from the first
	// Deployment the controller created. A Service is published with its
	// first ready pod, so the last Deployments may still be finishing.
	for {
		if _, ready := tr.counts(); ready >= *services || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	anchorStart, anchorEnd, anchorOK := tr.deploymentSpan(*services)

	fmt.Println()
	fmt.Printf("pulselb controller, %d LoadBalancer Services on %d light nodes (%s)\n", *services, *lightNodes, setting())
	fmt.Printf("  Services created in        %8.1f s (client limit %.0f/s, %d in parallel, NodePorts %v)\n", created.Seconds(), *createQPS, *creators, *nodePorts)
	fmt.Printf("  every status set after     %8.1f s (target %s) %s\n", total.Seconds(), *targetTime, verdict(total <= *targetTime))
	fmt.Printf("  per Service, creation to status: %s\n", quantiles(tr.latencies()))
	fmt.Printf("  controller CPU             %8.1f s (%.2f cores on average)\n", cpu.Seconds(), cpu.Seconds()/total.Seconds())
	fmt.Printf("  controller peak RSS        %8d MiB (target %d MiB) %s\n", peak, *targetRSS, verdict(peak <= int64(*targetRSS)))
	fmt.Printf("  machine CPU busy           %8.0f %% of %d CPUs over the run; load average after: %s\n",
		machineAfter.BusyPercent(machineBefore), runtime.NumCPU(), loadavg)
	fmt.Printf("  CPU by process over the run: %s\n", cpuByProcess(procsBefore, procsAfter))
	fmt.Printf("  API server requests over the run: %s\n", reqAfter.summary(reqBefore))
	if anchorOK {
		anchor := anchorEnd.Sub(anchorStart)
		fmt.Printf("  anchor: proxy Deployments all ready %8.1f s after the first was created (kube-controller-manager + scheduler)\n", anchor.Seconds())
		fmt.Printf("  ratio: every status / anchor = %.2f; first Deployment %.1f s after the first Service\n",
			total.Seconds()/anchor.Seconds(), anchorStart.Sub(start).Seconds())
	} else {
		fmt.Println("  anchor: not every proxy Deployment reported ready replicas; no ratio")
	}
	if m, err := cluster.ScrapeMetrics(ctl.MetricsURL()); err == nil {
		var writes, syncs float64
		var detail []string
		for series, v := range m {
			switch {
			case strings.HasPrefix(series, "pulselb_controller_writes_total{"):
				writes += v
				detail = append(detail, fmt.Sprintf("%s=%.0f", strings.TrimPrefix(series, "pulselb_controller_writes_total"), v))
			case strings.HasPrefix(series, `pulselb_controller_sync_duration_seconds_count{queue="services"`):
				syncs += v
			}
		}
		slices.Sort(detail)
		fmt.Printf("  controller: %.0f syncs, %.0f writes (%.1f per Service, Events not counted): %s\n",
			syncs, writes, writes/float64(*services), strings.Join(detail, " "))
	} else {
		fmt.Printf("  controller metrics: %v\n", err)
	}
	fmt.Printf("  controller log: %s\n", ctl.LogPath)
	if *proberRSS > 0 {
		rss, err := measureProber(ctx, c)
		if err != nil {
			return err
		}
		fmt.Printf("  prober peak RSS            %8d MiB (one pulselb prober, its caches filled with the same Services, Nodes and proxy pods, over %s)\n", rss, *proberRSS)
	}
	return nil
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

// runFloor measures the control plane alone (-floor): each Service's proxy
// Deployment is created by the creating goroutine instead of the
// controller, and the run ends when every Deployment is ready.
func runFloor(ctx context.Context, c *cluster.Cluster, tr *tracker) error {
	nodes, err := readyNodes(ctx, c.Client)
	if err != nil {
		return err
	}
	// The controller's defaults with the flags startController passes.
	cfg := placement.Config{
		Namespace:         systemNamespace,
		Image:             "pulselb",
		ImagePullPolicy:   corev1.PullIfNotPresent,
		PriorityClassName: placement.DefaultPriorityClassName,
		ProxyMode:         placement.DefaultProxyMode,
	}
	createClient, err := newCreateClient(c)
	if err != nil {
		return err
	}
	createDeployment := func(ctx context.Context, svc *corev1.Service) error {
		w, problems := placement.Desired(svc, nodes, cfg)
		if len(problems) > 0 || w.Deployment == nil {
			return fmt.Errorf("service %s: want a proxy Deployment and no problems, got mode %q, problems %v", svc.Name, w.Mode, problems)
		}
		d, err := createClient.AppsV1().Deployments(systemNamespace).Create(ctx, w.Deployment, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating deployment %s/%s: %w", systemNamespace, w.Deployment.Name, err)
		}
		tr.deploymentCreatedAt(w.Deployment.Name, time.Now())
		// The controller also creates each Deployment's budget, owned by
		// the Deployment, as soon as it exists.
		if w.Budget != nil {
			b := w.Budget.DeepCopy()
			b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, BlockOwnerDeletion: ptr.To(true)}}
			if _, err := createClient.PolicyV1().PodDisruptionBudgets(systemNamespace).Create(ctx, b, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating budget %s/%s: %w", systemNamespace, b.Name, err)
			}
		}
		return nil
	}

	// The harness' own cost before any object: the light nodes' heartbeats
	// and the control plane's idle loops.
	var idle string
	if *idleWindow > 0 {
		machineBefore, err := procstat.ReadMachine()
		if err != nil {
			return err
		}
		procsBefore := processCPU()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*idleWindow): // a measurement window, not synchronisation
		}
		machineAfter, err := procstat.ReadMachine()
		if err != nil {
			return err
		}
		idle = fmt.Sprintf("machine %.0f %% busy over %s; %s", machineAfter.BusyPercent(machineBefore), *idleWindow, cpuByProcess(procsBefore, processCPU()))
	}

	machineBefore, err := procstat.ReadMachine()
	if err != nil {
		return err
	}
	procsBefore := processCPU()
	reqBefore, err := apiRequests(ctx, c.Client)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := createServices(ctx, createClient, tr, createDeployment); err != nil {
		return err
	}
	created := time.Since(start)
	log.Printf("created %d Services and %d proxy Deployments in %s", *services, *services, created.Round(time.Millisecond))

	deadline := time.Now().Add(*timeout)
	for {
		_, ready := tr.counts()
		if ready >= *services {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d of %d proxy Deployments ready", *timeout, ready, *services)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			log.Printf("%6.1fs: %d of %d proxy Deployments ready", time.Since(start).Seconds(), ready, *services)
		}
	}
	machineAfter, err := procstat.ReadMachine()
	if err != nil {
		return err
	}
	procsAfter := processCPU()
	reqAfter, err := apiRequests(ctx, c.Client)
	if err != nil {
		return err
	}
	loadavg := loadAverage()
	_, last, _ := tr.deploymentSpan(*services)
	total := last.Sub(start)

	fmt.Println()
	fmt.Printf("control plane alone (no pulselb), %d Services + %d proxy Deployments on %d light nodes (%s)\n",
		*services, *services, *lightNodes, setting())
	fmt.Printf("  Services and Deployments created in   %8.1f s (client limit %.0f/s for both, %d in parallel, NodePorts %v)\n",
		created.Seconds(), *createQPS, *creators, *nodePorts)
	fmt.Printf("  every proxy Deployment ready after    %8.1f s (from the first creation; pulselb's target is %s)\n",
		total.Seconds(), *targetTime)
	fmt.Printf("  per Deployment, creation to ready: %s\n", quantiles(tr.deploymentLatencies()))
	fmt.Printf("  machine CPU busy           %8.0f %% of %d CPUs over the run; load average after: %s\n",
		machineAfter.BusyPercent(machineBefore), runtime.NumCPU(), loadavg)
	fmt.Printf("  CPU by process over the run: %s\n", cpuByProcess(procsBefore, procsAfter))
	fmt.Printf("  API server requests over the run: %s\n", reqAfter.summary(reqBefore))
	if idle != "" {
		fmt.Printf("  idle harness before the creations: %s\n", idle)
	}
	return nil
}

// selfName names this program in cpuByProcess: it runs the light nodes'
// simulator, the informers of the tracker and the creating goroutines.
const selfName = "bench (light nodes, watches, creations)"

// processCPU returns the CPU time used so far by this program and by each of
// its child processes (the harness' control plane), by name.
func processCPU() map[string]time.Duration {
	self := os.Getpid()
	out := map[string]time.Duration{selfName: newSampler(self).cpu()}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentPID(pid) != self {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // exited
		}
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		out[filepath.Base(argv0)] += newSampler(pid).cpu()
	}
	return out
}

// parentPID returns field 4 of /proc/PID/stat, or 0.
func parentPID(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// cpuByProcess formats each process' CPU time between two processCPU
// readings, largest first.
func cpuByProcess(before, after map[string]time.Duration) string {
	type use struct {
		name string
		cpu  time.Duration
	}
	var uses []use
	for name, t := range after {
		uses = append(uses, use{name, t - before[name]})
	}
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(b.cpu, a.cpu) })
	parts := make([]string, len(uses))
	for i, u := range uses {
		parts[i] = fmt.Sprintf("%s %.1f s", u.name, u.cpu.Seconds())
	}
	return strings.Join(parts, ", ")
}

// readyNodes lists the nodes once, as the controller's cache would hold
// them, and checks that all the light nodes are there and Ready.
func readyNodes(ctx context.Context, cs kubernetes.Interface) ([]*corev1.Node, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var nodes []*corev1.Node
	ready := 0
	for i := range list.Items {
		n := &list.Items[i]
		nodes = append(nodes, n)
		if cluster.NodeReady(n) == corev1.ConditionTrue {
			ready++
		}
	}
	if len(nodes) != *lightNodes || ready != len(nodes) {
		return nil, fmt.Errorf("listing nodes: %d nodes, %d Ready; want %d light nodes, all Ready", len(nodes), ready, *lightNodes)
	}
	return nodes, nil
}

// newCreateClient returns the client of the creations, limited to
// -create-qps.
func newCreateClient(c *cluster.Cluster) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = float32(*createQPS), int(*createQPS)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return cs, nil
}

// setting describes the machine and the control plane for a result's
// title.
func setting() string {
	return fmt.Sprintf("%d CPUs, %s; scheduler and controller-manager at %g requests/s", runtime.NumCPU(), runtime.Version(), *cpQPS)
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// quantiles formats the p50, p90, p99 and max of sorted durations.
func quantiles(sorted []time.Duration) string {
	return fmt.Sprintf("p50 %.1f s, p90 %.1f s, p99 %.1f s, max %.1f s",
		quantile(sorted, 0.5).Seconds(), quantile(sorted, 0.9).Seconds(), quantile(sorted, 0.99).Seconds(), quantile(sorted, 1).Seconds())
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// createServices creates *services Services with *creators goroutines
// sharing a client limited to *createQPS. Unless then is nil, each
// goroutine calls it with the created Service right after its creation.
func createServices(ctx context.Context, cs kubernetes.Interface, tr *tracker, then func(context.Context, *corev1.Service) error) error {
	var next atomic.Int64
	errs := make(chan error, *creators)
	var wg sync.WaitGroup
	for range *creators {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= *services {
					return
				}
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d", i), Namespace: benchNamespace},
					Spec: corev1.ServiceSpec{
						Type:                          corev1.ServiceTypeLoadBalancer,
						AllocateLoadBalancerNodePorts: ptr.To(*nodePorts),
						Selector:                      map[string]string{"app": "none"},
						Ports: []corev1.ServicePort{{Name: "p", Port: int32(firstPort + i),
							TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
					},
				}
				got, err := cs.CoreV1().Services(benchNamespace).Create(ctx, svc, metav1.CreateOptions{})
				if err != nil {
					errs <- fmt.Errorf("creating service %s: %w", svc.Name, err)
					return
				}
				tr.created(svc.Name, time.Now())
				if then != nil {
					if err := then(ctx, got); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() []error {
		var out []error
		for err := range errs {
			out = append(out, err)
		}
		return out
	}()...)
}

// tracker records when each Service first had ingress and when each proxy
// Deployment was first seen and first had all replicas ready.
type tracker struct {
	mu            sync.Mutex
	createdAt     map[string]time.Time // when Create returned
	published     map[string]time.Time
	deployCreated map[string]time.Time // when the informer first saw it
	deployReady   map[string]time.Time
	// deployCreatedAt is when Create returned, for the Deployments this
	// program creates (-floor).
	deployCreatedAt map[string]time.Time
	lastPublishedT  time.Time
}

func newTracker() *tracker {
	return &tracker{createdAt: map[string]time.Time{}, published: map[string]time.Time{}, deployCreated: map[string]time.Time{}, deployReady: map[string]time.Time{}, deployCreatedAt: map[string]time.Time{}}
}

func (tr *tracker) watch(ctx context.Context, cs kubernetes.Interface) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	bench := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(benchNamespace))
	system := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(systemNamespace))
	onService := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		now := time.Now()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if _, seen := tr.published[svc.Name]; !seen {
			tr.published[svc.Name] = now
			tr.lastPublishedT = now
		}
	}
	onDeployment := func(obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		now := time.Now()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if _, seen := tr.deployCreated[d.Name]; !seen {
			// The informer sees a Deployment a moment after it is
			// created; its creationTimestamp has only second precision.
			tr.deployCreated[d.Name] = now
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if _, seen := tr.deployReady[d.Name]; !seen && d.Status.ReadyReplicas >= want && d.Status.ObservedGeneration >= d.Generation {
			tr.deployReady[d.Name] = now
		}
	}
	if _, err := bench.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onService, UpdateFunc: func(_, obj any) { onService(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching services: %w", err)
	}
	if _, err := system.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onDeployment, UpdateFunc: func(_, obj any) { onDeployment(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching deployments: %w", err)
	}
	bench.Start(ctx.Done())
	system.Start(ctx.Done())
	for typ, ok := range bench.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			return nil, fmt.Errorf("syncing %v informer", typ)
		}
	}
	for typ, ok := range system.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			return nil, fmt.Errorf("syncing %v informer", typ)
		}
	}
	return func() {
		cancel()
		bench.Shutdown()
		system.Shutdown()
	}, nil
}

func (tr *tracker) created(name string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.createdAt[name] = at
}

func (tr *tracker) deploymentCreatedAt(name string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.deployCreatedAt[name] = at
}

// latencies returns, sorted, each Service's time from its creation to its
// first status. A status seen before Create returned counts as zero.
func (tr *tracker) latencies() []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return spans(tr.createdAt, tr.published)
}

// deploymentLatencies returns, sorted, each Deployment's time from its
// Create returning to all its replicas ready (-floor).
func (tr *tracker) deploymentLatencies() []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return spans(tr.deployCreatedAt, tr.deployReady)
}

// spans returns, sorted, end minus start of every name in both maps; an end
// before its start counts as zero.
func spans(start, end map[string]time.Time) []time.Duration {
	var out []time.Duration
	for name, e := range end {
		if s, ok := start[name]; ok {
			out = append(out, max(0, e.Sub(s)))
		}
	}
	slices.Sort(out)
	return out
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (tr *tracker) counts() (published, ready int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.published), len(tr.deployReady)
}

func (tr *tracker) lastPublished() time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.lastPublishedT
}

// deploymentSpan returns the first Deployment's creation and the last
// one's readiness, once n Deployments are ready.
func (tr *tracker) deploymentSpan(n int) (first, last time.Time, ok bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.deployReady) < n {
		return first, last, false
	}
	for _, t := range tr.deployCreated {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	for _, t := range tr.deployReady {
		if t.After(last) {
			last = t
		}
	}
	return first, last, true
}

// startController runs the pulselb controller under test, with the
// flags of -controller-args, and waits until it serves metrics.
func startController(ctx context.Context, c *cluster.Cluster) (*scenario.Controller, error) {
	p, err := scenario.StartController(ctx, c, scenario.ControllerOptions{
		Namespace: systemNamespace, Ready: 30 * time.Second,
		Args: append([]string{"--probe-reports=false"}, strings.Fields(*ctlArgs)...),
	})
	if err != nil {
		return nil, err
	}
	log.Printf("pulselb controller %s (pid %d), log %s", strings.Join(p.Args, " "), p.Pid(), p.LogPath)
	return p, nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// sampler follows a process' CPU time and peak RSS.
type sampler struct {
	pid     int
	mu      sync.Mutex
	ticks   int64 // utime+stime, clock ticks
	rss     int64 // KiB
	peakHWM int64 // KiB
}

func newSampler(pid int) *sampler {
	s := &sampler{pid: pid}
	s.sample()
	return s
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample reads /proc/PID/stat and /proc/PID/status; a process that exited
// keeps its last values.
func (s *sampler) sample() {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid))
	if err != nil {
		return
	}
	// Fields after the command, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	var rss, hwm int64
	if st, err := os.Open(fmt.Sprintf("/proc/%d/status", s.pid)); err == nil {
		sc := bufio.NewScanner(st)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "VmRSS":
				rss = n
			case "VmHWM":
				hwm = n
			}
		}
		st.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ticks = utime + stime
	s.rss = rss
	s.peakHWM = max(s.peakHWM, hwm)
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func (s *sampler) cpu() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.ticks) * time.Second / clockTicks
}

func (s *sampler) rssMiB() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss / 1024
}

func (s *sampler) peakMiB() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakHWM / 1024
}
