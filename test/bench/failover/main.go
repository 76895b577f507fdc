// Command failover measures how fast a dead node's IP leaves a Service's
// status with pulselb's health pipeline, against the readiness-only path
// that node-IP load balancers without probes (K3s ServiceLB) rely on. Run
// as root on a machine with the test harness binaries:
//
//	cd test && go run ./bench/failover [-trials 20] [-readiness-trials 2]
//
// It starts a harness cluster of four nodes with Kubernetes' default
// node-monitor-grace-period (50 s in v1.37), installs the ProbeReport CRD,
// the prober DaemonSet and `pulselb controller --probe-reports`, and
// serves one Service with two Deployment proxies.
//
//   - pulselb trials: blackhole a proxy node (every packet dropped; in the
//     harness its heartbeats continue) and time fault → the first status
//     write without its IP, watched on the API server. Then heal it and
//     wait until the Service is back on two proxies probed Up.
//
//   - readiness trials: take a proxy node down (link down, heartbeats stop)
//     and time fault → its pod of a DaemonSet (the shape of ServiceLB's
//     svclb pods) marked NotReady by the node lifecycle controller, which
//     is when a readiness-only load balancer drops the node. pulselb's time
//     is recorded in these trials too.
//
//   - installed trials (-leader-trials): the controller process is replaced
//     by deploy/base's two controller replicas on the nodes, and a Service
//     in daemonset mode has a proxy on every node. The trials alternate a
//     victim that runs the leading controller with one that runs none,
//     each timed to the status write without its address, and stay cut off
//     past the leader's renew deadline before healing.
//
// With -dual-stack the cluster and the Service are dual-stack (IPv4
// first), and each blackhole trial times the node's IPv4 and IPv6 address
// leaving the status, both printed.
//
// It prints each trial, p50 and max of each path, the ratio of the p50s,
// and the machine's load average.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

const (
	systemNS = "pulselb-system"
	appNS    = "shop"
	proxyApp = "app.kubernetes.io/name=pulselb-proxy"
	svcLBApp = "svclb"
)

