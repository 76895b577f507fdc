package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// healthController returns a Controller with the health pipeline on and
// reports in its cache.
func (f *fixture) healthController(ctx context.Context, reports ...*v1alpha1.ProbeReport) *Controller {
	f.t.Helper()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.ProbeReport{}, 0, cache.Indexers{})
	f.cfg.Health.Reports = inf
	c := f.controller(ctx)
	for _, r := range reports {
		if err := inf.GetStore().Add(r); err != nil {
			f.t.Fatal(err)
		}
	}
	f.t.Cleanup(c.healthQueue.ShutDown)
	return c
}

// setReports stores reports in c's cache as written at now.
func setReports(t *testing.T, c *Controller, now time.Time, reports ...*v1alpha1.ProbeReport) {
	t.Helper()
	for _, r := range reports {
		r.Status.HeartbeatTime = metav1.NewTime(now)
		if err := c.cfg.Health.Reports.GetStore().Update(r); err != nil {
			t.Fatal(err)
		}
	}
}

func proberPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: "pulselb-prober-" + node,
			Labels: map[string]string{contract.LabelAppName: contract.ProberAppName}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func deploymentPod(svc *corev1.Service, node string) *corev1.Pod {
	p := readyPod(svc, node)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs"}}
	return p
}

// report is the report of prober node `by`, written age ago.
func report(by string, age time.Duration) *v1alpha1.ProbeReport {
	return &v1alpha1.ProbeReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: by},
		Status:     v1alpha1.ProbeReportStatus{HeartbeatTime: metav1.NewTime(testNow.Add(-age)), HeartbeatSeconds: 10},
	}
}

func observation(node string, state v1alpha1.State) v1alpha1.Observation {
	o := v1alpha1.Observation{Node: node, Address: "10.0.0.1:80", State: state, Outcome: "L4OK"}
	if state == v1alpha1.StateDown {
		failing := metav1.NewTime(testNow.Add(-1500 * time.Millisecond))
		o.FailingSince, o.Outcome, o.Message = &failing, "L4TOUT", "connect timeout"
	}
	return o
}

func withBeacon(r *v1alpha1.ProbeReport, node string, state v1alpha1.State) *v1alpha1.ProbeReport {
	r.Status.Beacons = append(r.Status.Beacons, v1alpha1.BeaconResult{Observation: observation(node, state)})
	return r
}

func withResult(r *v1alpha1.ProbeReport, svc *corev1.Service, port int32, node string, state v1alpha1.State) *v1alpha1.ProbeReport {
	r.Status.Results = append(r.Status.Results, v1alpha1.ProbeResult{Service: svc.Namespace + "/" + svc.Name, Port: port,
		PortProtocol: "TCP", Protocol: "tcp", Observation: observation(node, state)})
	return r
}

// meshReports returns a fresh report from each of the four nodes of
// cluster in which every other node's beacon is up, so every vantage counts,
// and in which svc's port 80 on each node of port80 has its state there,
// as seen by every node but that one.
func meshReports(svc *corev1.Service, port80 map[string]v1alpha1.State) []*v1alpha1.ProbeReport {
	nodes := []string{"n1", "n2", "n3", "n4"}
	var reports []*v1alpha1.ProbeReport
	for _, by := range nodes {
		r := report(by, 0)
		for _, n := range nodes {
			if n != by {
				withBeacon(r, n, v1alpha1.StateUp)
			}
		}
		for _, n := range nodes {
			if state, ok := port80[n]; ok && n != by {
				withResult(r, svc, 80, n, state)
			}
		}
		reports = append(reports, r)
	}
	return reports
}

func published(svc *corev1.Service, nodes string) *corev1.Service {
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[contract.AnnotationNodes] = nodes
	svc.Finalizers = []string{Finalizer}
	return svc
}

// cluster is four ready nodes with a prober each and svc's Deployment
// proxies on n1 and n2.
func cluster(svc *corev1.Service, extra ...runtime.Object) []runtime.Object {
	objs := []runtime.Object{svc, deploymentPod(svc, "n1"), deploymentPod(svc, "n2")}
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		objs = append(objs, newNode(n, "10.0.0."+string(rune('1'+i))), proberPod(n))
	}
	return append(objs, extra...)
}

func ingressIPs(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

func hasEvent(events []string, reason string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, " "+reason+" ") })
}

