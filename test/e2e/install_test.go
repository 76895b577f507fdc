package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
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
// blackholed its IP leaves the status within seconds. Each step is a
// method of installEnv, run in this order on the same cluster.
func TestInstall(t *testing.T) {
	// The install tests wait longer for a machine other tests share.
	c := cluster.ForTest(t, cluster.Options{Nodes: 3, WaitForMachine: 20 * time.Minute})
	e := newInstallEnv(t, c)
	installBase(e.ctx, t, c)
	defer func() {
		if t.Failed() {
			t.Logf("pods in %s: %s", systemNamespace, describePods(e.ctx, e.cs, systemNamespace))
		}
	}()
	t.Run("ComponentsUseTheirServiceAccounts", e.componentsUseTheirServiceAccounts)
	t.Run("EveryProberWritesItsReport", e.everyProberWritesItsReport)
	e.createShop(t, createWeb)
	t.Run("StatusHasProxyNodeIPs", e.statusHasProxyNodeIPs)
	if len(e.ingress) != 2 {
		t.Fatalf("no ingress; controller logs:\n%s", controllerLogs(e.ctx, t, c))
	}
	t.Run("ClientReachesBackendOnNodeIPs", func(t *testing.T) { clientReachesWeb(e.ctx, t, c, e.ingress) })
	t.Run("DNSServiceAnswers", e.dnsServiceAnswers)
	t.Run("FailoverOnBlackholedProxyNode", e.failoverOnBlackholedProxyNode)
	t.Run("LeaderProcessKilled", func(t *testing.T) { leaderProcessKilled(e.ctx, t, c, installNamespace, e.nodeOf) })
	t.Run("LeaderNodeBlackholed", func(t *testing.T) { leaderNodeBlackholed(e.ctx, t, c, installNamespace) })
	t.Run("CutWhileProberStopped", e.cutWhileProberStopped)
	t.Run("LeaderNodeCutAfterAPIOutage", func(t *testing.T) { leaderNodeCutAfterAPIOutage(e.ctx, t, c, installNamespace) })
	t.Run("NoPermissionDenied", e.noPermissionDenied)
	if t.Failed() {
		t.Logf("controller logs:\n%s", controllerLogs(e.ctx, t, c))
	}
}

// installNamespace is where the install tests run their Service web.
const installNamespace = "shop"

// installEnv is a cluster with pulselb installed in pulselb-system, as a
// user installs it (TestInstall, TestKubeletInstall), and the Service web
// in installNamespace once createShop has made it.
type installEnv struct {
	ctx context.Context
	c   *cluster.Cluster
	cs  kubernetes.Interface
	// nodeOf maps a node's IP to the node.
	nodeOf map[string]string
	// ingress is web's status, sorted, as the last step that read it
	// found it.
	ingress []string
}

// newInstallEnv is the environment on c, before anything is installed.
func newInstallEnv(t *testing.T, c *cluster.Cluster) *installEnv {
	e := &installEnv{ctx: t.Context(), c: c, cs: c.Client, nodeOf: map[string]string{}}
	for n, ip := range c.NodeIPs() {
		e.nodeOf[ip] = n
	}
	return e
}

// createShop makes installNamespace and the Service web in it with
// createWeb.
func (e *installEnv) createShop(t *testing.T, createWeb func(context.Context, *testing.T, kubernetes.Interface, string)) {
	t.Helper()
	if err := e.c.CreateNamespaces(e.ctx, installNamespace); err != nil {
		t.Fatal(err)
	}
	createWeb(e.ctx, t, e.cs, installNamespace)
}

// waitIngress waits until web's status has 2 IPs (of what nodes), and keeps
// them in e.ingress.
func (e *installEnv) waitIngress(t *testing.T, what string) {
	t.Helper()
	poll(e.ctx, t, 90*time.Second, "shop/web with 2 ingress IPs of "+what, func() bool {
		e.ingress = ingressIPs(e.ctx, e.cs, installNamespace, "web")
		return len(e.ingress) == 2
	})
}

// proxyNodeOffTheLeader returns a node of e.ingress that does not run the
// leading controller, and its IP: blackholing it measures pulselb's
// failover, not a leader change.
func (e *installEnv) proxyNodeOffTheLeader(t *testing.T) (string, string) {
	t.Helper()
	leaderNodes := map[string]bool{}
	for _, p := range leaderPods(e.ctx, t, e.c) {
		leaderNodes[p.Spec.NodeName] = true
	}
	for _, ip := range e.ingress {
		if !leaderNodes[e.nodeOf[ip]] {
			return e.nodeOf[ip], ip
		}
	}
	t.Fatalf("every proxy node runs the leader (%v)", leaderNodes)
	return "", ""
}

