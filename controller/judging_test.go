package controller

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

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

// TestEvaluateAsFullRounds drives a controller through random rounds of
// reports, Leases and time, and judges the same caches in full beside it
// every round (status.Engine.Judge over reportIndex and healthTargets, as
// evaluate did before it kept its state between rounds): the verdicts must
// be the same in every round.
func TestEvaluateAsFullRounds(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			rng := rand.New(rand.NewPCG(seed, 2))
			svc := published(newService("web"), "n1,n2")
			f := newFixture(t, cluster(svc)...)
			leases := cache.NewSharedIndexInformer(&cache.ListWatch{}, &coordinationv1.Lease{}, 0, cache.Indexers{})
			f.cfg.Health.Leases = leases
			nodes := []string{"n1", "n2", "n3", "n4"}
			var reports []*v1alpha1.ProbeReport
			for _, n := range nodes {
				reports = append(reports, report(n, time.Hour))
			}
			c := f.healthController(ctx, reports...)
			now := testNow
			c.now = func() time.Time { return now }
			targets, err := c.healthTargets()
			if err != nil {
				t.Fatal(err)
			}
			// says[by][key] is what prober by reports about key.
			says := map[string]map[string]v1alpha1.State{}
			for _, n := range nodes {
				says[n] = map[string]v1alpha1.State{}
			}
			write := func(by string) {
				r := report(by, time.Hour)
				for _, tg := range targets {
					st := says[by][tg.Key]
					if st == "" || !slices.Contains(tg.Vantages, by) {
						continue
					}
					if tg.Beacon {
						withBeacon(r, tg.Node, st)
					} else {
						withResult(r, svc, tg.port.Port, tg.Node, st)
					}
				}
				if err := c.cfg.Health.Reports.GetStore().Update(r); err != nil {
					t.Fatal(err)
				}
			}
			renew := func(by string) {
				l := proberLease(by, 0)
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
				if err := leases.GetStore().Update(l); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range nodes {
				renew(n)
			}
			states := []v1alpha1.State{v1alpha1.StateUp, v1alpha1.StateDown, ""}
			var shadow status.Engine
			downs := 0
			for round := range 300 {
				for range rng.IntN(4) {
					by := nodes[rng.IntN(len(nodes))]
					tg := targets[rng.IntN(len(targets))]
					says[by][tg.Key] = states[rng.IntN(len(states))]
					write(by)
				}
				if rng.IntN(3) == 0 {
					// Every vantage of a target at once.
					tg := targets[rng.IntN(len(targets))]
					st := states[rng.IntN(2)]
					for _, by := range tg.Vantages {
						says[by][tg.Key] = st
						write(by)
					}
				}
				for _, n := range nodes {
					// Leases last 30 s: some lapse.
					if rng.IntN(2) != 0 {
						renew(n)
					}
				}
				if err := c.evaluate(ctx, healthKey); err != nil {
					t.Fatal(err)
				}
				shadow.Judge(c.reportIndex(now), statusTargets(targets), now)
				for _, tg := range targets {
					if got, want := c.verdicts.Verdict(tg.Key), shadow.Verdict(tg.Key); !reflect.DeepEqual(got, want) {
						t.Fatalf("round %d: %s: %+v, judged in full %+v", round, tg.Key, got, want)
					}
					if shadow.Verdict(tg.Key).Verdict == status.VerdictDown {
						downs++
					}
				}
				now = now.Add(time.Duration(200+rng.IntN(12000)) * time.Millisecond)
			}
			if downs == 0 || judged(c, "changed") == 0 {
				t.Fatalf("no Down verdict (%d) or no round that judged only what changed (%v): the test tests nothing", downs, judged(c, "changed"))
			}
		})
	}
}