func TestNodeFailoverByQuorum(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx,
		withBeacon(report("n2", time.Second), "n1", v1alpha1.StateDown),
		withBeacon(report("n3", time.Second), "n1", v1alpha1.StateDown),
		withBeacon(report("n4", time.Second), "n1", v1alpha1.StateUp))
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if j := c.verdicts.Verdict(contract.BeaconKey("n1")); j.Verdict != status.VerdictDown {
		t.Fatalf("beacon n1: %v (%s), want Down by 2 of 3", j.Verdict, j.Summary())
	}
	if ev := f.events(); !hasEvent(ev, ReasonNodeFailed) {
		t.Errorf("events %v, want NodeFailed on the Service", ev)
	}

	if err := c.syncNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"patch nodes n1", "delete pods " + deploymentPod(svc, "n1").Name}
	if got := f.writes(); !slices.Equal(got, want) {
		t.Fatalf("syncNode writes %v, want %v", got, want)
	}
	for _, a := range f.client.Actions() {
		if d, ok := a.(core.DeleteAction); ok {
			if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 0 {
				t.Errorf("pod deleted with grace %v, want 0 (force)", g)
			}
		}
		if p, ok := a.(core.PatchAction); ok && !strings.Contains(string(p.GetPatch()), `"pulselb.io/unhealthy":"true"`) {
			t.Errorf("node patch %s does not set %s", p.GetPatch(), contract.LabelUnhealthy)
		}
	}

	f.client.ClearActions()
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	got := f.service(ctx, "shop", "web")
	if ips := ingressIPs(got); !slices.Equal(ips, []string{"10.0.0.2"}) {
		t.Errorf("ingress %v, want only n2's 10.0.0.2", ips)
	}
	if ev := f.events(); !hasEvent(ev, ReasonFailedOver) {
		t.Errorf("events %v, want FailedOver", ev)
	}
}

func TestSingleProberCannotFailNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	tests := []struct {
		name    string
		reports []*v1alpha1.ProbeReport
	}{
		{"one of three says down", []*v1alpha1.ProbeReport{
			withBeacon(report("n2", 0), "n1", v1alpha1.StateDown),
			withBeacon(report("n3", 0), "n1", v1alpha1.StateUp),
			withBeacon(report("n4", 0), "n1", v1alpha1.StateUp)}},
		{"the others are silent", []*v1alpha1.ProbeReport{withBeacon(report("n2", 0), "n1", v1alpha1.StateDown)}},
		{"the others are stale", []*v1alpha1.ProbeReport{
			withBeacon(report("n2", 0), "n1", v1alpha1.StateDown),
			withBeacon(report("n3", time.Minute), "n1", v1alpha1.StateDown),
			withBeacon(report("n4", time.Minute), "n1", v1alpha1.StateDown)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, cluster(svc.DeepCopy())...)
			c := f.healthController(ctx, tt.reports...)
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			if err := c.syncNode(ctx, "n1"); err != nil {
				t.Fatal(err)
			}
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			for _, w := range f.writes() {
				if strings.HasPrefix(w, "patch nodes") || strings.HasPrefix(w, "delete pods") {
					t.Errorf("unexpected write %q", w)
				}
			}
			if ips := ingressIPs(f.service(ctx, "shop", "web")); !slices.Equal(ips, []string{"10.0.0.1", "10.0.0.2"}) {
				t.Errorf("ingress %v, want both nodes", ips)
			}
		})
	}
}

func TestPortDownSetsPortError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, NodePort: 30443})
		s.Annotations = map[string]string{contract.AnnotationPublishWhen: contract.PublishAnyPort}
	}), "n1,n2")
	var reports []*v1alpha1.ProbeReport
	for _, by := range []string{"n2", "n3", "n4"} {
		r := withResult(report(by, 0), svc, 80, "n1", v1alpha1.StateUp)
		reports = append(reports, withResult(r, svc, 443, "n1", v1alpha1.StateDown))
	}
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx, reports...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if ev := f.events(); !hasEvent(ev, ReasonTargetDown) {
		t.Errorf("events %v, want TargetDown", ev)
	}
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	got := f.service(ctx, "shop", "web")
	var n1 *corev1.LoadBalancerIngress
	for i := range got.Status.LoadBalancer.Ingress {
		if got.Status.LoadBalancer.Ingress[i].IP == "10.0.0.1" {
			n1 = &got.Status.LoadBalancer.Ingress[i]
		}
	}
	if n1 == nil {
		t.Fatalf("n1 not published with publish-when any-port: %v", ingressIPs(got))
	}
	for _, p := range n1.Ports {
		switch {
		case p.Port == 443 && (p.Error == nil || !strings.Contains(*p.Error, "down by 3 of 3 probers: L4TOUT connect timeout")):
			t.Errorf("port 443 error %v, want the quorum's reason", p.Error)
		case p.Port == 80 && p.Error != nil:
			t.Errorf("port 80 error %q, want none", *p.Error)
		}
	}
}