// blackholeUntilReplaced blackholes victim, waits up to bound for its IP
// to leave web's status and then for the status to hold 2 IPs without it,
// and returns that status.
func (e *installEnv) blackholeUntilReplaced(t *testing.T, victim, victimIP string, bound time.Duration) []string {
	t.Helper()
	ctx, cs := e.ctx, e.cs
	blackhole(ctx, t, e.c, victim)
	start := time.Now()
	poll(ctx, t, bound, victimIP+" ("+victim+") gone from shop/web's status", func() bool {
		return !slices.Contains(ingressIPs(ctx, cs, installNamespace, "web"), victimIP)
	})
	t.Logf("failover: %s (%s) left status.loadBalancer.ingress %s after it was blackholed", victim, victimIP, time.Since(start).Round(10*time.Millisecond))
	var now []string
	poll(ctx, t, 90*time.Second, "shop/web back to 2 ingress IPs without "+victimIP, func() bool {
		now = ingressIPs(ctx, cs, installNamespace, "web")
		return len(now) == 2 && !slices.Contains(now, victimIP)
	})
	t.Logf("replacement: status %v %s after the blackhole", now, time.Since(start).Round(10*time.Millisecond))
	return now
}

// componentsUseTheirServiceAccounts checks that the controllers and probers
// run under their own ServiceAccounts and that one controller leads.
func (e *installEnv) componentsUseTheirServiceAccounts(t *testing.T) {
	componentsUnderTheirServiceAccounts(e.ctx, t, e.c, nil)
}

// everyProberWritesItsReport waits for a ProbeReport of every node.
func (e *installEnv) everyProberWritesItsReport(t *testing.T) {
	ctx, c := e.ctx, e.c
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
}

// statusHasProxyNodeIPs waits until web's status has 2 IPs, and checks they
// are node IPs with ipMode Proxy.
func (e *installEnv) statusHasProxyNodeIPs(t *testing.T) {
	e.waitIngress(t, "proxy nodes")
	svc, err := e.cs.CoreV1().Services(installNamespace).Get(e.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeProxy {
			t.Errorf("ingress %s has ipMode %v, want Proxy", ing.IP, ing.IPMode)
		}
		if _, ok := e.nodeOf[ing.IP]; !ok {
			t.Errorf("ingress %s is not a node IP (%v)", ing.IP, e.nodeOf)
		}
	}
	t.Logf("status.loadBalancer.ingress = %v", e.ingress)
}

// dnsServiceAnswers checks that the pulselb-dns Service answers web's name
// with its status, through kube-proxy.
func (e *installEnv) dnsServiceAnswers(t *testing.T) {
	ctx, c, cs, ingress := e.ctx, e.c, e.cs, e.ingress
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
}

// failoverOnBlackholedProxyNode blackholes a proxy node that does not run
// the leading controller: its IP leaves the status within 30 s, a
// replacement is published, and a client reaches web on the new status.
func (e *installEnv) failoverOnBlackholedProxyNode(t *testing.T) {
	victim, victimIP := e.proxyNodeOffTheLeader(t)
	now := e.blackholeUntilReplaced(t, victim, victimIP, 30*time.Second)
	clientReachesWeb(e.ctx, t, e.c, now)
}

