package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// apiOutage is how long leaderNodeCutAfterAPIOutage keeps the API server
// stopped: client-go's reflectors, failing all along, then wait 13-26 s
// between their tries, so a cache on the default back-off resumes tens of
// seconds after the server is back.
const apiOutage = 20 * time.Second

// leaderNodeCutAfterAPIOutage stops the API server for apiOutage, and as
// soon as every node reaches it again and a controller leads, cuts off the
// leader's node: the standby must see that node fail from its verdicts and
// take over within the failover bound. Its ProbeReport cache is what it
// judges from; before the controller's informers redialed, that cache was
// still backing off when the node failed, and the status kept the dead
// node until the Lease lapsed (the fault soak's "leader's node cut 8 s
// after an API server restart").
func leaderNodeCutAfterAPIOutage(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	cs := c.Client
	settled(ctx, t, c)
	const name = "outage"
	publishEverywhere(ctx, t, c, ns, name, 8100)
	t.Cleanup(func() {
		if err := cs.CoreV1().Services(ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
	nodes := c.Nodes()
	outage := time.Now()
	if err := c.APIServerOutage(ctx, apiOutage); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	// Each node's kube-proxy programs the kubernetes Service again only
	// when its own watch is back, on client-go's back-off: up to a minute.
	if err := c.WaitAPIService(ctx, nodes, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server stopped %s, ready %s after it stopped, reachable from every node %s after that",
		apiOutage, ready.Sub(outage).Round(10*time.Millisecond), time.Since(ready).Round(10*time.Millisecond))
	leader, ok := oneLeader(ctx, t, c, "one controller leading after the outage")
	if !ok {
		return
	}
	victim := leader.Spec.NodeName
	victimIP := c.NodeIPs()[victim]
	// A recorder started now: its own watch is new, not one backing off.
	rec := scenario.RecordStatus(ctx, cs, ns, name)
	poll(ctx, t, 10*time.Second, "the status recorder's first observation", func() bool { return rec.Count() > 0 })
	if !slices.Contains(rec.Last(), victimIP) {
		t.Fatalf("%s (%s, the leader's node) not in %s/%s's status before the cut: %v", victimIP, victim, ns, name, rec.Last())
	}

	fault := blackhole(ctx, t, c, victim)
	start := time.Now()
	t.Logf("cut off %s (the leader %s's node) %s after the API server was ready", victim, leader.Name, start.Sub(ready).Round(10*time.Millisecond))
	poll(ctx, t, 40*time.Second, victimIP+" ("+victim+", the leader's node) gone from "+ns+"/"+name+"'s status", func() bool {
		return !rec.FirstWithout(victimIP, start).IsZero()
	})
	dropped := rec.FirstWithout(victimIP, start).Sub(start)
	t.Logf("the leader's node %s (%s) left the status %s after it was cut off", victim, victimIP, dropped.Round(10*time.Millisecond))
	if dropped > 5*time.Second {
		t.Errorf("the leader's node left the status %s after it was cut off, want within 5s (the Lease lasts 15s)\n%s",
			dropped.Round(10*time.Millisecond), controllerLogs(ctx, t, c))
	}
	// Every controller replica serves DNS from its own cache: the ones
	// still reached answer without the dead node within 3 s of the status
	// (the fault soak saw clients sent to a node 18-26 s after it had left
	// every status, right after an API server restart).
	dropped = rec.FirstWithout(victimIP, start).Sub(start)
	for _, p := range listPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name=pulselb-controller") {
		if p.Spec.NodeName == victim || p.Status.PodIP == "" {
			continue
		}
		from := "node-1"
		if victim == from {
			from = "node-3"
		}
		var answer []string
		poll(ctx, t, 10*time.Second, fmt.Sprintf("the DNS of %s (on %s) answering %s.%s.%s without %s", p.Name, p.Spec.NodeName, name, ns, installedZone, victimIP), func() bool {
			out, err := c.Exec(ctx, from, "dig", "+short", "+time=1", "+tries=1", "-p", "5353", "@"+p.Status.PodIP, name+"."+ns+"."+installedZone, "A")
			answer = strings.Fields(string(out))
			return err == nil && len(answer) > 0 && !slices.Contains(answer, victimIP)
		})
		if late := time.Since(start) - dropped; late > 3*time.Second {
			t.Errorf("the DNS of %s answered without %s %s after the status did, want within 3s", p.Name, victimIP, late.Round(10*time.Millisecond))
		}
		t.Logf("the DNS of %s answers %v", p.Name, answer)
	}
	if err := fault.Heal(context.WithoutCancel(ctx)); err != nil {
		t.Error(err)
	}
	poll(ctx, t, 90*time.Second, victimIP+" back in "+ns+"/"+name+"'s status", func() bool {
		return slices.Contains(rec.Last(), victimIP)
	})
}