func TestNewProxyPublishedOnceProbedUp(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1")
	f := newFixture(t, cluster(svc)...)
	// Every prober is fresh, none has concluded about n2 yet.
	c := f.healthController(ctx, report("n1", 0), report("n3", 0), report("n4", 0),
		withResult(report("n2", 0), svc, 80, "n1", v1alpha1.StateUp))
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if ips := ingressIPs(f.service(ctx, "shop", "web")); !slices.Equal(ips, []string{"10.0.0.1"}) {
		t.Fatalf("ingress %v, want n2 held back until probed Up", ips)
	}

	svc2 := f.service(ctx, "shop", "web")
	f2 := newFixture(t, cluster(svc2)...)
	var reports []*v1alpha1.ProbeReport
	for _, by := range []string{"n1", "n3", "n4"} {
		reports = append(reports, withResult(report(by, 0), svc, 80, "n2", v1alpha1.StateUp))
	}
	c = f2.healthController(ctx, reports...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if ips := ingressIPs(f2.service(ctx, "shop", "web")); !slices.Equal(ips, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("ingress %v, want n2 added once probed Up", ips)
	}
}

func TestRecoveredNodeUnlabelled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n2")
	objs := cluster(svc)
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Name == "n1" {
			n.Labels[contract.LabelUnhealthy] = "true"
		}
	}
	tests := []struct {
		name      string
		state     v1alpha1.State
		wantPatch bool
	}{
		{"beacon up by quorum", v1alpha1.StateUp, true},
		{"still down", v1alpha1.StateDown, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, objs...)
			c := f.healthController(ctx,
				withBeacon(report("n2", 0), "n1", tt.state),
				withBeacon(report("n3", 0), "n1", tt.state),
				withBeacon(report("n4", 0), "n1", tt.state))
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			if err := c.syncNode(ctx, "n1"); err != nil {
				t.Fatal(err)
			}
			patched := false
			for _, a := range f.client.Actions() {
				if p, ok := a.(core.PatchAction); ok {
					patched = strings.Contains(string(p.GetPatch()), `"pulselb.io/unhealthy":null`)
				}
			}
			if patched != tt.wantPatch {
				t.Errorf("label removed = %v, want %v (writes %v)", patched, tt.wantPatch, f.writes())
			}
		})
	}
}

