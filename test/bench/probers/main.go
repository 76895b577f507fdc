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
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/test/bench/apimetrics"
	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
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

// nodeName and nodeIP name node i and give its loopback address.
func nodeName(i int) string { return fmt.Sprintf("bn-%05d", i) }
func nodeIP(i int) string   { return fmt.Sprintf("127.%d.%d.%d", 1+i/62500, i/250%250, 1+i%250) }

// node is one simulated node: its listeners, closed while it is blackholed.
type node struct {
	ip    string
	ports []int
	mu    sync.Mutex
	lns   []net.Listener
}

// listen opens the node's beacon and proxy listeners, each accepting and
// closing connections until closed.
func (n *node) listen(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range append([]int{beaconPort}, n.ports...) {
		ln, err := net.Listen("tcp", net.JoinHostPort(n.ip, strconv.Itoa(p)))
		if err != nil {
			return fmt.Errorf("listening on %s:%d: %w", n.ip, p, err)
		}
		n.lns = append(n.lns, ln)
		go func() { _ = agent.ServeBeacon(ctx, ln, 0) }()
	}
	return nil
}

// blackhole closes every listener of the node: probes are refused.
func (n *node) blackhole() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ln := range n.lns {
		ln.Close()
	}
	n.lns = nil
}

func run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	klog.SetOutput(os.Stderr)
	if err := raiseFileLimit(); err != nil {
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
		if err := n.listen(ctx); err != nil {
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

// setup creates the nodes, prober pods, Services and proxy pods.
func setup(ctx context.Context, cs kubernetes.Interface) ([]*node, error) {
	nodes := make([]*node, *agents)
	for i := range nodes {
		nodes[i] = &node{ip: nodeIP(i)}
	}
	for s := range *services {
		for _, i := range []int{s % *agents, (s + *agents/2) % *agents} {
			nodes[i].ports = append(nodes[i].ports, firstPort+s)
		}
	}
	err := parallel(ctx, *agents, func(i int) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %d: %w", i, err)
		}
		// The node lifecycle controller updates a new node too.
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, nodeName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP(i)}}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Benchmark",
				LastHeartbeatTime: now, LastTransitionTime: now}}
			_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("making node %d Ready: %w", i, err)
		}
		return createReadyPod(ctx, cs, "pulselb-prober-"+nodeName(i), nodeName(i),
			map[string]string{contract.LabelAppName: contract.ProberAppName})
	})
	if err != nil {
		return nil, err
	}
	err = parallel(ctx, *services, func(s int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("svc-%05d", s),
				Annotations: map[string]string{contract.AnnotationProbeInterval: probeInterval.String()}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
				Ports: []corev1.ServicePort{{Name: "tcp", Port: int32(firstPort + s), Protocol: corev1.ProtocolTCP}}},
		}
		svc, err := cs.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Service %d: %w", s, err)
		}
		for k, i := range []int{s % *agents, (s + *agents/2) % *agents} {
			if err := createReadyPod(ctx, cs, fmt.Sprintf("pulselb-%s-%d", svc.Name, k), nodeName(i), contract.ProxySelector(svc)); err != nil {
				return err
			}
		}
		return nil
	})
	return nodes, err
}

