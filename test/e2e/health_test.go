package e2e

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// Names the health scenarios share with pulselb.
const (
	proxyAppSelector = contract.LabelAppName + "=" + contract.ProxyAppName
	// restartAfterDown is the controller's RestartAfterDown: how long a
	// port must be Down before its proxy may be restarted (the test
	// module does not import the controller; see lbFinalizer).
	restartAfterDown = 5 * time.Second
)

// TestHealth runs the whole health pipeline on one cluster of four nodes:
// the prober DaemonSet (as `pulselb prober` pods with their own service
// account), the ProbeReport CRD, and `pulselb controller --probe-reports`.
// Every write of shop/web's status is recorded, so the scenarios can say
// how long a failover took and that the status was never empty. Each step
// is a method of healthEnv, run in this order on the same cluster.
func TestHealth(t *testing.T) {
	e := newHealthEnv(t)
	t.Run("Published", e.published)
	if t.Failed() {
		t.Fatalf("shop/web never published; controller log %s; pods: %s", e.ctl.LogPath, describePods(e.ctx, e.cs, systemNamespace))
	}
	t.Run("NodeBlackholed", e.nodeBlackholed)
	t.Run("ProxyKilled", e.proxyKilled)
	t.Run("BrokenProxyRestarted", e.brokenProxyRestarted)
	t.Run("ProberCutOff", e.proberCutOff)
	t.Run("BackendNodeCutOff", e.backendNodeCutOff)
	t.Run("BackendDownEverywhere", e.backendDownEverywhere)
	t.Run("FlappingTarget", e.flappingTarget)
	t.Run("ProbeProtocols", e.probeProtocols)

	if t.Failed() {
		log, _ := os.ReadFile(e.ctl.LogPath)
		t.Logf("controller log (tail):\n%s", scenario.Tail(string(log), 60))
	}
}

// healthEnv is TestHealth's cluster: four nodes with the probers and the
// controller, and shop/web, two echo backends behind a LoadBalancer
// Service whose every status write rec records.
type healthEnv struct {
	ctx context.Context
	c   *cluster.Cluster
	cs  kubernetes.Interface
	dyn dynamic.Interface
	ctl *controllerProcess
	rec *scenario.StatusRecorder
	// nodeIP holds each node's address.
	nodeIP map[string]string
}

// newHealthEnv starts the cluster, the probers (one ProbeReport from every
// node), the controller, and shop/web.
func newHealthEnv(t *testing.T) *healthEnv {
	c := cluster.ForTest(t, cluster.Options{Nodes: 4, WaitForMachine: 30 * time.Minute})
	ctx := t.Context()
	cs := c.Client
	dyn := installProbers(t, c)
	poll(ctx, t, 60*time.Second, "4 prober pods ready", func() bool {
		return len(readyPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name="+deploy.ProberName)) == 4
	})
	// A pod started right after its node's kube-proxy can wait up to 30 s
	// for its first API connection through the kubernetes ClusterIP.
	poll(ctx, t, 90*time.Second, "a ProbeReport from every node", func() bool {
		return len(listReports(ctx, t, dyn)) == 4
	})
	ctl := startController(t, c, freeLoopbackPort(t), "--probe-reports=true")

	createBackend(ctx, t, cs, "web", 2, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	rec := scenario.RecordStatus(ctx, cs, "shop", "web")
	createHealthLB(ctx, t, cs, "web", nil, []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}})
	return &healthEnv{ctx: ctx, c: c, cs: cs, dyn: dyn, ctl: ctl, rec: rec, nodeIP: c.NodeIPs()}
}

// proxyNodes returns the nodes of shop/web's running proxy pods.
func (e *healthEnv) proxyNodes(t *testing.T) []string {
	var out []string
	for _, p := range readyPods(e.ctx, t, e.cs, systemNamespace, proxyAppSelector) {
		out = append(out, p.Spec.NodeName)
	}
	slices.Sort(out)
	return out
}

// webUp waits until shop/web publishes exactly the IPs of its two proxy
// nodes and every one of them is probed Up.
func (e *healthEnv) webUp(t *testing.T, timeout time.Duration) []string {
	t.Helper()
	var ips []string
	poll(e.ctx, t, timeout, "shop/web published on its 2 proxy nodes, each probed Up", func() bool {
		e.ctl.alive(t)
		nodes := e.proxyNodes(t)
		if len(nodes) != 2 {
			return false
		}
		ips = e.rec.Last()
		want := []string{e.nodeIP[nodes[0]], e.nodeIP[nodes[1]]}
		slices.Sort(want)
		if !slices.Equal(ips, want) {
			return false
		}
		for _, n := range nodes {
			if scenario.UpVotes(listReports(e.ctx, t, e.dyn), "shop/web", 80, n) < 2 {
				return false
			}
		}
		return true
	})
	return ips
}