func TestWaitForProbeReportCRD(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	served := &metav1.APIResourceList{GroupVersion: v1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "probereports", Namespaced: true, Kind: "ProbeReport"}}}
	other := &metav1.APIResourceList{GroupVersion: v1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "somethingelse", Kind: "SomethingElse"}}}
	tests := []struct {
		name      string
		resources []*metav1.APIResourceList
		wantErr   bool
	}{
		{"installed", []*metav1.APIResourceList{served}, false},
		{"group missing", nil, true},
		{"group without probereports", []*metav1.APIResourceList{other}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			d := client.Discovery().(*fakediscovery.FakeDiscovery)
			d.Resources = tt.resources
			err := WaitForProbeReportCRD(ctx, d, time.Millisecond, 20*time.Millisecond)
			if (err != nil) != tt.wantErr {
				t.Fatalf("WaitForProbeReportCRD = %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrNoProbeReportCRD) {
				t.Errorf("error %v, want ErrNoProbeReportCRD", err)
			}
			for _, want := range []string{"probereports.pulselb.io", "--probe-reports=false", "deploy/crds/"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

// TestProberOnDownNodeIgnored checks that the report of a prober whose node
// is Down by quorum does not count: n1 is cut off, still writes a fresh
// report saying n2 is Down, and without the rule would tie with n3's Up
// until n1's report went stale.
func TestProberOnDownNodeIgnored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx,
		withResult(withBeacon(report("n1", 0), "n2", v1alpha1.StateDown), svc, 80, "n2", v1alpha1.StateDown),
		withBeacon(report("n2", 0), "n1", v1alpha1.StateDown),
		withResult(withBeacon(report("n3", 0), "n1", v1alpha1.StateDown), svc, 80, "n2", v1alpha1.StateUp))
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if j := c.verdicts.Verdict(contract.BeaconKey("n1")); j.Verdict != status.VerdictDown {
		t.Fatalf("beacon n1: %v (%s), want Down", j.Verdict, j.Summary())
	}
	tk := contract.TargetKey("shop/web", "TCP", 80, "n2")
	if j := c.verdicts.Verdict(tk); j.Verdict != status.VerdictUp {
		t.Fatalf("%s: %v (%s), want Up from n3 alone, n1 ignored", tk, j.Verdict, j.Summary())
	}
}

// TestFlappingTargetHeldDown: a port that goes Down again right after it
// recovered stays Down until a majority has said Up for status.Hold, and
// the held time does not count toward restarting its proxy.
func TestFlappingTargetHeldDown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx)
	now := testNow
	c.now = func() time.Time { return now }
	tk := contract.TargetKey("shop/web", "TCP", 80, "n1")
	step := func(at time.Duration, state v1alpha1.State) status.Judgement {
		t.Helper()
		now = testNow.Add(at)
		var reports []*v1alpha1.ProbeReport
		for _, by := range []string{"n2", "n3", "n4"} {
			reports = append(reports, withResult(report(by, 0), svc, 80, "n1", state))
		}
		setReports(t, c, now, reports...)
		if err := c.evaluate(ctx, healthKey); err != nil {
			t.Fatal(err)
		}
		return c.verdicts.Verdict(tk)
	}
	for i, s := range []struct {
		at    time.Duration
		state v1alpha1.State
		want  status.Verdict
	}{
		{0, v1alpha1.StateUp, status.VerdictUp},
		{time.Minute, v1alpha1.StateDown, status.VerdictDown},
		{61 * time.Second, v1alpha1.StateUp, status.VerdictUp},     // a first recovery is not delayed
		{62 * time.Second, v1alpha1.StateDown, status.VerdictDown}, // down again at once: a flap
		{63 * time.Second, v1alpha1.StateUp, status.VerdictDown},
		{64 * time.Second, v1alpha1.StateUp, status.VerdictDown},
		{65 * time.Second, v1alpha1.StateUp, status.VerdictUp}, // up for status.Hold(1) = 2 s
	} {
		j := step(s.at, s.state)
		if j.Verdict != s.want {
			t.Fatalf("step %d at %s: probers say %s, verdict %s (%s), want %s", i, s.at, s.state, j.Verdict, j.Summary(), s.want)
		}
		if s.state == v1alpha1.StateUp && s.want == status.VerdictDown {
			if j.Reason != status.ReasonFlapping {
				t.Errorf("step %d: held Down with reason %q, want %q", i, j.Reason, status.ReasonFlapping)
			}
			if d := c.verdicts.DownFor(tk, now); d != 0 {
				t.Errorf("step %d: held Down counts as down for %s toward a proxy restart", i, d)
			}
		}
		wantHeld := 0.0
		if j.Reason == status.ReasonFlapping {
			wantHeld = 1
		}
		if got := testutil.ToFloat64(c.metrics.flappingTargets); got != wantHeld {
			t.Errorf("step %d: pulselb_controller_flapping_targets = %v, want %v", i, got, wantHeld)
		}
	}
}

// startingPod is svc's proxy on node, created at created, whose containers
// are ready since readySince (zero: not ready), held back from Ready by the
// probed readiness gate.
func startingPod(svc *corev1.Service, node string, created, readySince time.Time) *corev1.Pod {
	p := deploymentPod(svc, node)
	p.CreationTimestamp = metav1.NewTime(created)
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: contract.PodConditionProbed}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if !readySince.IsZero() {
		p.Status.Conditions = append(p.Status.Conditions,
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)})
	} else {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse})
	}
	return p
}

func warnings(events []string) []string {
	var out []string
	for _, e := range events {
		if strings.HasPrefix(e, corev1.EventTypeWarning+" ") {
			out = append(out, e)
		}
	}
	return out
}

