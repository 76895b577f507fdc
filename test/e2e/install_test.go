package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// installedZone is the DNS zone of deploy/base (the chart's default).
const installedZone = "lb.internal."

var probeReportResource = schema.GroupVersionResource{Group: "pulselb.io", Version: "v1alpha1", Resource: "probereports"}

// installBase applies deploy/base as `kubectl apply -k` would (built with
// kustomize, CRDs first) and waits for 2 controller and one prober per node
// running (scenario.InstallBase).
func installBase(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	objs, err := deploy.Build(filepath.Join("..", "..", "deploy", "base"))
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.InstallBase(ctx, c, objs, 90*time.Second); err != nil {
		t.Fatalf("pulselb did not start: %v: %s", err, describePods(ctx, c.Client, systemNamespace))
	}
}

// TestInstall installs pulselb from deploy/base into a 3-node cluster and
// runs it end to end under its own ServiceAccounts: a LoadBalancer Service
// gets the proxy nodes' IPs in its status, a client outside reaches it,
// the pulselb-dns Service answers its name, and when a proxy node is
// blackholed its IP leaves the status within seconds.
func TestInstall(t *testing.T) {
	// The install tests wait longer for a machine other tests share.
	c := cluster.ForTest(t, cluster.Options{Nodes: 3, WaitForMachine: 20 * time.Minute})
	ctx := t.Context()
	cs := c.Client
	installBase(ctx, t, c)
	defer func() {
		if t.Failed() {
			t.Logf("pods in %s: %s", systemNamespace, describePods(ctx, cs, systemNamespace))
		}
	}()

	t.Run("ComponentsUseTheirServiceAccounts", func(t *testing.T) {
		for sel, sa := range map[string]string{
			"app.kubernetes.io/name=pulselb-controller": "pulselb-controller",
			"app.kubernetes.io/name=pulselb-prober":     "pulselb-prober",
		} {
			for _, p := range listPods(ctx, t, cs, systemNamespace, sel) {
				if p.Spec.ServiceAccountName != sa {
					t.Errorf("pod %s runs as service account %q, want %s", p.Name, p.Spec.ServiceAccountName, sa)
				}
			}
		}
		var leaders int
		poll(ctx, t, 45*time.Second, "one controller leading", func() bool {
			leaders = len(leaderPods(ctx, t, c))
			return leaders == 1
		})
	})

	t.Run("EveryProberWritesItsReport", func(t *testing.T) {
		a, err := deploy.NewApplier(c.RESTConfig)
		if err != nil {
			t.Fatal(err)
		}
		res := a.Dynamic.Resource(probeReportResource).Namespace(systemNamespace)
		poll(ctx, t, 45*time.Second, "a ProbeReport per node", func() bool {
			l, err := res.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			var names []string
			for _, r := range l.Items {
				names = append(names, r.GetName())
			}
			slices.Sort(names)
			return slices.Equal(names, c.Nodes())
		})
	})

	const ns = "shop"
	if err := c.CreateNamespaces(ctx, ns); err != nil {
		t.Fatal(err)
	}
	createWeb(ctx, t, cs, ns)

	nodeOf := map[string]string{}
	for n, ip := range c.NodeIPs() {
		nodeOf[ip] = n
	}
	var ingress []string
	t.Run("StatusHasProxyNodeIPs", func(t *testing.T) {
		poll(ctx, t, 90*time.Second, "shop/web with 2 ingress IPs of proxy nodes", func() bool {
			ingress = ingressIPs(ctx, cs, ns, "web")
			return len(ingress) == 2
		})
		svc, err := cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeProxy {
				t.Errorf("ingress %s has ipMode %v, want Proxy", ing.IP, ing.IPMode)
			}
			if _, ok := nodeOf[ing.IP]; !ok {
				t.Errorf("ingress %s is not a node IP (%v)", ing.IP, nodeOf)
			}
		}
		t.Logf("status.loadBalancer.ingress = %v", ingress)
	})
	if len(ingress) != 2 {
		t.Fatalf("no ingress; controller logs:\n%s", controllerLogs(ctx, t, c))
	}

	t.Run("ClientReachesBackendOnNodeIPs", func(t *testing.T) {
		clientReachesWeb(ctx, t, c, ingress)
	})

	t.Run("DNSServiceAnswers", func(t *testing.T) {
		dnsSvc, err := cs.CoreV1().Services(systemNamespace).Get(ctx, "pulselb-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := "web.shop." + installedZone
		want := strings.Join(ingress, "\n")
		var got string
		// Through kube-proxy: pulselb-dns:53 to the controllers' port 5353.
		poll(ctx, t, 30*time.Second, fmt.Sprintf("dig @%s %s = %v", dnsSvc.Spec.ClusterIP, name, ingress), func() bool {
			out, err := c.Exec(ctx, "node-1", "dig", "+short", "+time=1", "+tries=1", "@"+dnsSvc.Spec.ClusterIP, name, "A")
			lines := strings.Fields(strings.TrimSpace(string(out)))
			slices.Sort(lines)
			got = strings.Join(lines, "\n")
			return err == nil && got == want
		})
	})

	t.Run("FailoverOnBlackholedProxyNode", func(t *testing.T) {
		// Blackhole a proxy node that does not run the leading controller,
		// so the time measured is pulselb's failover, not a leader change.
		leaderNodes := map[string]bool{}
		for _, p := range leaderPods(ctx, t, c) {
			leaderNodes[p.Spec.NodeName] = true
		}
		var victim, victimIP string
		for _, ip := range ingress {
			if !leaderNodes[nodeOf[ip]] {
				victim, victimIP = nodeOf[ip], ip
				break
			}
		}
		if victim == "" {
			t.Fatalf("every proxy node runs the leader (%v)", leaderNodes)
		}
		blackhole(ctx, t, c, victim)
		start := time.Now()
		poll(ctx, t, 30*time.Second, victimIP+" ("+victim+") gone from shop/web's status", func() bool {
			return !slices.Contains(ingressIPs(ctx, cs, ns, "web"), victimIP)
		})
		dropped := time.Since(start)
		t.Logf("failover: %s (%s) left status.loadBalancer.ingress %s after it was blackholed", victim, victimIP, dropped.Round(10*time.Millisecond))
		var now []string
		poll(ctx, t, 90*time.Second, "shop/web back to 2 ingress IPs without "+victimIP, func() bool {
			now = ingressIPs(ctx, cs, ns, "web")
			return len(now) == 2 && !slices.Contains(now, victimIP)
		})
		t.Logf("replacement: status %v %s after the blackhole", now, time.Since(start).Round(10*time.Millisecond))
		for _, ip := range now {
			url := fmt.Sprintf("http://%s:80/", ip)
			poll(ctx, t, 30*time.Second, "an echo pod answering "+url, func() bool {
				out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
				name, _ := field(string(out), "name")
				return err == nil && strings.HasPrefix(name, "shop/web-")
			})
		}
	})
	t.Run("LeaderProcessKilled", func(t *testing.T) {
		leaderProcessKilled(ctx, t, c, ns, nodeOf)
	})
	t.Run("LeaderNodeBlackholed", func(t *testing.T) {
		leaderNodeBlackholed(ctx, t, c, ns)
	})
	t.Run("NoPermissionDenied", func(t *testing.T) {
		// Every call the components made was allowed by their RBAC.
		for sel, container := range map[string]string{
			"app.kubernetes.io/name=pulselb-controller": "controller",
			"app.kubernetes.io/name=pulselb-prober":     "prober",
		} {
			for _, p := range listPods(ctx, t, cs, systemNamespace, sel) {
				log, err := c.ContainerLog(systemNamespace, p.Name, container)
				if err != nil {
					t.Errorf("reading the log of %s: %v", p.Name, err)
					continue
				}
				for _, l := range strings.Split(string(log), "\n") {
					if strings.Contains(strings.ToLower(l), "forbidden") {
						t.Errorf("%s was denied: %s", p.Name, l)
					}
				}
			}
		}
	})
	if t.Failed() {
		t.Logf("controller logs:\n%s", controllerLogs(ctx, t, c))
	}
}