// published waits until shop/web is published on its two proxy nodes,
// each probed Up.
func (e *healthEnv) published(t *testing.T) {
	start := time.Now()
	ips := e.webUp(t, 90*time.Second)
	t.Logf("shop/web published on %v after %s", ips, time.Since(start).Round(time.Millisecond))
}

// nodeBlackholed blackholes a proxy node: its IP leaves the status within
// 6 s and a proxy on another node is published, the node is labelled
// unhealthy until it is healed, and the status is never written empty.
func (e *healthEnv) nodeBlackholed(t *testing.T) {
	ctx, c, cs, ctl, rec, nodeIP := e.ctx, e.c, e.cs, e.ctl, e.rec, e.nodeIP
	victim := e.proxyNodes(t)[0]
	ip := nodeIP[victim]
	writesBefore := rec.Count()
	fault, gone := blackholeUntilGone(ctx, t, c, rec, ctl, victim, ip)
	start, dropped := fault.Start, gone[0]
	t.Logf("blackholed %s: its IP left the status %s after the fault", victim, dropped.Round(time.Millisecond))
	// The benchmark (test/bench/failover) holds the 3 s target on a
	// quiet machine; here the bound only catches a broken pipeline on
	// a busy one.
	if dropped > 6*time.Second {
		t.Errorf("failover took %s, want at most 6s", dropped)
	}
	ips := e.webUp(t, 60*time.Second)
	back := time.Since(start)
	if slices.Contains(ips, ip) {
		t.Errorf("status %v still has the blackholed node's %s", ips, ip)
	}
	t.Logf("a proxy on another node published after %s: %v", back.Round(time.Millisecond), ips)
	node, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels[contract.LabelUnhealthy]; !ok {
		t.Errorf("node %s not labelled %s", victim, contract.LabelUnhealthy)
	}
	for _, w := range rec.Since(writesBefore) {
		if len(w.IPs) == 0 {
			t.Errorf("status written empty at %s", w.At.Format(time.RFC3339Nano))
		}
	}
	if err := fault.Heal(ctx); err != nil {
		t.Error(err)
	}
	poll(ctx, t, 30*time.Second, "label "+contract.LabelUnhealthy+" removed from "+victim+" after healing", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		_, labelled := n.Labels[contract.LabelUnhealthy]
		return err == nil && !labelled
	})
}

// aProxy waits until shop/web is up (webUp, 30 s) and returns one of its
// ready proxy pods and the address of its node.
func (e *healthEnv) aProxy(t *testing.T) (corev1.Pod, string) {
	t.Helper()
	e.webUp(t, 30*time.Second)
	pods := readyPods(e.ctx, t, e.cs, systemNamespace, proxyAppSelector)
	return pods[0], e.nodeIP[pods[0].Spec.NodeName]
}