// createReadyPod creates a pod on node and reports it Running and Ready, as
// a kubelet would.
func createReadyPod(ctx context.Context, cs kubernetes.Interface, name, node string, labels map[string]string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pulselb"}}},
	}
	if _, err := cs.CoreV1().Pods(systemNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := cs.CoreV1().Pods(systemNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = cs.CoreV1().Pods(systemNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("making pod %s Ready: %w", name, err)
	}
	return nil
}

// parallel calls f(0..n-1) on *workers goroutines and returns the first
// error.
func parallel(ctx context.Context, n int, f func(int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, *workers)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// result is one mode's measurements.
type result struct {
	mode             string
	steady, failover rates
	// steadyReasons and failoverReasons count the agents' report writes
	// in each window by reason (pulselb_prober_report_write_reasons_total).
	steadyReasons, failoverReasons map[string]float64
	// steadyRefreshes and failoverRefreshes count the agents' target
	// recomputations in each window (pulselb_prober_target_refreshes_total).
	steadyRefreshes, failoverRefreshes float64
	failoverTime                       time.Duration
	controllerCPU                      float64 // cores, over the steady window
	heapPerAgent, rssBase              uint64
	rssAgents                          uint64
}

// measure runs the agents in mode and measures the steady state and a
// failover.
func measure(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, nodes []*node, ctlPid int, mode string, base rates) (result, error) {
	r := result{mode: mode}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse
	r.rssBase = rss()

	agentMetrics := agent.NewMetrics()
	agentRegistry := prometheus.NewRegistry()
	if err := agentMetrics.RegisterMetrics(agentRegistry); err != nil {
		return r, err
	}
	counts := func() (map[string]float64, float64) { return agentCounts(agentRegistry) }
	actx, stop := context.WithCancel(ctx)
	cluster := informers.NewSharedInformerFactory(cs, 0)
	system := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(systemNS))
	reports := v1alpha1.NewClient(dyn)
	probeMetrics := prober.NewMetrics()
	var wg sync.WaitGroup
	// Stop the agents, then the informers, whose Shutdown waits for the
	// stop channel.
	defer func() {
		stop()
		wg.Wait()
		cluster.Shutdown()
		system.Shutdown()
	}()
	// One vantage memo for all agents: each agent assigns the same targets
	// from the same candidates, and computing that once per agent would
	// cost this process agents × targets × candidates hashes per change.
	memo := &contract.VantageMemo{}
	var as []*agent.Agent
	for i := range nodes {
		// Each agent probes from its own node's address, as a prober pod
		// does: from one address, 1,000 agents' probes would share one
		// range of ephemeral ports and fill it with TIME-WAIT sockets.
		cfg := agent.Config{Node: nodeName(i), Namespace: systemNS, Vantages: contract.DefaultVantages, VantageMemo: memo, BeaconPort: beaconPort, Metrics: agentMetrics,
			Scheduler:   prober.Config{Interval: *beaconInterval, Metrics: probeMetrics},
			SourceAddrs: []netip.Addr{netip.MustParseAddr(nodeIP(i))}}
		if mode == "lease" {
			cfg.Leases = cs.CoordinationV1().Leases(systemNS)
		}
		a, err := agent.New(actx, cluster, system, reports, cfg)
		if err != nil {
			return r, err
		}
		as = append(as, a)
	}
	cluster.Start(actx.Done())
	system.Start(actx.Done())
	for _, a := range as {
		wg.Go(func() {
			if err := a.Run(actx); err != nil {
				log.Printf("agent stopped: %v", err)
			}
		})
	}
	started := time.Now()
	log.Printf("%s: %d agents started; waiting for every report", mode, len(as))
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		list, err := reports.List(ctx, systemNS, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		fresh := 0
		for _, rep := range list.Items {
			if rep.Status.HeartbeatTime.After(started) {
				fresh++
			}
		}
		return fresh == len(as), nil
	}); err != nil {
		return r, fmt.Errorf("waiting for every agent's report: %w", err)
	}
	log.Printf("%s: every agent wrote its report after %s; warming up %s", mode, time.Since(started).Round(time.Second), *warmup)
	time.Sleep(*warmup) // lets every target conclude; a measurement setting, not synchronisation

	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > heapBefore {
		r.heapPerAgent = (ms.HeapInuse - heapBefore) / uint64(len(as))
	}
	r.rssAgents = rss()

	log.Printf("%s: measuring %s of steady state", mode, *window)
	cpu0, err := procstat.CPUSeconds(ctlPid)
	if err != nil {
		return r, fmt.Errorf("reading the controller's CPU time: %w", err)
	}
	before, err := scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	reasons0, refreshes0 := counts()
	time.Sleep(*window) // the measurement window
	after, err := scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	reasons1, refreshes1 := counts()
	r.steadyReasons, r.steadyRefreshes = subReasons(reasons1, reasons0), refreshes1-refreshes0
	cpu1, err := procstat.CPUSeconds(ctlPid)
	if err != nil {
		return r, fmt.Errorf("reading the controller's CPU time: %w", err)
	}
	r.controllerCPU = (cpu1 - cpu0) / window.Seconds()
	// Logged at once: a later step may fail and lose the rest.
	log.Printf("%s: steady %+v; controller %.3f cores; report writes by reason %v; target recomputations %.0f", mode, after.sub(before).minus(base).pick(),
		r.controllerCPU, r.steadyReasons, r.steadyRefreshes)
	r.steady = after.sub(before).minus(base)

	// Failover: node 0 stops answering; its 3 beacon vantages see it.
	victim := nodes[0]
	before, err = scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	reasons0, refreshes0 = counts()
	t0 := time.Now()
	victim.blackhole()
	log.Printf("%s: blackholed %s (%s)", mode, nodeName(0), victim.ip)
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := beaconDownVotes(ctx, reports, nodeName(0))
		return n >= 2, err
	}); err != nil {
		return r, fmt.Errorf("waiting for 2 Down votes on %s: %w", nodeName(0), err)
	}
	r.failoverTime = time.Since(t0)
	if rest := *failoverWindow - time.Since(t0); rest > 0 {
		time.Sleep(rest) // the rest of the measurement window
	}
	after, err = scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	r.failover = after.sub(before).minus(base)
	reasons1, refreshes1 = counts()
	r.failoverReasons, r.failoverRefreshes = subReasons(reasons1, reasons0), refreshes1-refreshes0
	log.Printf("%s: failover %+v; report writes by reason %v; target recomputations %.0f", mode, r.failover.pick(), r.failoverReasons, r.failoverRefreshes)
	log.Printf("%s: 2 of 3 vantages reported %s Down after %s", mode, nodeName(0), r.failoverTime.Round(time.Millisecond))
	if err := victim.listen(ctx); err != nil {
		return r, err
	}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := beaconDownVotes(ctx, reports, nodeName(0))
		return n == 0, err
	}); err != nil {
		return r, fmt.Errorf("waiting for %s to recover: %w", nodeName(0), err)
	}
	return r, nil
}

