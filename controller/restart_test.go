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

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

func TestDecideRestart(t *testing.T) {
	const (
		up   = status.VerdictUp
		down = status.VerdictDown
		unk  = status.VerdictUnknown
	)
	http := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 80}
	https := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 443}
	ports := func(h, s status.Verdict) map[contract.PortKey]status.Verdict {
		return map[contract.PortKey]status.Verdict{http: h, https: s}
	}
	now := testNow
	tests := []struct {
		name   string
		in     restartInput
		want   bool
		reason string
	}{
		{"every port up", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(up, up), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepPortsUp},
		{"no verdict yet", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(unk, unk), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepPortsUp},
		{"proxy broken: down here, up elsewhere", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			true, restartPortDown},
		{"one port down here, that port up elsewhere", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(up, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			true, restartPortDown},
		{"node down: the node's problem, not the proxy's", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: down, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepNodeNotUp},
		{"node beacon not judged yet", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: unk, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepNodeNotUp},
		{"backend down everywhere", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(down, down), ports(down, down)}, Now: now},
			false, keepBackendDown},
		{"one backend port down everywhere", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(up, down), Others: []map[contract.PortKey]status.Verdict{ports(up, down)}, Now: now},
			false, keepBackendDown},
		{"single proxy, all down", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Now: now},
			false, keepBackendDown},
		{"other proxy not judged yet", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(unk, unk)}, Now: now},
			false, keepBackendDown},
		{"in backoff", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now, NotBefore: now.Add(time.Second)},
			false, keepBackoff},
		{"backoff over", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now, NotBefore: now},
			true, restartPortDown},
		{"pod ready too short", restartInput{Running: true, ReadyFor: RestartGrace - time.Second, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepNotReadyLongEnough},
		{"pod not ready", restartInput{Running: true, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepNotReadyLongEnough},
		{"port down too short: the other nodes may follow", restartInput{Running: true, ReadyFor: time.Minute, DownFor: RestartAfterDown - time.Second, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepDownTooShort},
		{"pod not running", restartInput{Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now},
			false, keepNotRunning},
		{"Local: the node has no serving endpoint", restartInput{Running: true, ReadyFor: time.Minute, DownFor: time.Minute, Beacon: up, Ports: ports(down, down), Others: []map[contract.PortKey]status.Verdict{ports(up, up)}, Now: now, NoLocalEndpoint: true},
			false, keepNoLocalEndpoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := decideRestart(tt.in)
			if got != tt.want || reason != tt.reason {
				t.Errorf("decideRestart = %v, %q; want %v, %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

func TestRestartBackoff(t *testing.T) {
	var r restartBackoffs
	const key = "shop/web@n1"
	now := testNow
	var waits []time.Duration
	for range 8 {
		if nb := r.notBefore(key); now.Before(nb) {
			t.Fatalf("restart at %v before the backoff ends at %v", now, nb)
		}
		w := r.restarted(key, now)
		waits = append(waits, w)
		now = now.Add(w)
		r.observe(key, false, now)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second,
		5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	if !slices.Equal(waits, want) {
		t.Fatalf("backoffs %v, want %v", waits, want)
	}

	// Up for a while, but not long enough: the backoff stays.
	r.observe(key, true, now)
	r.observe(key, true, now.Add(RestartBackoffReset-time.Second))
	if w := r.restarted(key, now.Add(RestartBackoffReset)); w != MaxRestartBackoff {
		t.Fatalf("backoff after a short Up spell %v, want %v", w, MaxRestartBackoff)
	}
	// Up for RestartBackoffReset without a break: it starts over.
	now = now.Add(time.Hour)
	r.observe(key, true, now)
	r.observe(key, true, now.Add(RestartBackoffReset))
	if nb := r.notBefore(key); !nb.IsZero() {
		t.Fatalf("backoff kept (not before %v) after %v Up", nb, RestartBackoffReset)
	}
	if w := r.restarted(key, now); w != RestartBackoff {
		t.Fatalf("first backoff after a reset %v, want %v", w, RestartBackoff)
	}
}

// TestBrokenProxyRestarted: port 80 of shop/web is down by quorum on n1
// while n1's beacon is up and the port is up on n2, so the proxy on n1 is
// broken; the controller deletes it once, records ProxyRestarted, and does
// not delete its replacement before the backoff ends.
func TestBrokenProxyRestarted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateUp})
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx, reports...)
	// The verdict has just turned Down: too soon to tell a broken proxy
	// from a backend failing on one node after another.
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("writes %v as the verdict turned Down, want none before %s", got, RestartAfterDown)
	}
	t1 := testNow.Add(RestartAfterDown)
	c.now = func() time.Time { return t1 }
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	broken := deploymentPod(svc, "n1").Name
	if got, want := f.writes(), []string{"delete pods " + broken}; !slices.Equal(got, want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	for _, a := range f.client.Actions() {
		if d, ok := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }); ok {
			if g := d.GetDeleteOptions().GracePeriodSeconds; g != nil {
				t.Errorf("broken proxy deleted with grace %d, want the pod's own (it removes its rules on SIGTERM)", *g)
			}
		}
	}
	ev := f.events()
	if !slices.ContainsFunc(ev, func(e string) bool {
		return strings.Contains(e, ReasonProxyRestarted) && strings.Contains(e, broken) && strings.Contains(e, "TCP/80") && strings.Contains(e, "10s")
	}) {
		t.Errorf("events %v, want %s naming the pod, the port and the backoff", ev, ReasonProxyRestarted)
	}

	// The replacement on n1 is still judged Down (the probers need a
	// moment): within the backoff it is left alone.
	f.client.ClearActions()
	c.now = func() time.Time { return t1.Add(5 * time.Second) }
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("writes within the backoff %v, want none", got)
	}
	c.now = func() time.Time { return t1.Add(RestartBackoff) }
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); len(got) != 1 {
		t.Fatalf("writes after the backoff %v, want one delete", got)
	}
}