// proxyKilled kills a proxy container: its IP leaves the status and is
// published again once the container has restarted.
func (e *healthEnv) proxyKilled(t *testing.T) {
	ctx, c, cs, ctl, rec := e.ctx, e.c, e.cs, e.ctl, e.rec
	victim, ip := e.aProxy(t)
	start := time.Now()
	if err := c.KillContainer(systemNamespace, victim.Name, "proxy"); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 20*time.Second, "the proxy container of "+victim.Name+" restarted and "+ip+" published again after leaving", func() bool {
		ctl.alive(t)
		p, err := cs.CoreV1().Pods(systemNamespace).Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount < 1 {
			return false
		}
		left := rec.FirstWithout(ip, start)
		return !left.IsZero() && slices.Contains(rec.Last(), ip)
	})
	t.Logf("killed the proxy of %s on %s: IP left after %s, back after %s", victim.Name, victim.Spec.NodeName,
		rec.FirstWithout(ip, start).Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// brokenProxyRestarted cuts a proxy pod off while its process runs: the
// pod is replaced (a ProxyRestarted Event), its IP leaves the status and
// comes back with the replacement on the same node.
func (e *healthEnv) brokenProxyRestarted(t *testing.T) {
	ctx, c, cs, ctl, rec := e.ctx, e.c, e.cs, e.ctl, e.rec
	victim, ip := e.aProxy(t)
	start := time.Now()
	// The proxy process keeps running, but nothing reaches it: only
	// a new pod (a new network namespace) works again.
	if out, err := c.PodExec(ctx, systemNamespace, victim.Name, "iptables", "-w", "-t", "raw", "-I", "PREROUTING", "-p", "tcp", "--dport", "80", "-j", "DROP"); err != nil {
		t.Fatalf("breaking the proxy: %v %s", err, out)
	}
	// Deleted: gone, or terminating while it drains.
	poll(ctx, t, 30*time.Second, "broken proxy pod "+victim.Name+" deleted", func() bool {
		ctl.alive(t)
		p, err := cs.CoreV1().Pods(systemNamespace).Get(ctx, victim.Name, metav1.GetOptions{})
		return err != nil || p.DeletionTimestamp != nil
	})
	t.Logf("broken proxy %s on %s deleted after %s", victim.Name, victim.Spec.NodeName, time.Since(start).Round(time.Millisecond))
	if rec.FirstWithout(ip, start).IsZero() {
		t.Errorf("%s never left the status while its proxy was broken", ip)
	}
	// The controller records its Events asynchronously, after the
	// deletion it reports.
	if err := scenario.Poll(ctx, 10*time.Second, "a ProxyRestarted Event on shop/web", func() bool {
		return hasEventOn(ctx, t, cs, "shop", "web", "ProxyRestarted")
	}); err != nil {
		t.Error(err)
	}
	ips := e.webUp(t, 60*time.Second)
	t.Logf("replacement published after %s: %v", time.Since(start).Round(time.Millisecond), ips)
	// Its node is healthy: the replacement comes back there, once the
	// broken proxy has drained, and so does the address.
	poll(ctx, t, 90*time.Second, "the replacement of "+victim.Name+" ready on "+victim.Spec.NodeName+" and "+ip+" published", func() bool {
		ctl.alive(t)
		back := slices.ContainsFunc(readyPods(ctx, t, cs, systemNamespace, proxyAppSelector+","+contract.LabelServiceName+"=web"), func(p corev1.Pod) bool {
			return p.Name != victim.Name && p.Spec.NodeName == victim.Spec.NodeName
		})
		return back && slices.Contains(rec.Last(), ip)
	})
	t.Logf("replacement back on %s after %s", victim.Spec.NodeName, time.Since(start).Round(time.Millisecond))
}

// proberCutOff cuts one prober off from every other node: inside its pod,
// every new TCP connection to a node address is dropped, so it sees every
// target and beacon time out, while the nodes, the proxies and the
// backends (and the answers to other probers' beacon probes) are fine. A
// whole-node partition would be a real failure of that node (nobody could
// reach its beacon, its proxies or its backends). A single prober changes
// neither the status, nor the proxies, nor the node labels.
func (e *healthEnv) proberCutOff(t *testing.T) {
	ctx, c, cs, dyn, ctl, rec := e.ctx, e.c, e.cs, e.dyn, e.ctl, e.rec
	before := e.webUp(t, 60*time.Second)
	lone := e.proxyNodes(t)[0]
	var proberPod string
	for _, p := range readyPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name="+deploy.ProberName) {
		if p.Spec.NodeName == lone {
			proberPod = p.Name
		}
	}
	cut := []string{"OUTPUT", "-p", "tcp", "--syn", "-d", "198.18.1.0/24", "-j", "DROP"}
	if out, err := c.PodExec(ctx, systemNamespace, proberPod, append([]string{"iptables", "-w", "-I"}, cut...)...); err != nil {
		t.Fatalf("cutting off the prober on %s: %v %s", lone, err, out)
	}
	defer func() {
		if out, err := c.PodExec(ctx, systemNamespace, proberPod, append([]string{"iptables", "-w", "-D"}, cut...)...); err != nil {
			t.Errorf("reconnecting the prober on %s: %v %s", lone, err, out)
			return
		}
		// Its Down votes stand until it probes again: leave the next
		// scenario a cluster whose probers all see the beacons Up, or
		// one transient timeout elsewhere would make a second vote.
		poll(ctx, t, 30*time.Second, "the prober on "+lone+" seeing every beacon Up again", func() bool {
			up, all := 0, 0
			for _, r := range listReports(ctx, t, dyn) {
				if r.Name != lone {
					continue
				}
				for _, res := range r.Status.Beacons {
					all++
					if res.State == "Up" {
						up++
					}
				}
			}
			return all > 0 && up == all
		})
	}()
	podsBefore := podNames(listPods(ctx, t, cs, systemNamespace, proxyAppSelector))
	writesBefore := rec.Count()
	var down int
	poll(ctx, t, 20*time.Second, "the prober on "+lone+" reporting every target and beacon Down", func() bool {
		ctl.alive(t)
		if got := rec.Last(); !slices.Equal(got, before) {
			t.Fatalf("status changed to %v (was %v) while only the prober on %s was cut off", got, before, lone)
		}
		down = 0
		all := 0
		for _, r := range listReports(ctx, t, dyn) {
			if r.Name != lone {
				continue
			}
			for _, res := range append(r.Status.Results, r.Status.Beacons...) {
				all++
				if res.State == "Down" {
					down++
				}
			}
		}
		return all > 0 && down == all
	})
	// A few more evaluations with the lone Down votes in.
	holds(ctx, t, time.Now().Add(3*time.Second), "the status while only the prober on "+lone+" is cut off", func() bool {
		return slices.Equal(rec.Last(), before)
	})
	t.Logf("prober on %s cut off: reports %d targets and beacons Down; status writes meanwhile: %d", lone, down, rec.Count()-writesBefore)
	if podsAfter := podNames(listPods(ctx, t, cs, systemNamespace, proxyAppSelector)); !slices.Equal(podsAfter, podsBefore) {
		t.Errorf("proxy pods changed from %v to %v: a single prober caused a migration", podsBefore, podsAfter)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.LabelUnhealthy})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		t.Errorf("node %s labelled %s by a single prober", n.Name, contract.LabelUnhealthy)
	}
	for _, w := range rec.Since(writesBefore) {
		if !slices.Equal(w.IPs, before) {
			t.Errorf("status written with %v at %s, want %v unchanged", w.IPs, w.At.Format(time.RFC3339Nano), before)
		}
	}
}