// TestNewProxyStartsWithoutWarning checks that a new Service's proxy, found
// refusing by the probers before its containers are ready, raises no
// TargetDown Warning when it then comes up; and that one still Down after
// its containers have been ready long enough to be probed Up does.
func TestNewProxyStartsWithoutWarning(t *testing.T) {
	tests := []struct {
		name string
		// after is the pod's state and what the probers say a round
		// later: when its containers became ready, relative to that
		// round, and the port's state.
		readyAgo    time.Duration
		after       v1alpha1.State
		wantWarning bool
	}{
		{"comes up once ready", time.Second, v1alpha1.StateUp, false},
		{"ready, not yet probed Up", time.Second, v1alpha1.StateDown, false},
		{"still down long after ready", 20 * time.Second, v1alpha1.StateDown, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := newService("web")
			created := testNow.Add(-2 * time.Second)
			objs := []runtime.Object{svc, startingPod(svc, "n1", created, time.Time{})}
			for i, n := range []string{"n1", "n2", "n3", "n4"} {
				objs = append(objs, newNode(n, "10.0.0."+string(rune('1'+i))), proberPod(n))
			}
			f := newFixture(t, objs...)
			c := f.healthController(ctx, meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateDown})...)
			target := contract.PortKeyOf(svc.Spec.Ports[0]).TargetKey("shop/web", "n1")

			// Round 1: the pod's containers are not ready; the probers
			// find the port refusing.
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			if j := c.verdicts.Verdict(target); j.Verdict != status.VerdictDown {
				t.Fatalf("verdict %v (%s), want Down while the proxy starts", j.Verdict, j.Summary())
			}
			if w := warnings(f.events()); len(w) > 0 {
				t.Errorf("Warning events while the proxy starts: %v", w)
			}

			// Round 2: the containers are ready since readyAgo.
			now := testNow.Add(tt.readyAgo + time.Second)
			c.now = func() time.Time { return now }
			pods := f.system.Core().V1().Pods().Informer().GetIndexer()
			if err := pods.Update(startingPod(svc, "n1", created, now.Add(-tt.readyAgo))); err != nil {
				t.Fatal(err)
			}
			setReports(t, c, now, meshReports(svc, map[string]v1alpha1.State{"n1": tt.after})...)
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			events := f.events()
			w := warnings(events)
			switch {
			case tt.wantWarning && (len(w) != 1 || !strings.Contains(w[0], ReasonTargetDown)):
				t.Errorf("events %v, want one TargetDown Warning", events)
			case !tt.wantWarning && len(w) > 0:
				t.Errorf("Warning events %v, want none", w)
			}
			if !tt.wantWarning && hasEvent(events, ReasonTargetUp) {
				t.Errorf("events %v: TargetUp ends a TargetDown that was never announced", events)
			}
		})
	}
}

// proberLease returns node's prober Lease renewed age before testNow,
// lasting 30 s.
func proberLease(node string, age time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: contract.ProberLeasePrefix + node, Labels: contract.ProberLeaseLabels()},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](30),
			RenewTime: ptr.To(metav1.NewMicroTime(testNow.Add(-age)))},
	}
}

// TestFailoverWithProberLeases judges n1's beacon from reports written
// long ago, as probers with Leases write them only on change, next to
// reports of probers from before Leases (a rolling upgrade): a vantage
// counts while its Lease is current or its report heartbeat recent.
func TestFailoverWithProberLeases(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const down, up = v1alpha1.StateDown, v1alpha1.StateUp
	tests := []struct {
		name    string
		reports []*v1alpha1.ProbeReport
		leases  []*coordinationv1.Lease
		want    status.Verdict
	}{
		{"current Leases, reports unchanged for an hour", []*v1alpha1.ProbeReport{
			withBeacon(report("n2", time.Hour), "n1", down), withBeacon(report("n3", time.Hour), "n1", down), withBeacon(report("n4", time.Hour), "n1", up)},
			[]*coordinationv1.Lease{proberLease("n2", 5*time.Second), proberLease("n3", 5*time.Second), proberLease("n4", 5*time.Second)},
			status.VerdictDown},
		{"the Down votes' Leases expired", []*v1alpha1.ProbeReport{
			withBeacon(report("n2", time.Hour), "n1", down), withBeacon(report("n3", time.Hour), "n1", down), withBeacon(report("n4", time.Hour), "n1", up)},
			[]*coordinationv1.Lease{proberLease("n2", time.Minute), proberLease("n3", time.Minute), proberLease("n4", 5*time.Second)},
			status.VerdictUp},
		{"upgrade: an old prober's heartbeat and a new prober's Lease", []*v1alpha1.ProbeReport{
			withBeacon(report("n2", time.Second), "n1", down), withBeacon(report("n3", time.Hour), "n1", down), withBeacon(report("n4", time.Hour), "n1", up)},
			// n2 (old) and n3 (new) are fresh and say Down; n4 is stale.
			[]*coordinationv1.Lease{proberLease("n3", 5*time.Second)},
			status.VerdictDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := published(newService("web"), "n1,n2")
			f := newFixture(t, cluster(svc)...)
			leases := cache.NewSharedIndexInformer(&cache.ListWatch{}, &coordinationv1.Lease{}, 0, cache.Indexers{})
			f.cfg.Health.Leases = leases
			c := f.healthController(ctx, tt.reports...)
			for _, l := range tt.leases {
				if err := leases.GetStore().Add(l); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			if j := c.verdicts.Verdict(contract.BeaconKey("n1")); j.Verdict != tt.want {
				t.Errorf("beacon n1: %v (%s), want %v", j.Verdict, j.Summary(), tt.want)
			}
		})
	}
}