// beaconDownVotes counts the reports that say node's beacon is Down.
func beaconDownVotes(ctx context.Context, reports *v1alpha1.Client, node string) (int, error) {
	list, err := reports.List(ctx, systemNS, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range list.Items {
		for _, b := range r.Status.Beacons {
			if b.Node == node && b.State == v1alpha1.StateDown {
				n++
			}
		}
	}
	return n, nil
}

// waitFor polls cond every 250 ms until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		switch {
		case err != nil && !apierrors.IsTooManyRequests(err):
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("not after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// counters are the API server's counters of one resource.
type counters struct {
	writes, bodyBytes, watchEvents, watchBytes float64
}

// snapshot is the API server's counters by resource, and when they were
// asked for.
type snapshot struct {
	at  time.Time
	res map[string]counters
}

// rates are counters per second by resource.
type rates map[string]counters

// scrape reads the API server's counters by resource.
func scrape(ctx context.Context, cs kubernetes.Interface) (snapshot, error) {
	at := time.Now()
	metrics, err := apimetrics.Read(ctx, cs)
	if err != nil {
		return snapshot{}, err
	}
	out := snapshot{at: at, res: map[string]counters{}}
	add := func(name string, keep func(l map[string]string) bool, field func(*counters) *float64) {
		for _, m := range metrics[name] {
			res := m.Labels["resource"]
			if res == "" || (keep != nil && !keep(m.Labels)) {
				continue
			}
			c := out.res[res]
			*field(&c) += m.Value
			out.res[res] = c
		}
	}
	add("apiserver_request_total", func(l map[string]string) bool {
		return (l["verb"] == "POST" || l["verb"] == "PUT" || l["verb"] == "PATCH") && l["subresource"] == ""
	}, func(c *counters) *float64 { return &c.writes })
	add("apiserver_request_body_size_bytes", nil, func(c *counters) *float64 { return &c.bodyBytes })
	add("apiserver_watch_events_total", nil, func(c *counters) *float64 { return &c.watchEvents })
	add("apiserver_watch_events_sizes", nil, func(c *counters) *float64 { return &c.watchBytes })
	return out, nil
}

// sub returns the rates from before to s, over the time between the two
// requests (a scrape of a busy API server takes seconds).
func (s snapshot) sub(before snapshot) rates {
	out := rates{}
	sec := s.at.Sub(before.at).Seconds()
	for res, a := range s.res {
		b := before.res[res]
		out[res] = counters{(a.writes - b.writes) / sec, (a.bodyBytes - b.bodyBytes) / sec,
			(a.watchEvents - b.watchEvents) / sec, (a.watchBytes - b.watchBytes) / sec}
	}
	return out
}

// pick returns the rates of the resources the heartbeats write.
func (r rates) pick() map[string]counters {
	return map[string]counters{"leases": r["leases"], "probereports": r["probereports"]}
}

// minus returns r less the baseline rates, never below 0.
func (r rates) minus(base rates) rates {
	out := rates{}
	for res, a := range r {
		b := base[res]
		out[res] = counters{max(0, a.writes-b.writes), max(0, a.bodyBytes-b.bodyBytes), max(0, a.watchEvents-b.watchEvents), max(0, a.watchBytes-b.watchBytes)}
	}
	return out
}

func printResults(base rates, results []result) {
	fmt.Printf("\nbench/probers: %d agents, %d Services (%d proxy targets, probe interval %s, beacons %s), window %s, on %d CPUs\n",
		*agents, *services, 2**services, *probeInterval, *beaconInterval, *window, runtime.NumCPU())
	fmt.Printf("baseline (control plane alone, subtracted below): leases %.2f writes/s\n\n", base["leases"].writes)
	fmt.Println("| mode | window | resource | writes/s | writes per node per 10 s | bytes sent per write | bytes written/s | watch events/s | watch bytes/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	row := func(mode, win string, r rates) {
		for _, res := range []string{"leases", "probereports"} {
			c := r[res]
			per := 0.0
			if c.writes > 0 {
				per = c.bodyBytes / c.writes
			}
			fmt.Printf("| %s | %s | %s | %.2f | %.3f | %.0f | %.0f | %.1f | %.0f |\n", mode, win, res, c.writes,
				c.writes*10/float64(*agents), per, c.bodyBytes, c.watchEvents, c.watchBytes)
		}
	}
	for _, r := range results {
		row(r.mode, "steady", r.steady)
		row(r.mode, "failover", r.failover)
	}
	fmt.Println()
	fmt.Println("| mode | 2 of 3 vantages report the node Down after | controller CPU (cores, steady) | agent heap each | process RSS before → with agents |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %.2f s | %.3f | %.0f KiB | %d → %d MiB |\n", r.mode, r.failoverTime.Seconds(), r.controllerCPU,
			float64(r.heapPerAgent)/1024, r.rssBase>>20, r.rssAgents>>20)
	}
	fmt.Println()
	fmt.Println("| mode | window | target recomputations per agent | report writes by the agents' reason (start, heartbeat, retry; or what changed: targets, state, detail) |")
	fmt.Println("|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | steady | %.2f | %s |\n", r.mode, r.steadyRefreshes/float64(*agents), formatReasons(r.steadyReasons))
		fmt.Printf("| %s | failover | %.2f | %s |\n", r.mode, r.failoverRefreshes/float64(*agents), formatReasons(r.failoverReasons))
	}
}