// backendNodeCutOff cuts off a node that runs a backend and no proxy.
func (e *healthEnv) backendNodeCutOff(t *testing.T) {
	ctx, c, cs, ctl, rec := e.ctx, e.c, e.cs, e.ctl, e.rec
	// A node that runs a backend of shop/web, and no proxy of it, is
	// cut off: connections through every proxy fail alike whenever
	// kube-proxy picks that backend. The status must stay, the
	// condition say why, and no proxy be restarted.
	before := e.webUp(t, 60*time.Second)
	// The victim runs no proxy and, of web's own backends, as few as
	// possible: some backend must stay reachable, or every port fails
	// and the all-down policy decides instead.
	proxies := e.proxyNodes(t)
	backends := map[string]int{}
	for _, p := range readyPods(ctx, t, cs, "shop", "app=web") {
		backends[p.Spec.NodeName]++
	}
	victim := ""
	for _, n := range c.Nodes() {
		if !slices.Contains(proxies, n) && (victim == "" || backends[n] < backends[victim]) {
			victim = n
		}
	}
	if backends[victim] == len(readyPods(ctx, t, cs, "shop", "app=web")) {
		t.Fatalf("every backend of shop/web runs on %s, the only node without a proxy", victim)
	}
	dep, err := cs.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-pinned", Labels: dep.Spec.Template.Labels},
		Spec: *dep.Spec.Template.Spec.DeepCopy()}
	pinned.Spec.NodeName = victim
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, pinned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cs.CoreV1().Pods("shop").Delete(context.WithoutCancel(ctx), "web-pinned", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	waitPodsRunningIn(ctx, t, cs, "shop", "app=web", 3)
	restartsBefore := countEvents(ctx, t, cs, "shop", "web", "ProxyRestarted")
	writesBefore := rec.Count()
	fault := blackhole(ctx, t, c, victim)
	start := time.Now()
	var cond *metav1.Condition
	poll(ctx, t, 30*time.Second, status.ConditionBackendsReachable+"=False naming web-pinned", func() bool {
		ctl.alive(t)
		svc, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false
		}
		cond = findCondition(svc.Status.Conditions, status.ConditionBackendsReachable)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "web-pinned on "+victim)
	})
	if cond != nil {
		t.Logf("%s cut off with backend web-pinned: condition after %s: %s", victim, time.Since(start).Round(10*time.Millisecond), cond.Message)
	}
	// Long enough for a proxy wrongly blamed to be dropped and
	// restarted (restartAfterDown), from the cut.
	holds(ctx, t, start.Add(restartAfterDown+10*time.Second), "shop/web's addresses while a backend's node is cut off", func() bool {
		return slices.Equal(rec.Last(), before)
	})
	for _, w := range rec.Since(writesBefore) {
		if !slices.Equal(w.IPs, before) {
			t.Errorf("status written with %v at +%s, want %v unchanged", w.IPs, w.At.Sub(start).Round(10*time.Millisecond), before)
		}
	}
	if n := countEvents(ctx, t, cs, "shop", "web", "ProxyRestarted") - restartsBefore; n != 0 {
		t.Errorf("%d ProxyRestarted Events while the fault was behind the proxies", n)
	}
	if !hasEventOn(ctx, t, cs, "shop", "web", "FaultBehindProxies") {
		t.Error("no FaultBehindProxies Event")
	}
	if err := fault.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("shop").Delete(ctx, "web-pinned", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Error(err)
	}
	poll(ctx, t, 60*time.Second, status.ConditionBackendsReachable+"=True again", func() bool {
		svc, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false
		}
		cond := findCondition(svc.Status.Conditions, status.ConditionBackendsReachable)
		return cond != nil && cond.Status == metav1.ConditionTrue
	})
}

