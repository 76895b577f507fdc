package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/status"
)

// judged returns how many targets c's evaluations judged so far in rounds
// of kind round ("full" or "changed").
func judged(c *Controller, round string) float64 {
	return testutil.ToFloat64(c.metrics.judgedTargets.WithLabelValues(round))
}

// drainUrgent empties c's queue of Services whose verdicts changed and
// returns what it held.
func drainUrgent(c *Controller) []cache.ObjectName {
	var out []cache.ObjectName
	for c.urgent.Len() > 0 {
		k, _ := c.urgent.Get()
		c.urgent.Done(k)
		c.urgent.Forget(k)
		out = append(out, k)
	}
	return out
}

// TestEvaluateJudgesOnlyWhatChanged: after a first round that judges every
// target, a round in which nothing changed judges none and queues nothing;
// a changed report judges again the targets it changed and queues, on the
// failover queue, the Service whose verdict changed; a change of a Service
// that is only its status lists nothing again.
func TestEvaluateJudgesOnlyWhatChanged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	up := map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": v1alpha1.StateUp}
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx, meshReports(svc, up)...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	// Four beacons and port 80 on n1 and n2.
	if got := judged(c, "full"); got != 6 {
		t.Fatalf("first round judged %v targets, want all 6", got)
	}
	drainUrgent(c)

	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if got := judged(c, "changed") + judged(c, "full"); got != 6 {
		t.Errorf("a round without news judged %v targets in all, want none more than the first 6", got-6)
	}
	if q := drainUrgent(c); len(q) != 0 {
		t.Errorf("a round without news queued %v", q)
	}

	// The Service's status is written: not a change of its targets.
	written := svc.DeepCopy()
	written.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
	if err := f.cluster.Core().V1().Services().Informer().GetIndexer().Update(written); err != nil {
		t.Fatal(err)
	}
	// Port 80 on n1 goes Down in two of its three vantages' reports.
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateUp})
	for _, r := range reports {
		if r.Name == "n4" {
			r.Status.Results[0].State = v1alpha1.StateUp
		}
	}
	setReports(t, c, testNow, reports...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if got := judged(c, "full"); got != 6 {
		t.Errorf("the status write listed the targets again: %v judged in full rounds, want 6", got)
	}
	if got := judged(c, "changed"); got != 1 {
		// Every report was replaced, and says the same as before but
		// about port 80 on n1.
		t.Errorf("judged %v targets after the reports changed, want 1: port 80 on n1", got)
	}
	tk := contract.TargetKey("shop/web", "TCP", 80, "n1")
	if j := c.verdicts.Verdict(tk); j.Verdict != status.VerdictDown {
		t.Fatalf("port 80 on n1: %v (%s), want Down", j.Verdict, j.Summary())
	}
	if q := drainUrgent(c); len(q) != 1 || q[0] != key(svc) {
		t.Errorf("failover queue %v, want %v", q, key(svc))
	}
}

// TestEvaluateStalenessWithoutNews: a vantage whose Lease lapses stops
// counting at the next round although no report, Lease or other object
// changed, and a proxy that stops starting is noticed by the time alone.
func TestEvaluateStalenessWithoutNews(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	leases := cache.NewSharedIndexInformer(&cache.ListWatch{}, &coordinationv1.Lease{}, 0, cache.Indexers{})
	f.cfg.Health.Leases = leases
	c := f.healthController(ctx,
		withBeacon(report("n2", time.Hour), "n1", v1alpha1.StateDown),
		withBeacon(report("n3", time.Hour), "n1", v1alpha1.StateDown),
		withBeacon(report("n4", time.Hour), "n1", v1alpha1.StateUp))
	// Leases last 30 s: n2's and n3's lapse 10 s after testNow.
	for _, l := range []*coordinationv1.Lease{proberLease("n2", 20*time.Second), proberLease("n3", 20*time.Second), proberLease("n4", 0)} {
		if err := leases.GetStore().Add(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	beacon := contract.BeaconKey("n1")
	if j := c.verdicts.Verdict(beacon); j.Verdict != status.VerdictDown {
		t.Fatalf("beacon n1: %v (%s), want Down by 2 of 3", j.Verdict, j.Summary())
	}
	full := judged(c, "full")

	later := testNow.Add(11 * time.Second)
	c.now = func() time.Time { return later }
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if j := c.verdicts.Verdict(beacon); j.Verdict != status.VerdictUp {
		t.Errorf("beacon n1 after its Down votes' Leases lapsed: %v (%s), want Up by the one fresh vantage", j.Verdict, j.Summary())
	}
	if got := judged(c, "full"); got != full {
		t.Errorf("the round listed the targets again (%v judged in full rounds, want %v): nothing but the time changed", got, full)
	}
	if got := judged(c, "changed"); got == 0 {
		t.Error("the round judged nothing again, want the targets the lapsed vantages probe")
	}
}

// TestStartingEndsListsTargetsAgain: a proxy still starting when the
// targets were listed counts as started once its window passes, with no
// change of any object, so that its Down verdict is announced then (Late).
func TestStartingEndsListsTargetsAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	created := testNow.Add(-2 * time.Second)
	ready := testNow.Add(-time.Second)
	objs := []runtime.Object{svc, startingPod(svc, "n1", created, ready)}
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		objs = append(objs, newNode(n, "10.0.0."+string(rune('1'+i))), proberPod(n))
	}
	f := newFixture(t, objs...)
	c := f.healthController(ctx, meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown})...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if w := warnings(f.events()); len(w) > 0 {
		t.Fatalf("Warnings while the proxy starts: %v", w)
	}
	if c.judging.startingEnds.IsZero() {
		t.Fatal("no end of the start remembered")
	}
	c.now = func() time.Time { return c.judging.startingEnds }
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if w := warnings(f.events()); len(w) != 1 {
		t.Errorf("Warnings once the proxy has started %v, want one TargetDown", w)
	}
}

// TestSeenObjects: a cache's objects replaced by updates that change
// nothing the targets are made of are no change; an added, deleted or
// relevantly changed one is.
func TestSeenObjects(t *testing.T) {
	n1, n2 := newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2")
	var s seenObjects
	if !s.changed([]any{n1, n2}) {
		t.Error("first look: no change, want one")
	}
	if s.changed([]any{n2, n1}) {
		t.Error("the same objects: a change")
	}
	beat := n1.DeepCopy()
	beat.Status.Conditions[0].LastHeartbeatTime.Time = testNow
	if s.changed([]any{beat, n2}) {
		t.Error("a heartbeat: a change")
	}
	zoned := beat.DeepCopy()
	zoned.Labels[corev1.LabelTopologyZone] = "b"
	if !s.changed([]any{zoned, n2}) {
		t.Error("a new zone: no change")
	}
	if !s.changed([]any{zoned}) {
		t.Error("a node deleted: no change")
	}
	if !s.changed([]any{zoned, n2}) {
		t.Error("a node added: no change")
	}
}

// TestSyncExclusive: a Service in both queues is never synced by two
// workers at once.
func TestSyncExclusive(t *testing.T) {
	var l keyLocks
	k := cache.NewObjectName("shop", "web")
	l.lock(k)
	done := make(chan struct{})
	go func() {
		l.lock(k)
		l.unlock(k)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a second lock of the same key did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	other := cache.NewObjectName("shop", "api")
	l.lock(other) // another key does not wait
	l.unlock(other)
	l.unlock(k)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting lock never got the key")
	}
}