// TestLeaseRenewalQueuesOnlyWhenFreshnessChanges: the steady state of
// Lease renewals does not make the controller re-evaluate; a Lease renewed
// after it lapsed does.
func TestLeaseRenewalQueuesOnlyWhenFreshnessChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, cluster(newService("web"))...)
	f.cfg.Health.Leases = cache.NewSharedIndexInformer(&cache.ListWatch{}, &coordinationv1.Lease{}, 0, cache.Indexers{})
	c := f.healthController(ctx)
	queued := 0
	h := c.leaseRenewed(func() { queued++ })
	h.OnUpdate(proberLease("n2", 10*time.Second), proberLease("n2", 0))
	if queued != 0 {
		t.Errorf("renewing a current Lease queued an evaluation")
	}
	h.OnUpdate(proberLease("n2", time.Minute), proberLease("n2", 0))
	if queued != 1 {
		t.Errorf("renewing a lapsed Lease queued %d evaluations, want 1", queued)
	}
}

// TestVantagesFollowProbers: the vantages the controller judges by,
// remembered between evaluations, are those every prober computes
// (contract.Vantages) after a prober goes away as before.
func TestVantagesFollowProbers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx)
	check := func(step string, cands []contract.Vantage) {
		t.Helper()
		targets, err := c.healthTargets()
		if err != nil {
			t.Fatal(err)
		}
		// A prober that is not ready does not probe, but its node's
		// beacon is still judged (contract.BeaconNodes).
		if want := 4 + 2; len(targets) != want {
			t.Fatalf("%s: %d targets, want %d: a beacon per prober pod and the Service's port on 2 nodes", step, len(targets), want)
		}
		for _, tg := range targets {
			if want := contract.Vantages(tg.Key, tg.Node, "", cands, contract.DefaultVantages); !slices.Equal(tg.Vantages, want) {
				t.Errorf("%s: %s judged by %v, want %v", step, tg.Key, tg.Vantages, want)
			}
		}
	}
	all := []contract.Vantage{{Node: "n1"}, {Node: "n2"}, {Node: "n3"}, {Node: "n4"}}
	check("four probers", all)
	check("again", all)
	gone := proberPod("n3")
	gone.Status.Conditions[0].Status = corev1.ConditionFalse
	if err := f.system.Core().V1().Pods().Informer().GetIndexer().Update(gone); err != nil {
		t.Fatal(err)
	}
	check("n3's prober not ready", []contract.Vantage{{Node: "n1"}, {Node: "n2"}, {Node: "n4"}})
}

// TestRefusedProbeIsNotADownVote: a prober that a Service's allow-list
// does not let through (its address not yet on the proxy workload) cannot
// see the Service's targets; its Down votes do not count, so two probers
// that see the target Up and one refused cannot fail it, while the same
// votes without source ranges do.
func TestRefusedProbeIsNotADownVote(t *testing.T) {
	for _, ranged := range []bool{true, false} {
		t.Run(fmt.Sprintf("ranges=%v", ranged), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := published(newService("web"), "n1,n2")
			if ranged {
				svc.Spec.LoadBalancerSourceRanges = []string{"198.18.3.0/24"}
			}
			objs := cluster(svc)
			addrs := map[string]string{"n1": "10.244.1.5", "n2": "10.244.2.5", "n3": "10.244.3.5", "n4": "10.244.4.5"}
			for i, o := range objs {
				if p, ok := o.(*corev1.Pod); ok && p.Labels[contract.LabelAppName] == contract.ProberAppName {
					p = p.DeepCopy()
					p.Status.PodIPs = []corev1.PodIP{{IP: addrs[p.Spec.NodeName]}}
					objs[i] = p
				}
			}
			// n4's prober is not on the list yet.
			var probers []netip.Addr
			for _, n := range []string{"n1", "n2", "n3"} {
				probers = append(probers, netip.MustParseAddr(addrs[n]))
			}
			var ranges []netip.Prefix
			if ranged {
				ranges = []netip.Prefix{netip.MustParsePrefix("198.18.3.0/24")}
			}
			objs = append(objs, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: placement.Name("shop", "web"),
				Labels: contract.ProxySelector(svc), Annotations: contract.AllowListAnnotations(ranges, probers)}})
			f := newFixture(t, objs...)
			c := f.healthController(ctx,
				withResult(report("n2", 0), svc, 80, "n1", v1alpha1.StateDown),
				withResult(report("n3", 0), svc, 80, "n1", v1alpha1.StateUp),
				withResult(report("n4", 0), svc, 80, "n1", v1alpha1.StateDown))
			targets, err := c.healthTargets()
			if err != nil {
				t.Fatal(err)
			}
			tk := contract.PortKeyOf(svc.Spec.Ports[0]).TargetKey("shop/web", "n1")
			for _, tg := range targets {
				if tg.Key == tk && slices.Contains(tg.Vantages, "n4") == ranged {
					t.Errorf("%s judged by %v: n4's prober is refused by the allow-list", tk, tg.Vantages)
				}
			}
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			down := c.verdicts.Verdict(tk).Verdict == status.VerdictDown
			if down == ranged {
				t.Errorf("%s: Down = %v (%s); want Down only when n4's vote counts", tk, down, c.verdicts.Verdict(tk).Summary())
			}
		})
	}
}