// backendDownEverywhere scales the backend to zero: Healthy=False
// (AllDown) with every IP still published, and no proxy restarted.
func (e *healthEnv) backendDownEverywhere(t *testing.T) {
	ctx, cs, ctl := e.ctx, e.cs, e.ctl
	before := e.webUp(t, 60*time.Second)
	restartsBefore := countEvents(ctx, t, cs, "shop", "web", "ProxyRestarted")
	scaleBackend(ctx, t, cs, "web", 0)
	restored := false
	defer func() {
		if !restored {
			scaleBackend(ctx, t, cs, "web", 2)
		}
	}()
	var allDownAt time.Time
	poll(ctx, t, 30*time.Second, status.ConditionHealthy+"=False (AllDown) with every proxy IP still published", func() bool {
		ctl.alive(t)
		svc, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false
		}
		cond := findCondition(svc.Status.Conditions, status.ConditionHealthy)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "AllDown" || !slices.Equal(scenario.IngressOf(svc), before) {
			return false
		}
		allDownAt = cond.LastTransitionTime.Time
		return true
	})
	// The proxies are fine: none is restarted while the backend is down.
	// The controller restarts a proxy whose port has been Down for
	// restartAfterDown while the port is Up on another proxy node; watch
	// past that, and a few evaluations more, from when every node was
	// down, so that a proxy wrongly blamed for the backend is seen.
	holds(ctx, t, allDownAt.Add(restartAfterDown+3*time.Second), "no ProxyRestarted Event while the backend is down everywhere", func() bool {
		return countEvents(ctx, t, cs, "shop", "web", "ProxyRestarted") == restartsBefore
	})
	restored = true
	scaleBackend(ctx, t, cs, "web", 2)
	poll(ctx, t, 60*time.Second, status.ConditionHealthy+"=True again", func() bool {
		svc, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
		cond := findCondition(svc.Status.Conditions, status.ConditionHealthy)
		return err == nil && cond != nil && cond.Status == metav1.ConditionTrue
	})
}

// flappingTarget flaps a proxy's port for 12 s: hysteresis and the quorum
// keep the status writes to a handful.
func (e *healthEnv) flappingTarget(t *testing.T) {
	ctx, c, rec, nodeIP := e.ctx, e.c, e.rec, e.nodeIP
	e.webUp(t, 60*time.Second)
	node := e.proxyNodes(t)[0]
	writesBefore := rec.Count()
	const flapFor = 12 * time.Second
	rule := []string{"PREROUTING", "-p", "tcp", "-d", nodeIP[node], "--dport", "80", "-j", "DROP"}
	flips := 0
	start := time.Now()
	for time.Since(start) < flapFor {
		op := "-I"
		if flips%2 == 1 {
			op = "-D"
		}
		if out, err := c.Exec(ctx, node, append([]string{"iptables", "-w", "-t", "raw", op}, rule...)...); err != nil {
			t.Fatalf("flapping: %v %s", err, out)
		}
		flips++
		time.Sleep(300 * time.Millisecond)
	}
	if flips%2 == 1 {
		_, _ = c.Exec(ctx, node, append([]string{"iptables", "-w", "-t", "raw", "-D"}, rule...)...)
	}
	writes := rec.Count() - writesBefore
	t.Logf("port 80 on %s flapped %d times in %s: %d status writes", node, flips, flapFor, writes)
	// Without hysteresis every flip could be a write; rise/fall 2 and
	// the quorum keep it to a handful.
	if limit := 6; writes > limit {
		t.Errorf("%d status writes while flapping for %s, want at most %d", writes, flapFor, limit)
	}
	e.webUp(t, 60*time.Second)
}