// TestBackendDownNoRestart: with port 80 down on every proxy node the
// backend is at fault, and no proxy is restarted.
func TestBackendDownNoRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateDown})
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx, reports...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		if j := c.verdicts.Verdict(contract.TargetKey(svc.Namespace+"/"+svc.Name, "TCP", 80, n)); j.Verdict != status.VerdictDown {
			t.Fatalf("port 80 on %s: %v (%s), want Down", n, j.Verdict, j.Summary())
		}
	}
	for _, w := range f.writes() {
		if strings.HasPrefix(w, "delete pods") {
			t.Errorf("unexpected %q: the backend is down everywhere", w)
		}
	}
}

// TestRestartWaitsForFreshVerdict: a vantage that has been failing for an
// hour (cut off from the network, say) does not make a verdict that just
// turned Down look old; the proxy is not restarted before RestartAfterDown.
func TestRestartWaitsForFreshVerdict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateUp})
	old := metav1.NewTime(testNow.Add(-time.Hour))
	for _, r := range reports {
		for i := range r.Status.Results {
			if r.Status.Results[i].Node == "n1" {
				r.Status.Results[i].FailingSince = &old
			}
		}
	}
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx, reports...)
	for _, at := range []time.Duration{0, RestartAfterDown - time.Second} {
		c.now = func() time.Time { return testNow.Add(at) }
		if err := c.evaluate(ctx, healthKey); err != nil {
			t.Fatal(err)
		}
		if got := f.writes(); len(got) != 0 {
			t.Fatalf("writes %v %s after the verdict turned Down, want none before %s", got, at, RestartAfterDown)
		}
	}
	c.now = func() time.Time { return testNow.Add(RestartAfterDown) }
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); len(got) != 1 {
		t.Fatalf("writes %v once the verdict was Down for %s, want one delete", got, RestartAfterDown)
	}
}

