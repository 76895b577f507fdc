package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/status"
)

// TestFaultBehindProxies: port 80 of shop/web is Down by quorum on n1 while
// n1's beacon is up. Whether n1 leaves the status depends on whether the
// fault is n1's or behind every proxy.
func TestFaultBehindProxies(t *testing.T) {
	tests := []struct {
		name string
		// n2Failing: a vantage (n3) also saw port 80 Down on n2, below
		// quorum; n3Down: n3's beacon is Down, and a backend runs there.
		n2Failing, n3Down bool
		// n1BeaconFailing: a vantage (n3) sees n1's beacon Down too.
		n1BeaconFailing bool
		wantIngress     []string
		wantHeld        bool
		wantEndpoint    string
	}{
		{name: "only n1 fails: its own fault, it fails over", wantIngress: []string{"10.0.0.2"}},
		// Failures elsewhere without a failed backend node are no proof: a
		// proxy broken on n1 must still fail over (e2e BrokenProxyRestarted).
		{name: "n2 failed too, no backend node failed: n1 fails over", n2Failing: true, wantIngress: []string{"10.0.0.2"}},
		{name: "n2 failed shortly before, but n1's beacon fails too: n1's own fault, it fails over", n2Failing: true, n1BeaconFailing: true,
			wantIngress: []string{"10.0.0.2"}},
		{name: "a backend's node failed: behind the proxies", n3Down: true, wantIngress: []string{"10.0.0.1", "10.0.0.2"}, wantHeld: true,
			wantEndpoint: "pod shop/web-backend-0 on n3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := published(newService("web"), "n1,n2")
			svc.Spec.Selector = map[string]string{"app": "web"}
			reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateUp})
			for _, r := range reports {
				for i, res := range r.Status.Results {
					if tt.n2Failing && r.Name == "n3" && res.Node == "n2" {
						r.Status.Results[i].Observation = observation("n2", v1alpha1.StateDown)
					}
				}
				for i, b := range r.Status.Beacons {
					if tt.n3Down && b.Node == "n3" {
						r.Status.Beacons[i].Observation = observation("n3", v1alpha1.StateDown)
					}
					if tt.n1BeaconFailing && r.Name == "n3" && b.Node == "n1" {
						r.Status.Beacons[i].Observation = observation("n1", v1alpha1.StateDown)
					}
				}
			}
			eps := endpointSlice(svc, endpoint{node: "n3", ready: true}, endpoint{node: "n4", ready: true})
			eps.Endpoints[0].TargetRef = podRef("web-backend-0")
			f := newFixture(t, cluster(svc)...)
			c := f.healthController(ctx, reports...)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := idx.Add(eps); err != nil {
				t.Fatal(err)
			}
			c.slices = discoverylisters.NewEndpointSliceLister(idx)
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			got := f.service(ctx, "shop", "web")
			if ips := ingressIPs(got); !slices.Equal(ips, tt.wantIngress) {
				t.Errorf("ingress %v, want %v", ips, tt.wantIngress)
			}
			cond := findCond(got.Status.Conditions, status.ConditionBackendsReachable)
			switch {
			case !tt.wantHeld && cond != nil:
				t.Errorf("condition %v on a fault of n1's own", cond)
			case tt.wantHeld && (cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "TCP/80") ||
				!strings.Contains(cond.Message, tt.wantEndpoint)):
				t.Errorf("condition %+v, want False naming TCP/80 and %q", cond, tt.wantEndpoint)
			}
			if ev := f.events(); tt.wantHeld != hasEvent(ev, status.ReasonFaultBehind) {
				t.Errorf("events %v; want %s: %v", ev, status.ReasonFaultBehind, tt.wantHeld)
			}

			// Long enough Down to restart a broken proxy: only n1's own
			// fault restarts it.
			f.client.ClearActions()
			later := testNow.Add(RestartAfterDown + time.Second)
			c.now = func() time.Time { return later }
			setReports(t, c, later, reports...)
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			restarted := slices.ContainsFunc(f.writes(), func(w string) bool { return strings.HasPrefix(w, "delete pods") })
			if restarted == tt.wantHeld {
				t.Errorf("writes %v: restarted %v, want %v", f.writes(), restarted, !tt.wantHeld)
			}
		})
	}
}

func podRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: name}
}

func findCond(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