// leaderProcessKilled kills the leading controller's process (kill -9, as
// an OOM kill or a crash would; its pod starts it again) and at once cuts
// off a proxy node of shop/web that does not run it. The restarted process
// takes the Lease its pod's previous process held without waiting for it to
// lapse, so the cut node leaves the status within seconds; before, the
// Services had no leader for the lease duration (15 s) after the restart,
// and a fault then waited for it (the fault soak found it after an API
// server restart, which makes a leader give up the lead and exit).
func leaderProcessKilled(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, nodeOf map[string]string) {
	cs := c.Client
	holder := func() string {
		l, err := cs.CoordinationV1().Leases(systemNamespace).Get(ctx, "pulselb-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the leader Lease: %v", err)
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	before := holder()
	i := strings.LastIndexByte(before, '_')
	if i < 0 {
		t.Fatalf("the leader Lease's holder %q names no pod", before)
	}
	leader := before[:i]
	pod, err := cs.CoreV1().Pods(systemNamespace).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the leader's pod: %v", err)
	}
	var victim, victimIP string
	for _, ip := range ingressIPs(ctx, cs, ns, "web") {
		if nodeOf[ip] != pod.Spec.NodeName {
			victim, victimIP = nodeOf[ip], ip
			break
		}
	}
	if victim == "" {
		t.Fatalf("shop/web is published only on the leader's node %s", pod.Spec.NodeName)
	}
	if err := c.KillContainer(systemNamespace, leader, "controller"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	b := blackhole(ctx, t, c, victim)
	poll(ctx, t, 40*time.Second, victimIP+" ("+victim+") gone from shop/web's status", func() bool {
		return !slices.Contains(ingressIPs(ctx, cs, ns, "web"), victimIP)
	})
	took := time.Since(killed)
	after := holder()
	t.Logf("the leader %s killed and %s cut off: %s left the status %s later; the Lease is %s's, was %s's",
		leader, victim, victimIP, took.Round(10*time.Millisecond), after, before)
	if j := strings.LastIndexByte(after, '_'); after == before || j < 0 || after[:j] != leader {
		t.Errorf("the Lease is held by %q, want a new process of %s", after, leader)
	}
	// The standby counts the lease duration from when it saw the last
	// renewal: 15 s at least without the takeover.
	if took > 10*time.Second {
		t.Errorf("the cut node left the status %s after the leader was killed, want at most 10s", took.Round(10*time.Millisecond))
	}
	if err := b.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 90*time.Second, "shop/web back to 2 ingress IPs", func() bool {
		return len(ingressIPs(ctx, cs, ns, "web")) == 2
	})
}