// startController runs `pulselb controller` judging the node beacons only.
func startController(ctx context.Context, c *cluster.Cluster) (*scenario.Controller, error) {
	p, err := scenario.StartController(ctx, c, scenario.ControllerOptions{
		Namespace: systemNS, Ready: 60 * time.Second,
		Args: []string{"--class-only", "--probe-reports", "--dashboard=false"},
	})
	if err != nil {
		return nil, err
	}
	log.Printf("pulselb controller (pid %d), log %s", p.Pid(), p.LogPath)
	return p, nil
}

// rss returns this process' resident set size in bytes.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// raiseFileLimit lets the process hold every listener and probe socket.
func raiseFileLimit() error {
	want := uint64(*agents+2**services)*2 + 4096
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("reading the open file limit: %w", err)
	}
	if l.Cur >= want {
		return nil
	}
	l.Cur = max(l.Cur, want)
	l.Max = max(l.Max, l.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raising the open file limit to %d: %w", want, err)
	}
	return nil
}

// agentCounts reads from reg the agents' report writes by reason and
// their target recomputations, summed over the agents.
func agentCounts(reg *prometheus.Registry) (reasons map[string]float64, refreshes float64) {
	reasons = map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		log.Printf("reading agent metrics: %v", err)
		return reasons, 0
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "pulselb_prober_report_write_reasons_total":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						reasons[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		case "pulselb_prober_target_refreshes_total":
			for _, m := range mf.GetMetric() {
				refreshes += m.GetCounter().GetValue()
			}
		}
	}
	return reasons, refreshes
}

// subReasons returns a - b by reason, leaving out zeros.
func subReasons(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		if d := v - b[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func formatReasons(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}