// probeProtocols probes a Service's ports with each protocol against the
// echo backend: the right prober per port, the echo's ports Up, the TLS
// ports' certificate expiry reported, MySQL Down, a bad probe an Event.
func (e *healthEnv) probeProtocols(t *testing.T) {
	ctx, cs, dyn, ctl := e.ctx, e.cs, e.dyn, e.ctl
	createBackend(ctx, t, cs, "protos", 1, []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8081}, {Name: "https", ContainerPort: 8443}, {Name: "tls", ContainerPort: 8444},
		{Name: "mysql", ContainerPort: 3306}, {Name: "wrong", ContainerPort: 8082},
		{Name: "udp", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}, {Name: "dns", ContainerPort: 5354, Protocol: corev1.ProtocolUDP},
	})
	annotations := map[string]string{
		contract.AnnotationReplicas:              "1",
		contract.AnnotationProbePrefix + "http":  "http path=/healthz status=200",
		contract.AnnotationProbePrefix + "https": "https verify=false",
		contract.AnnotationProbePrefix + "tls":   "tls verify=false",
		contract.AnnotationProbePrefix + "mysql": "mysql",
		contract.AnnotationProbePrefix + "udp":   `udp send=hello expect=hello`,
		contract.AnnotationProbePrefix + "dns":   "dns name=example.test",
		contract.AnnotationProbePrefix + "wrong": "http status=teapot",
	}
	ports := []corev1.ServicePort{
		{Name: "http", Port: 8081, TargetPort: intstr.FromString("http")},
		{Name: "https", Port: 8443, TargetPort: intstr.FromString("https")},
		{Name: "tls", Port: 8444, TargetPort: intstr.FromString("tls")},
		{Name: "mysql", Port: 3306, TargetPort: intstr.FromString("mysql")},
		{Name: "wrong", Port: 8082, TargetPort: intstr.FromString("wrong")},
		{Name: "udp", Port: 5353, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("udp")},
		{Name: "dns", Port: 5354, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
	}
	createHealthLB(ctx, t, cs, "protos", annotations, ports)
	want := map[int32]string{8081: "http", 8443: "https", 8444: "tls", 3306: "mysql", 8082: "tcp", 5353: "udp", 5354: "dns"}
	var seen map[int32]scenario.ProbeResult
	expectUp := []int32{8081, 8443, 8444, 8082, 5353}
	poll(ctx, t, 60*time.Second, "ProbeReports concluding about every port of shop/protos, the echo backend's ports Up", func() bool {
		ctl.alive(t)
		seen = map[int32]scenario.ProbeResult{}
		for _, r := range listReports(ctx, t, dyn) {
			for _, res := range r.Status.Results {
				// One vantage's result per port; an Up one if any.
				if prev, ok := seen[res.Port]; res.Service == "shop/protos" && (!ok || prev.State != "Up") {
					seen[res.Port] = res
				}
			}
		}
		for _, p := range expectUp {
			if seen[p].State != "Up" {
				return false
			}
		}
		return len(seen) == len(want)
	})
	for port, proto := range want {
		r := seen[port]
		t.Logf("port %d: protocol %s, %s %s %s", port, r.Protocol, r.State, r.Outcome, r.Message)
		if r.Protocol != proto {
			t.Errorf("port %d probed with %q, want %q", port, r.Protocol, proto)
		}
	}
	for _, port := range expectUp {
		if seen[port].State != "Up" {
			t.Errorf("port %d (%s) is %s (%s %s), want Up against the echo backend", port, want[port], seen[port].State, seen[port].Outcome, seen[port].Message)
		}
	}
	// The TLS ports report when the echo backend's certificate
	// expires; the expiry is written at the latest at the next
	// comparison (every heartbeat, 10 s).
	poll(ctx, t, 30*time.Second, "the https and tls ports reported with their certificate's expiry", func() bool {
		got := map[int32]bool{}
		for _, r := range listReports(ctx, t, dyn) {
			for _, res := range r.Status.Results {
				if res.Service != "shop/protos" || res.CertNotAfter == nil {
					continue
				}
				if res.Port != 8443 && res.Port != 8444 {
					t.Fatalf("port %d (%s) reported a certificate expiry %s", res.Port, want[res.Port], res.CertNotAfter)
				}
				if !res.CertNotAfter.After(time.Now()) {
					t.Fatalf("port %d: certificate expiry %s is not in the future", res.Port, res.CertNotAfter)
				}
				got[res.Port] = true
			}
		}
		return got[8443] && got[8444]
	})
	// The echo backend is no MySQL server: the credential-less
	// handshake gets no greeting, which must read as Down with a
	// timeout past the TCP connect. A report is rewritten when a
	// Down target's reason changes, at the latest at the next
	// comparison (10 s), so the first Down (refused while the proxy
	// started) may still show.
	var mysql scenario.ProbeResult
	poll(ctx, t, 30*time.Second, "the mysql port reported Down after connecting (no greeting)", func() bool {
		mysql = scenario.ProbeResult{}
		for _, r := range listReports(ctx, t, dyn) {
			for _, res := range r.Status.Results {
				if res.Service == "shop/protos" && res.Port == 3306 && !strings.HasPrefix(res.Outcome, "L4") {
					mysql = res
				}
			}
		}
		return mysql.Outcome != ""
	})
	t.Logf("mysql against the echo backend: %s %s %s", mysql.State, mysql.Outcome, mysql.Message)
	if mysql.State != "Down" {
		t.Errorf("mysql against the echo backend is %s (%s %s), want Down", mysql.State, mysql.Outcome, mysql.Message)
	}
	if !hasEventOn(ctx, t, cs, "shop", "protos", "InvalidAnnotation") {
		t.Errorf("no InvalidAnnotation Event for pulselb.io/probe.wrong")
	}
}