// noPermissionDenied checks that the controllers' and probers' logs show no
// call their RBAC refused.
func (e *installEnv) noPermissionDenied(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	// Every call the components made was allowed by their RBAC.
	for _, comp := range installedComponents {
		for _, p := range listPods(ctx, t, cs, systemNamespace, comp.selector) {
			log, err := c.ContainerLog(systemNamespace, p.Name, comp.container)
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
}

// settled waits until the fault of the step before has healed in every
// vote: every prober finds every node's beacon Up, and no node is labelled
// unhealthy. A node cut off right after another one's heal keeps voting the
// healed node Down until its report goes stale (about 30 s), which then
// also holds back the verdict on the cut node itself: two faults at once,
// which the soak covers, not the single fault a step times.
func settled(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	var notUp []string
	start := time.Now()
	err = scenario.Poll(ctx, 60*time.Second, "every prober finding every node up", func() bool {
		reports, err := scenario.ListReports(ctx, dyn, systemNamespace)
		if err != nil {
			notUp = []string{err.Error()}
			return false
		}
		notUp = scenario.BeaconsNotUp(reports, c.Nodes())
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			notUp = append(notUp, err.Error())
			return false
		}
		for _, n := range nodes.Items {
			if _, ok := n.Labels[contract.LabelUnhealthy]; ok {
				notUp = append(notUp, n.Name+" labelled "+contract.LabelUnhealthy)
			}
		}
		return len(notUp) == 0
	})
	if err != nil {
		t.Fatalf("%v: %s", err, strings.Join(notUp, "; "))
	}
	t.Logf("every prober finds every node up (waited %s)", time.Since(start).Round(10*time.Millisecond))
}

// leaderProcessKilled kills the leading controller's process (kill -9, as
// an OOM kill or a crash would; its pod starts it again) and at once cuts
// off a proxy node of shop/web that does not run it. The restarted process
// takes the Lease its pod's previous process held without waiting for it to
// lapse: it holds the Lease within 10 s of the kill (seconds on an idle
// machine), and the cut node leaves the status within the failover bound
// of any blackholed node. Before, the Services had no leader for the lease
// duration (15 s) after the restart, and a fault then waited for it (the
// fault soak found it after an API server restart, which makes a leader
// give up the lead and exit). The two are timed apart because detecting
// the cut node takes a loaded CI machine up to 10 s on its own.
func leaderProcessKilled(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, nodeOf map[string]string) {
	cs := c.Client
	holder := func() string {
		l, err := cs.CoordinationV1().Leases(systemNamespace).Get(ctx, "pulselb-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the leader Lease: %v", err)
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	settled(ctx, t, c)
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
	// What the fix is about: the restarted process takes the Lease at
	// once. Without it a standby or the restarted process waits for the
	// lease duration (15 s) counted from when it read the Lease, so at
	// least 15 s after the kill.
	var after string
	poll(ctx, t, 40*time.Second, "a new holder of the leader Lease", func() bool {
		after = holder()
		return after != before
	})
	leased := time.Since(killed)
	// Then the cut node leaves the status as after any other fault:
	// detection by the probers, a verdict, a status write, which a loaded
	// CI machine stretches (FailoverOnBlackholedProxyNode's bound).
	poll(ctx, t, 40*time.Second, victimIP+" ("+victim+") gone from shop/web's status", func() bool {
		return !slices.Contains(ingressIPs(ctx, cs, ns, "web"), victimIP)
	})
	took := time.Since(killed)
	t.Logf("the leader %s killed and %s cut off: the Lease was %s's after %s (was %s's), %s left the status after %s",
		leader, victim, after, leased.Round(10*time.Millisecond), before, victimIP, took.Round(10*time.Millisecond))
	if j := strings.LastIndexByte(after, '_'); j < 0 || after[:j] != leader {
		t.Errorf("the Lease is held by %q, want a new process of %s", after, leader)
	}
	if leased > 10*time.Second {
		t.Errorf("the restarted leader held the Lease %s after it was killed, want at most 10s", leased.Round(10*time.Millisecond))
	}
	if took > 30*time.Second {
		t.Errorf("the cut node left the status %s after the leader was killed, want at most 30s", took.Round(10*time.Millisecond))
	}
	if err := b.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 90*time.Second, "shop/web back to 2 ingress IPs", func() bool {
		return len(ingressIPs(ctx, cs, ns, "web")) == 2
	})
}

// pulselbComponent is one of pulselb's workloads as deploy/base installs
// it: the selector of its pods, its ServiceAccount, its container.
type pulselbComponent struct {
	selector, serviceAccount, container string
}

// installedComponents are the controllers and the probers.
var installedComponents = []pulselbComponent{
	{"app.kubernetes.io/name=pulselb-controller", "pulselb-controller", "controller"},
	{"app.kubernetes.io/name=pulselb-prober", "pulselb-prober", "prober"},
}

// componentsUnderTheirServiceAccounts checks that every controller and
// prober pod runs under its component's ServiceAccount, calls check (when
// not nil) on each, and waits for one controller to lead.
func componentsUnderTheirServiceAccounts(ctx context.Context, t *testing.T, c *cluster.Cluster, check func(corev1.Pod)) {
	t.Helper()
	for _, comp := range installedComponents {
		for _, p := range listPods(ctx, t, c.Client, systemNamespace, comp.selector) {
			if p.Spec.ServiceAccountName != comp.serviceAccount {
				t.Errorf("pod %s runs as service account %q, want %s", p.Name, p.Spec.ServiceAccountName, comp.serviceAccount)
			}
			if check != nil {
				check(p)
			}
		}
	}
	poll(ctx, t, 45*time.Second, "one controller leading", func() bool { return len(leaderPods(ctx, t, c)) == 1 })
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
	settled(ctx, t, c)
	publishEverywhere(ctx, t, c, ns, "everywhere", 8000)
	leader, ok := oneLeader(ctx, t, c, "one controller leading")
	if !ok {
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

// publishEverywhere creates name in ns, a daemonset-mode copy of web (its
// backends, a proxy on every node) on web's ports plus offset (web's
// proxies hold its own ports), and waits until it is published on every
// node.
func publishEverywhere(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, offset int32) {
	t.Helper()
	cs := c.Client
	web, err := cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports := slices.Clone(web.Spec.Ports)
	for i := range ports {
		ports[i].NodePort = 0
		ports[i].Port += offset
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{contract.AnnotationProxyMode: "daemonset"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: web.Spec.Selector, Ports: ports},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := len(c.Nodes())
	poll(ctx, t, 120*time.Second, fmt.Sprintf("%s/%s published on all %d nodes", ns, name, nodes), func() bool {
		return len(ingressIPs(ctx, cs, ns, name)) == nodes
	})
}

// oneLeader waits up to 45 s until exactly one controller pod leads and
// returns it; false when t failed meanwhile.
func oneLeader(ctx context.Context, t *testing.T, c *cluster.Cluster, what string) (corev1.Pod, bool) {
	t.Helper()
	var leader corev1.Pod
	poll(ctx, t, 45*time.Second, what, func() bool {
		l := leaderPods(ctx, t, c)
		if len(l) == 1 {
			leader = l[0]
		}
		return len(l) == 1
	})
	return leader, !t.Failed()
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
	out := ingressInOrder(ctx, cs, ns, name)
	slices.Sort(out)
	return out
}

// ingressInOrder returns the Service's ingress IPs in the status' order;
// nil when it cannot be read.
func ingressInOrder(ctx context.Context, cs kubernetes.Interface, ns, name string) []string {
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		out = append(out, ing.IP)
	}
	return out
}

// leaderPods returns the controller pods whose log says they lead: it
// says they started leading, and did not lose the lead since (a replica
// that loses it stands by, and may lead again).
func leaderPods(ctx context.Context, t *testing.T, c *cluster.Cluster) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range listPods(ctx, t, c.Client, systemNamespace, "app.kubernetes.io/name=pulselb-controller") {
		log, err := c.ContainerLog(systemNamespace, p.Name, "controller")
		if err == nil && strings.LastIndex(string(log), `"Started leading"`) > strings.LastIndex(string(log), `"Lost leader lease"`) {
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

// cutWhileProberStopped cuts off a proxy node whose prober is not ready
// (frozen with SIGSTOP, so its readiness probe fails while its beacon's
// socket still accepts): the node's beacon is still probed, Up while the
// node answers, and Down by quorum once it is cut off, so the node is
// labelled unhealthy whatever its Services' probes can see. A node's
// beacon used to be probed only while its prober was ready.
func (e *installEnv) cutWhileProberStopped(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	settled(ctx, t, c)
	victim, _ := e.proxyNodeOffTheLeader(t)
	var prober string
	for _, p := range readyPods(ctx, t, cs, systemNamespace, scenario.ProberSelector) {
		if p.Spec.NodeName == victim {
			prober = p.Name
		}
	}
	if prober == "" {
		t.Fatalf("no ready prober on %s", victim)
	}
	if err := c.SignalContainer(systemNamespace, prober, "prober", syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.SignalContainer(systemNamespace, prober, "prober", syscall.SIGCONT) })
	stopped := time.Now()
	// Readiness fails after 3 probes 5 s apart; liveness kills the
	// process after 3 failures 10 s apart, about 30 s after the stop.
	poll(ctx, t, 25*time.Second, "the prober on "+victim+" not ready", func() bool {
		p, err := cs.CoreV1().Pods(systemNamespace).Get(ctx, prober, metav1.GetOptions{})
		return err == nil && !contract.PodReady(p)
	})
	t.Logf("the prober on %s not ready %s after SIGSTOP", victim, time.Since(stopped).Round(time.Millisecond))
	labelled := func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		_, ok := n.Labels[contract.LabelUnhealthy]
		return err == nil && ok
	}
	if labelled() {
		t.Fatalf("%s labelled %s while it answers and only its prober is stopped", victim, contract.LabelUnhealthy)
	}
	fault := blackhole(ctx, t, c, victim)
	cut := time.Now()
	poll(ctx, t, 10*time.Second, victim+" labelled "+contract.LabelUnhealthy+" by its beacon's verdict", labelled)
	t.Logf("%s labelled %s %s after the cut (%s after SIGSTOP)", victim, contract.LabelUnhealthy,
		time.Since(cut).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	if err := fault.Heal(ctx); err != nil {
		t.Error(err)
	}
	if err := c.SignalContainer(systemNamespace, prober, "prober", syscall.SIGCONT); err != nil {
		t.Logf("resuming the prober: %v (the kubelet restarted it)", err)
	}
	poll(ctx, t, 60*time.Second, "label "+contract.LabelUnhealthy+" removed from "+victim+" after healing", func() bool { return !labelled() })
	settled(ctx, t, c)
}