var (
	trials          = flag.Int("trials", 20, "node-blackhole trials timed with pulselb")
	readinessTrials = flag.Int("readiness-trials", 2, "node-down trials timed on the readiness-only path (each waits out the grace period)")
	grace           = flag.Duration("node-grace-period", 50*time.Second, "node-monitor-grace-period of the cluster (Kubernetes v1.37 default: 50s)")
	dir             = flag.String("dir", "", "cluster directory (kept for its logs); default a new temporary directory")
	dualStack       = flag.Bool("dual-stack", false, "a dual-stack cluster and Service: time the IPv6 address leaving the status too")
	leaderTrials    = flag.Int("leader-trials", 6, "node-blackhole trials after installing deploy/base (two controller replicas on the nodes), alternating a victim that runs the leader with one that runs no controller; 0 skips them")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if *trials < 1 || *readinessTrials < 0 {
		log.Fatal("-trials must be at least 1 and -readiness-trials at least 0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	opts := cluster.Options{Dir: *dir, Nodes: 4, NodeGracePeriod: *grace, WaitForMachine: 40 * time.Minute}
	if *dualStack {
		opts.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			log.Printf("stopping the cluster: %v", err)
		}
	}()
	log.Printf("cluster up in %s (node grace period %s)", c.Dir, *grace)
	b := &bench{c: c, cs: c.Client}
	if b.dyn, err = dynamic.NewForConfig(c.RESTConfig); err != nil {
		return err
	}
	ctl, err := b.setup(ctx)
	if ctl != nil {
		defer func() { _ = ctl.Stop(15 * time.Second) }()
	}
	if err != nil {
		return err
	}

	var probed, probed6, probedDown, readiness []time.Duration
	for i := range *trials {
		d, d6, err := b.blackholeTrial(ctx)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		probed = append(probed, d)
		if *dualStack {
			probed6 = append(probed6, d6)
			log.Printf("blackhole trial %2d/%d: status without the node's IPv4 after %s, IPv6 after %s", i+1, *trials, d.Round(time.Millisecond), d6.Round(time.Millisecond))
			continue
		}
		log.Printf("blackhole trial %2d/%d: status without the node after %s", i+1, *trials, d.Round(time.Millisecond))
	}
	for i := range *readinessTrials {
		p, r, err := b.downTrial(ctx)
		if err != nil {
			return fmt.Errorf("readiness trial %d: %w", i+1, err)
		}
		probedDown, readiness = append(probedDown, p), append(readiness, r)
		log.Printf("node-down trial %d/%d: pulselb %s, readiness-only (pod NotReady) %s", i+1, *readinessTrials,
			p.Round(time.Millisecond), r.Round(time.Millisecond))
	}
	var leader, none []time.Duration
	if *leaderTrials > 0 {
		log.Printf("installing deploy/base (two controller replicas on the nodes) for %d trials", *leaderTrials)
		if leader, none, err = b.leaderPhase(ctx, ctl, *leaderTrials); err != nil {
			return err
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\npulselb, node blackholed (%d trials): p50 %s, max %s\n", len(probed), pct(probed, 50), pct(probed, 100))
	if len(probed6) > 0 {
		fmt.Printf("pulselb, node blackholed, its IPv6 address (same %d trials, dual-stack): p50 %s, max %s\n", len(probed6), pct(probed6, 50), pct(probed6, 100))
	}
	if len(readiness) > 0 {
		fmt.Printf("pulselb, node down (%d trials): p50 %s, max %s\n", len(probedDown), pct(probedDown, 50), pct(probedDown, 100))
		fmt.Printf("readiness-only path, node-monitor-grace-period %s (%d trials): p50 %s, max %s\n", *grace, len(readiness), pct(readiness, 50), pct(readiness, 100))
		fmt.Printf("ratio of p50s (readiness-only / pulselb blackhole): %.1fx\n", float64(pct(readiness, 50))/float64(pct(probed, 50)))
	}
	if len(leader) > 0 {
		fmt.Printf("installed from deploy/base, node blackholed, the victim runs the leader (%d trials): p50 %s, max %s\n", len(leader), pct(leader, 50), pct(leader, 100))
	}
	if len(none) > 0 {
		fmt.Printf("installed from deploy/base, node blackholed, the victim runs no controller (%d trials): p50 %s, max %s\n", len(none), pct(none, 50), pct(none, 100))
		if len(leader) > 0 {
			fmt.Printf("ratio of p50s (victim runs the leader / runs no controller): %.2fx\n", float64(pct(leader, 50))/float64(pct(none, 50)))
		}
	}
	fmt.Printf("load average at the end: %s", load)
	return nil
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}

type bench struct {
	c   *cluster.Cluster
	cs  kubernetes.Interface
	dyn dynamic.Interface
	rec *scenario.StatusRecorder
	// ips maps node names to InternalIPs, ips6 to IPv6 InternalIPs (with
	// -dual-stack).
	ips, ips6 map[string]string
}

func (b *bench) setup(ctx context.Context) (*scenario.Controller, error) {
	cs := b.cs
	b.ips, b.ips6 = b.c.NodeIPsOf(corev1.IPv4Protocol), b.c.NodeIPsOf(corev1.IPv6Protocol)
	if err := b.c.CreateNamespaces(ctx, systemNS, appNS); err != nil {
		return nil, err
	}
	if err := deploy.InstallProbeReportCRD(ctx, b.dyn, systemNS); err != nil {
		return nil, err
	}
	if err := deploy.InstallProbers(ctx, b.cs, systemNS); err != nil {
		return nil, err
	}
	if err := scenario.PollEvery(ctx, 50*time.Millisecond, 90*time.Second, "4 prober pods ready", func() bool {
		return len(scenario.ReadyPods(ctx, cs, systemNS, "app.kubernetes.io/name="+deploy.ProberName)) == 4
	}); err != nil {
		return nil, err
	}
	ctl, err := b.startController(ctx)
	if err != nil {
		return nil, err
	}
	web := cluster.EchoDeployment(appNS, "web", 2, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
	labels := web.Spec.Selector.MatchLabels
	if _, err := cs.AppsV1().Deployments(appNS).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		return ctl, fmt.Errorf("creating the backend: %w", err)
	}
	// The shape of K3s ServiceLB's svclb pods: one per node, their
	// readiness being all such a load balancer knows about a node.
	svclb := map[string]string{"app": svcLBApp}
	if _, err := cs.AppsV1().DaemonSets(appNS).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: svcLBApp},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: svclb},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: svclb},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: cluster.EchoImage,
					Ports: []corev1.ContainerPort{{ContainerPort: 9090}}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return ctl, fmt.Errorf("creating the svclb DaemonSet: %w", err)
	}
	b.rec = scenario.RecordStatus(ctx, cs, appNS, "web")
	if _, err := cs.CoreV1().Services(appNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: labels,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack), IPFamilies: b.c.IPFamilies(),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		return ctl, fmt.Errorf("creating the Service: %w", err)
	}
	return ctl, b.steady(ctx)
}

