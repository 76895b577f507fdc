package e2e

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// TestLeaseUpgrade rolls the prober DaemonSet from report heartbeats
// (--lease-heartbeat=false, as probers before Leases) to Lease heartbeats
// node by node, under a controller that judges by both: while old and new
// probers vote together, and after every report has gone a heartbeat
// window without a write, shop/web keeps both its IPs (no false verdict)
// and no node is labelled unhealthy; then a blackholed proxy node still
// leaves the status within seconds, judged by probers fresh by their Leases
// alone.
func TestLeaseUpgrade(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 4, WaitForMachine: 30 * time.Minute})
	ctx := t.Context()
	cs := c.Client
	dyn := installProbers(t, c, "--lease-heartbeat=false")
	poll(ctx, t, 90*time.Second, "a ProbeReport from every node", func() bool {
		return len(listReports(ctx, t, dyn)) == 4
	})
	proberLeases := func() int {
		l, err := cs.CoordinationV1().Leases(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + deploy.ProberName})
		if err != nil {
			t.Fatalf("listing prober Leases: %v", err)
		}
		return len(l.Items)
	}
	if n := proberLeases(); n != 0 {
		t.Fatalf("%d prober Leases from probers told to keep none", n)
	}
	ctl := startController(t, c, freeLoopbackPort(t), "--probe-reports=true")

	createBackend(ctx, t, cs, "web", 2, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	rec := scenario.RecordStatus(ctx, cs, "shop", "web")
	createHealthLB(ctx, t, cs, "web", nil, []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}})
	nodeIP := c.NodeIPs()
	proxyNodes := func() []string {
		var out []string
		for _, p := range readyPods(ctx, t, cs, systemNamespace, proxyAppSelector) {
			out = append(out, p.Spec.NodeName)
		}
		slices.Sort(out)
		return out
	}
	var published []string
	poll(ctx, t, 90*time.Second, "shop/web published on its 2 proxy nodes by old probers", func() bool {
		ctl.alive(t)
		nodes := proxyNodes()
		if len(nodes) != 2 {
			return false
		}
		published = []string{nodeIP[nodes[0]], nodeIP[nodes[1]]}
		slices.Sort(published)
		return slices.Equal(rec.Last(), published) && scenario.UpVotes(listReports(ctx, t, dyn), "shop/web", 80, nodes[0]) >= 2 &&
			scenario.UpVotes(listReports(ctx, t, dyn), "shop/web", 80, nodes[1]) >= 2
	})
	writesBefore := rec.Count()
	// Verdict Events on shop/web: those of its start-up (a proxy probed
	// before it serves) are not the upgrade's.
	verdictEvents := func() int {
		return countEvents(ctx, t, cs, "shop", "web", "NodeFailed") + countEvents(ctx, t, cs, "shop", "web", "TargetDown")
	}
	eventsBefore := verdictEvents()

	// The upgrade: the same DaemonSet without the flag, rolled node by node.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		ds, err := cs.AppsV1().DaemonSets(systemNamespace).Get(ctx, deploy.ProberName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ctr := &ds.Spec.Template.Spec.Containers[0]
		ctr.Args = slices.DeleteFunc(ctr.Args, func(a string) bool { return a == "--lease-heartbeat=false" })
		_, err = cs.AppsV1().DaemonSets(systemNamespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("upgrading the prober DaemonSet: %v", err)
	}
	upgraded := time.Now()
	poll(ctx, t, 3*time.Minute, "a prober Lease for every node", func() bool {
		ctl.alive(t)
		return proberLeases() == 4
	})
	t.Logf("every prober keeps a Lease %s after the upgrade began", time.Since(upgraded).Round(time.Millisecond))

	// Past three heartbeats (30 s) without a change, no report's own
	// heartbeat keeps it fresh: the Leases must.
	quiet := time.Now().Add(40 * time.Second)
	poll(ctx, t, time.Minute, "40 s of new probers with reports unchanged", func() bool {
		ctl.alive(t)
		return time.Now().After(quiet)
	})
	for _, w := range rec.Since(writesBefore) {
		if !slices.Equal(w.IPs, published) {
			t.Errorf("status written with %v at %s during the upgrade, want %v throughout", w.IPs, w.At.Format(time.RFC3339Nano), published)
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if _, ok := n.Labels[contract.LabelUnhealthy]; ok {
			t.Errorf("node %s labelled %s during the upgrade", n.Name, contract.LabelUnhealthy)
		}
	}
	if n := verdictEvents(); n != eventsBefore {
		l, _ := cs.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web"})
		for _, e := range l.Items {
			t.Logf("event %s %s x%d: %s", e.LastTimestamp.Format(time.RFC3339), e.Reason, e.Count, e.Message)
		}
		t.Errorf("%d NodeFailed or TargetDown Events on shop/web during the upgrade, want none", n-eventsBefore)
	}

	victim := proxyNodes()[0]
	ip := nodeIP[victim]
	_, gone := blackholeUntilGone(ctx, t, c, rec, ctl, victim, ip)
	dropped := gone[0]
	t.Logf("blackholed %s after the upgrade: its IP left the status %s after the fault", victim, dropped.Round(time.Millisecond))
	if dropped > 6*time.Second {
		t.Errorf("failover took %s, want at most 6s", dropped)
	}
}