// TestOldProxyNotRestartedForNewPort: shop/web's port changed from 81 to
// 80; on n1 the old proxy (host port 81) runs next to its starting
// successor (80), whose port is still Down there while it is Up on n2. The
// old proxy does not hold port 80 and is not restarted for it, nor is the
// successor, not Ready long enough.
func TestOldProxyNotRestartedForNewPort(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateUp})
	objs := cluster(svc)
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == "n1" && p.Labels[contract.LabelServiceName] == "web" {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 81, HostPort: 81, Protocol: corev1.ProtocolTCP}}
		}
	}
	successor := deploymentPod(svc, "n1")
	successor.Name += "-new"
	successor.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: corev1.ProtocolTCP}}
	successor.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(testNow)}}
	f := newFixture(t, append(objs, successor)...)
	c := f.healthController(ctx, reports...)
	for _, at := range []time.Duration{0, RestartAfterDown, RestartAfterDown + RestartBackoff} {
		c.now = func() time.Time { return testNow.Add(at) }
		if err := c.evaluate(ctx, healthKey); err != nil {
			t.Fatal(err)
		}
	}
	if j := c.verdicts.Verdict(contract.TargetKey(svc.Namespace+"/"+svc.Name, "TCP", 80, "n1")); j.Verdict != status.VerdictDown {
		t.Fatalf("port 80 on n1: %v, want Down (the successor does not serve yet)", j.Verdict)
	}
	for _, w := range f.writes() {
		if strings.HasPrefix(w, "delete pods") {
			t.Errorf("%q: the old proxy does not hold port 80, and its successor has only just started", w)
		}
	}
}

// TestLocalProxyNotRestartedWithoutEndpoint: shop/web has
// externalTrafficPolicy Local and port 80 is down on n1, up on n2. While n1
// has no serving endpoint (its backend being replaced) the proxy there
// forwards to a NodePort without one, and is not restarted for it: the
// node lacks a backend, the proxy is not broken. With a serving endpoint
// on n1 the same verdicts restart it.
func TestLocalProxyNotRestartedWithoutEndpoint(t *testing.T) {
	for _, tt := range []struct {
		name        string
		endpoints   []endpoint
		wantRestart bool
	}{
		{"backend on n1 being replaced", []endpoint{{node: "n2", ready: true}}, false},
		{"backend on n1 terminating, no longer serving", []endpoint{{node: "n1", terminating: true}, {node: "n2", ready: true}}, false},
		{"backend on n1 serving", []endpoint{{node: "n1", ready: true}, {node: "n2", ready: true}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := published(newService("web", func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Selector = map[string]string{"app": "web"}
			}), "n1,n2")
			objs := cluster(svc)
			for _, o := range objs {
				if p, ok := o.(*corev1.Pod); ok && p.Labels[contract.LabelAppName] == contract.ProxyAppName {
					p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: placement.EnvNodePortTarget, Value: "TCP:80=30080"}}
				}
			}
			reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown, "n2": v1alpha1.StateUp})
			f := newFixture(t, objs...)
			c := f.healthController(ctx, reports...)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := idx.Add(endpointSlice(svc, tt.endpoints...)); err != nil {
				t.Fatal(err)
			}
			c.slices = discoverylisters.NewEndpointSliceLister(idx)
			for _, at := range []time.Duration{0, RestartAfterDown} {
				c.now = func() time.Time { return testNow.Add(at) }
				if err := c.evaluate(ctx, healthKey); err != nil {
					t.Fatal(err)
				}
			}
			want := []string(nil)
			if tt.wantRestart {
				want = []string{"delete pods " + deploymentPod(svc, "n1").Name}
			}
			if got := f.writes(); !slices.Equal(got, want) {
				t.Errorf("writes %q, want %q", got, want)
			}
		})
	}
}