// steady waits until shop/web is published on exactly its two proxy nodes,
// each probed Up by at least two probers, and no node is labelled
// unhealthy.
func (b *bench) steady(ctx context.Context) error {
	return scenario.PollEvery(ctx, 50*time.Millisecond, 120*time.Second, "shop/web on 2 proxies probed Up", func() bool {
		nodes := b.proxyNodes(ctx)
		if len(nodes) != 2 {
			return false
		}
		want := []string{b.ips[nodes[0]], b.ips[nodes[1]]}
		if *dualStack {
			want = append(want, b.ips6[nodes[0]], b.ips6[nodes[1]])
		}
		slices.Sort(want)
		if !slices.Equal(b.rec.Last(), want) {
			return false
		}
		reports, _ := scenario.ListReports(ctx, b.dyn, systemNS)
		for _, n := range nodes {
			if scenario.UpVotes(reports, "shop/web", 80, n) < 2 {
				return false
			}
		}
		l, err := b.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.LabelUnhealthy})
		return err == nil && len(l.Items) == 0
	})
}

func (b *bench) proxyNodes(ctx context.Context) []string {
	var out []string
	for _, p := range scenario.ReadyPods(ctx, b.cs, systemNS, proxyApp) {
		out = append(out, p.Spec.NodeName)
	}
	slices.Sort(out)
	return out
}

// blackholeTrial blackholes a proxy node, returns the time until the
// status is written without its IP (and, with -dual-stack, without its
// IPv6 address), and heals it.
func (b *bench) blackholeTrial(ctx context.Context) (d, d6 time.Duration, err error) {
	victim := b.proxyNodes(ctx)[0]
	ip, ip6 := b.ips[victim], b.ips6[victim]
	start := time.Now()
	if err := b.c.NodeBlackhole(ctx, victim); err != nil {
		return 0, 0, err
	}
	err = scenario.PollEvery(ctx, 50*time.Millisecond, 30*time.Second, ip+" gone from the status", func() bool {
		return !b.rec.FirstWithout(ip, start).IsZero() && (ip6 == "" || !b.rec.FirstWithout(ip6, start).IsZero())
	})
	d = b.rec.FirstWithout(ip, start).Sub(start)
	if ip6 != "" {
		d6 = b.rec.FirstWithout(ip6, start).Sub(start)
	}
	if herr := b.c.NodeHeal(ctx, victim); herr != nil {
		return 0, 0, errors.Join(err, herr)
	}
	if err != nil {
		return 0, 0, err
	}
	return d, d6, b.steady(ctx)
}

// downTrial takes a proxy node down and returns pulselb's time and the
// time until the node's svclb pod is marked NotReady.
func (b *bench) downTrial(ctx context.Context) (probed, readiness time.Duration, err error) {
	victim := b.proxyNodes(ctx)[0]
	ip := b.ips[victim]
	start := time.Now()
	if err := b.c.NodeDown(ctx, victim); err != nil {
		return 0, 0, err
	}
	defer func() {
		if uerr := b.c.NodeUp(ctx, victim); uerr != nil {
			err = errors.Join(err, uerr)
			return
		}
		if err == nil {
			err = b.steady(ctx)
		}
	}()
	if err := scenario.PollEvery(ctx, 50*time.Millisecond, 30*time.Second, ip+" gone from the status", func() bool { return !b.rec.FirstWithout(ip, start).IsZero() }); err != nil {
		return 0, 0, err
	}
	probed = b.rec.FirstWithout(ip, start).Sub(start)
	err = scenario.PollEvery(ctx, 50*time.Millisecond, *grace+60*time.Second, "the svclb pod on "+victim+" NotReady", func() bool {
		for _, p := range scenario.ListPods(ctx, b.cs, appNS, "app="+svcLBApp) {
			if p.Spec.NodeName != victim {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionTrue {
					readiness = time.Since(start)
					return true
				}
			}
		}
		return false
	})
	return probed, readiness, err
}

func (b *bench) startController(ctx context.Context) (*scenario.Controller, error) {
	p, err := scenario.StartController(ctx, b.c, scenario.ControllerOptions{
		Namespace: systemNS, Metrics: "127.0.0.1:0", Args: []string{"--probe-reports=true", "--v=2"},
	})
	if err != nil {
		return nil, err
	}
	log.Printf("pulselb controller running, log %s", p.LogPath)
	return p, nil
}