// leaderNodeBlackholed blackholes the node of the leading controller, which
// runs a proxy of a Service in daemonset mode (every node does), and
// checks that the standby takes the Lease as soon as its probers judge that
// node failed, so the address leaves the status within the failover bound
// rather than after the Lease lapses (15s); that the status is written once
// while the node is cut off and once when it is back, whatever the cut-off
// leader does; and that the cut-off leader stops leading.
func leaderNodeBlackholed(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	cs := c.Client
	// Backends: web's pods; proxies: one on every node.
	web, err := cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Its own port: web's proxies hold port 80 on their nodes.
	ports := slices.Clone(web.Spec.Ports)
	for i := range ports {
		ports[i].NodePort = 0
		ports[i].Port += 8000
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "everywhere", Namespace: ns, Annotations: map[string]string{contract.AnnotationProxyMode: "daemonset"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: web.Spec.Selector, Ports: ports},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := len(c.Nodes())
	poll(ctx, t, 120*time.Second, fmt.Sprintf("%s/everywhere published on all %d nodes", ns, nodes), func() bool {
		return len(ingressIPs(ctx, cs, ns, "everywhere")) == nodes
	})
	var leader corev1.Pod
	poll(ctx, t, 45*time.Second, "one controller leading", func() bool {
		l := leaderPods(ctx, t, c)
		if len(l) == 1 {
			leader = l[0]
		}
		return len(l) == 1
	})
	if t.Failed() {
		return
	}
	victim := leader.Spec.NodeName
	victimIP := c.NodeIPs()[victim]
	rec := scenario.RecordStatus(ctx, cs, ns, "everywhere")
	poll(ctx, t, 10*time.Second, "the status recorder's first observation", func() bool { return rec.Count() > 0 })
	before := rec.Count()

	fault := blackhole(ctx, t, c, victim)
	start := time.Now()
	poll(ctx, t, 30*time.Second, victimIP+" ("+victim+", the leader's node) gone from "+ns+"/everywhere's status", func() bool {
		return !rec.FirstWithout(victimIP, start).IsZero()
	})
	dropped := rec.FirstWithout(victimIP, start).Sub(start)
	t.Logf("leader's node %s (%s) left status.loadBalancer.ingress %s after it was blackholed (the Lease lasts 15s)",
		victim, victimIP, dropped.Round(10*time.Millisecond))
	// The failover bound on a loaded 2-core machine; the Lease lapsing
	// would take 15s or more. bench/failover measures the exact figure.
	if dropped > 5*time.Second {
		t.Errorf("the leader's node left the status after %s, want within 5s", dropped.Round(10*time.Millisecond))
	}
	var newLeader string
	poll(ctx, t, 30*time.Second, "a controller on another node leading", func() bool {
		for _, p := range leaderPods(ctx, t, c) {
			if p.Spec.NodeName != victim {
				newLeader = p.Name
			}
		}
		return newLeader != ""
	})
	// The cut-off leader gives up its renewals after the renew deadline
	// (10s) and exits; meanwhile it writes nothing, as it cannot reach the
	// API server. Stay cut off past that.
	time.Sleep(max(0, 15*time.Second-time.Since(start)))
	during := rec.Since(before)
	if err := fault.Heal(context.WithoutCancel(ctx)); err != nil {
		t.Error(err)
	}
	healedAt := time.Now()
	poll(ctx, t, 90*time.Second, victimIP+" back in "+ns+"/everywhere's status", func() bool {
		return slices.Contains(rec.Last(), victimIP)
	})
	t.Logf("back: %s is in the status again %s after the heal", victim, time.Since(healedAt).Round(10*time.Millisecond))
	// Settle: the returning leader must not write once it is back.
	time.Sleep(10 * time.Second)
	all := rec.Since(before)
	for _, w := range all {
		t.Logf("  status at +%s: %v %v", w.At.Sub(start).Round(10*time.Millisecond), w.IPs, w.Conds)
	}
	// Conditions may change more often (the DaemonSet's pod leaves the
	// failed node and comes back, and ProxiesScheduled lists the nodes);
	// the addresses, which DNS follows, must change once each way.
	if n := addressChanges(rec.Nth(before), during); n != 1 {
		t.Errorf("the addresses changed %d times while the leader's node was cut off, want 1 (the node dropped)", n)
	}
	if n := addressChanges(rec.Nth(before), all); n != 2 {
		t.Errorf("the addresses changed %d times from the blackhole to 10s after the node came back, want 2 (dropped, back)", n)
	}
	t.Logf("new leader: %s", newLeader)
	if err := cs.CoreV1().Services(ns).Delete(ctx, "everywhere", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// addressChanges counts the writes in ws whose addresses differ from the
// write before (from for the first).
func addressChanges(from []string, ws []scenario.StatusWrite) int {
	n := 0
	for _, w := range ws {
		if !slices.Equal(w.IPs, from) {
			n++
		}
		from = w.IPs
	}
	return n
}

// ingressIPs returns the Service's ingress IPs, sorted.
func ingressIPs(ctx context.Context, cs kubernetes.Interface, ns, name string) []string {
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		out = append(out, ing.IP)
	}
	slices.Sort(out)
	return out
}

// leaderPods returns the controller pods whose log says they lead.
func leaderPods(ctx context.Context, t *testing.T, c *cluster.Cluster) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range listPods(ctx, t, c.Client, systemNamespace, "app.kubernetes.io/name=pulselb-controller") {
		log, err := c.ContainerLog(systemNamespace, p.Name, "controller")
		if err == nil && strings.Contains(string(log), `"Started leading"`) && !strings.Contains(string(log), `"Lost leader lease"`) {
			out = append(out, p)
		}
	}
	return out
}

// controllerLogs returns the tail of every controller pod's log.
func controllerLogs(ctx context.Context, t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	var b strings.Builder
	for _, p := range listPods(ctx, t, c.Client, systemNamespace, "app.kubernetes.io/name=pulselb-controller") {
		log, _ := c.ContainerLog(systemNamespace, p.Name, "controller")
		fmt.Fprintf(&b, "--- %s on %s:\n%s\n", p.Name, p.Spec.NodeName, scenario.Tail(string(log), 30))
	}
	return b.String()
}