// installProbeReportCRD creates the CRD from deploy/crds/ and waits until
// it is established.
func createBackend(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, replicas int32, ports []corev1.ContainerPort) {
	t.Helper()
	if _, err := cs.AppsV1().Deployments("shop").Create(ctx, cluster.EchoDeployment("shop", name, replicas, ports...), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment %s: %v", name, err)
	}
	waitPodsRunningIn(ctx, t, cs, "shop", "app="+name, int(replicas))
}

func scaleBackend(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	s, err := cs.AppsV1().Deployments("shop").GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := cs.AppsV1().Deployments("shop").UpdateScale(ctx, name, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scaling %s to %d: %v", name, replicas, err)
	}
	waitPodsRunningIn(ctx, t, cs, "shop", "app="+name, int(replicas))
}

func createHealthLB(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, annotations map[string]string, ports []corev1.ServicePort) {
	t.Helper()
	if _, err := cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Annotations: annotations},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name}, Ports: ports},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func countEvents(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, reason string) int {
	t.Helper()
	l, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	n := 0
	for _, e := range l.Items {
		n += int(max(1, e.Count))
	}
	return n
}

func hasEventOn(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, reason string) bool {
	t.Helper()
	return countEvents(ctx, t, cs, ns, name, reason) > 0
}

// installProbers makes the namespaces pulselb-system and shop on c and
// installs the ProbeReport CRD and the probers (at --v=2, with args), as
// the health scenarios start; it returns a dynamic client for the reports.
func installProbers(t *testing.T, c *cluster.Cluster, args ...string) dynamic.Interface {
	t.Helper()
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespaces(ctx, systemNamespace, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := deploy.InstallProbeReportCRD(ctx, dyn, systemNamespace); err != nil {
		t.Fatal(err)
	}
	if err := deploy.InstallProbers(ctx, c.Client, systemNamespace, append([]string{"--v=2"}, args...)...); err != nil {
		t.Fatal(err)
	}
	return dyn
}

// listReports returns the ProbeReports; nil when they cannot be listed
// (the callers poll).
func listReports(ctx context.Context, t *testing.T, dyn dynamic.Interface) []scenario.ProbeReport {
	t.Helper()
	reports, err := scenario.ListReports(ctx, dyn, systemNamespace)
	if errors.Is(err, scenario.ErrDecoding) {
		t.Fatal(err)
	}
	return reports
}