// TestSCTPPortNeverJudged: a new Service with a TCP and an SCTP port is
// published on the nodes where its TCP port is probed Up. The SCTP port,
// which no proxy forwards, is no target, gets no verdict, and is not in
// the ingress ports, even while probers of an older version still report
// it Down (they probed it as TCP); ConfigValid and an InvalidSpec Warning
// say that it is not served.
func TestSCTPPortNeverJudged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("mixed", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP, NodePort: 30905})
	})
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": v1alpha1.StateUp})
	for _, r := range reports {
		for _, n := range []string{"n1", "n2"} {
			if r.Name != n {
				r.Status.Results = append(r.Status.Results, v1alpha1.ProbeResult{Service: "shop/mixed", Port: 2905,
					PortProtocol: "SCTP", Protocol: "tcp", Observation: observation(n, v1alpha1.StateDown)})
			}
		}
	}
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx, reports...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	targets, err := c.healthTargets()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if tg.port.Protocol == corev1.ProtocolSCTP {
			t.Errorf("target %s: the SCTP port is judged", tg.Key)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if j := c.verdicts.Verdict(contract.TargetKey("shop/mixed", "SCTP", 2905, n)); j.Verdict != status.VerdictUnknown || j.Assigned != 0 {
			t.Errorf("SCTP/2905 on %s has a verdict: %v (%s)", n, j.Verdict, j.Summary())
		}
		if j := c.verdicts.Verdict(contract.TargetKey("shop/mixed", "TCP", 80, n)); j.Verdict != status.VerdictUp {
			t.Errorf("TCP/80 on %s: %v (%s), want Up", n, j.Verdict, j.Summary())
		}
	}
	if ev := f.events(); hasEvent(ev, ReasonTargetDown) {
		t.Errorf("events %v: a TargetDown", ev)
	}

	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	got := f.service(ctx, "shop", "mixed")
	if ips := ingressIPs(got); !slices.Equal(ips, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("ingress %v, want n1 and n2, whose TCP port is Up", ips)
	}
	for _, in := range got.Status.LoadBalancer.Ingress {
		if want := []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}; !equality.Semantic.DeepEqual(in.Ports, want) {
			t.Errorf("%s ports %+v, want TCP/80 without error only", in.IP, in.Ports)
		}
	}
	conds := map[string]metav1.Condition{}
	for _, cond := range got.Status.Conditions {
		conds[cond.Type] = cond
	}
	if h := conds[status.ConditionHealthy]; h.Status != metav1.ConditionTrue {
		t.Errorf("Healthy %s (%s), want True", h.Status, h.Message)
	}
	if v := conds[status.ConditionConfigValid]; v.Status != metav1.ConditionFalse || !strings.Contains(v.Message, `spec.ports="SCTP:2905"`) {
		t.Errorf("ConfigValid %s (%s), want False naming SCTP:2905", v.Status, v.Message)
	}
	namesSCTP := func(e string) bool {
		return strings.HasPrefix(e, "Warning InvalidSpec ") && strings.Contains(e, "SCTP:2905")
	}
	if ev := f.events(); !slices.ContainsFunc(ev, namesSCTP) {
		t.Errorf("events %v, want a Warning InvalidSpec naming SCTP:2905", ev)
	}
}

// A standby judges as the leader does, so that it can tell the leader's
// node failed and take over with the same verdicts, but raises no Event and
// writes nothing until it leads.
func TestStandbyJudgesWithoutActing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	var rounds int
	f.cfg.Judged = func() { rounds++ }
	c := f.healthController(ctx,
		withBeacon(report("n2", time.Second), "n1", v1alpha1.StateDown),
		withBeacon(report("n3", time.Second), "n1", v1alpha1.StateDown),
		withBeacon(report("n4", time.Second), "n1", v1alpha1.StateUp))
	c.standby.Store(true)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if !c.NodeDown("n1") || c.NodeDown("n2") {
		t.Fatalf("NodeDown n1 %v, n2 %v; want n1 only, by 2 of 3", c.NodeDown("n1"), c.NodeDown("n2"))
	}
	if rounds != 1 {
		t.Errorf("Judged called %d times, want 1", rounds)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("a standby raised events %v", ev)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a standby wrote %v", w)
	}
	// Once it leads, its first sync drops the failed node at once: the
	// verdict is already Down.
	c.standby.Store(false)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if ips := ingressIPs(f.service(ctx, "shop", "web")); !slices.Equal(ips, []string{"10.0.0.2"}) {
		t.Errorf("ingress %v after the first sync as leader, want only n2's 10.0.0.2", ips)
	}
}

// A proxy from before a port was added does not serve it and is not judged
// on it: its rollout replaces it, and judging it Down there would fail the
// Service over between nodes and move its address.
func TestPortNotInProxyNotJudged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 81, Protocol: corev1.ProtocolTCP})
	withPorts := func(p *corev1.Pod, ports ...int32) *corev1.Pod {
		for _, port := range ports {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
		}
		return p
	}
	old, updated := withPorts(deploymentPod(svc, "n1"), 80), withPorts(deploymentPod(svc, "n2"), 80, 81)
	objs := []runtime.Object{svc, old, updated}
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		objs = append(objs, newNode(n, "10.0.0."+string(rune('1'+i))), proberPod(n))
	}
	reports := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": v1alpha1.StateUp})
	for _, r := range reports {
		// Port 81 refuses on n1, which has no proxy listening on it.
		if r.Name != "n1" {
			withResult(r, svc, 81, "n1", v1alpha1.StateDown)
		}
		if r.Name != "n2" {
			withResult(r, svc, 81, "n2", v1alpha1.StateUp)
		}
	}
	f := newFixture(t, objs...)
	c := f.healthController(ctx, reports...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if j := c.verdicts.Verdict(contract.TargetKey("shop/web", "TCP", 81, "n1")); j.Verdict != status.VerdictUnknown {
		t.Errorf("port 81 on n1, whose proxy does not have it: %v (%s), want not judged", j.Verdict, j.Summary())
	}
	if j := c.verdicts.Verdict(contract.TargetKey("shop/web", "TCP", 81, "n2")); j.Verdict != status.VerdictUp {
		t.Errorf("port 81 on n2: %v (%s), want Up", j.Verdict, j.Summary())
	}
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if ips := ingressIPs(f.service(ctx, "shop", "web")); !slices.Equal(ips, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("ingress %v, want both proxy nodes kept", ips)
	}
}

// healthTargets lists the targets a round of verdicts judges.
func (c *Controller) healthTargets() ([]healthTarget, error) {
	targets, _, err := c.listTargets(&contract.ParseCache{})
	return targets, err
}

// TestMarkEarly: a proxy whose containers became ready less than its rise
// probes, an interval and verdictLag ago is Early (its Down verdict may be
// from before it forwarded), one ready longer ago, terminating or unbound
// is not, and the wait is until the first stops being early.
func TestMarkEarly(t *testing.T) {
	now := time.Date(2026, 12, 4, 20, 37, 2, 0, time.UTC)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{
		contract.AnnotationProbe + ".8443": "tcp interval=3s rise=3",
	}}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
		{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 8443, Protocol: corev1.ProtocolTCP},
	}}}
	settings, problems := contract.Parse(svc)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	// The slowest port: rise 3 at 3 s, plus an interval, plus verdictLag.
	window := 4*3*time.Second + verdictLag
	ready := func(node string, ago time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + node}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-ago))},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse},
			}}}
	}
	leaving := ready("d", time.Second)
	leaving.DeletionTimestamp = &metav1.Time{Time: now}
	unbound := ready("", 0)
	pending := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "e"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	down := status.Health{Down: true}
	health := map[string]status.Health{"a": down, "b": down, "c": down, "d": down, "e": down}
	wait := markEarly(health, settings, []*corev1.Pod{ready("a", time.Second), ready("b", 5*time.Second), ready("c", window), leaving, unbound, pending}, now)
	for n, want := range map[string]bool{"a": true, "b": true, "c": false, "d": false, "e": false} {
		if got := health[n]; got.Early != want || !got.Down {
			t.Errorf("%s: %+v, want Early %v and still Down", n, got, want)
		}
	}
	if want := window - 5*time.Second; wait != want {
		t.Errorf("wait %v, want %v (until b is no longer early)", wait, want)
	}
	if wait := markEarly(map[string]status.Health{}, settings, []*corev1.Pod{ready("c", 2*window)}, now); wait != 0 {
		t.Errorf("wait %v with no proxy early, want 0", wait)
	}
}
