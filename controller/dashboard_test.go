package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// dashboardTarget returns the target of svc on node from st.
func dashboardTarget(t *testing.T, st dashboard.State, svc, node string) dashboard.Target {
	t.Helper()
	for _, s := range st.Services {
		if s.Name != svc {
			continue
		}
		for _, tg := range s.Targets {
			if tg.Node == node {
				return tg
			}
		}
	}
	t.Fatalf("no target of %s on %s in %+v", svc, node, st.Services)
	return dashboard.Target{}
}

func withLatency(r *v1alpha1.ProbeReport, d time.Duration) *v1alpha1.ProbeReport {
	for i := range r.Status.Results {
		r.Status.Results[i].Latency = &metav1.Duration{Duration: d}
	}
	return r
}

func TestDashboardState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{
			contract.Prefix + "probe":    "mysql user=monitor secret=db-cred",
			contract.Prefix + "hostname": "www.lb.example.test,www.elsewhere.test,*.lb.example.test",
		}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
		s.Status.Conditions = []metav1.Condition{{Type: status.ConditionHealthy, Status: metav1.ConditionTrue}}
	}), "n1")
	other := newService("other", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") })
	f := newFixture(t, cluster(svc, other)...)
	// n1's target: up from every vantage. n2's target: down from n1 and n3
	// (a quorum), up from n4, whose report is stale.
	reports := []*v1alpha1.ProbeReport{
		withResult(report("n1", time.Second), svc, 80, "n2", v1alpha1.StateDown),
		withLatency(withResult(withResult(report("n2", time.Second), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp), 1500*time.Microsecond),
		withResult(withResult(report("n3", time.Second), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateDown),
		withResult(withResult(report("n4", time.Minute), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp),
	}
	c := f.healthController(ctx, reports...)
	now := testNow
	feed, err := NewDashboardFeed(c, informers.NewSharedInformerFactory(f.client, 0), informers.NewSharedInformerFactory(f.client, 0),
		dashboard.New(dashboard.Options{}), DashboardConfig{Instance: "pulselb-controller-abc", Zone: "lb.example.test."})
	if err != nil {
		t.Fatal(err)
	}
	feed.now = func() time.Time { return now }

	st, err := judgeThenBuild(ctx, c, feed)
	if err != nil {
		t.Fatal(err)
	}
	if st.Role != "controller" || st.Instance != "pulselb-controller-abc" || !st.GeneratedAt.Equal(now) {
		t.Errorf("header %q %q %v", st.Role, st.Instance, st.GeneratedAt)
	}
	if want := []string{"n1", "n2", "n3", "n4"}; !slices.Equal(st.Vantages, want) {
		t.Errorf("vantages %v, want %v", st.Vantages, want)
	}
	if len(st.Services) != 1 {
		t.Fatalf("services %+v, want only shop/web (other has another class)", st.Services)
	}
	s := st.Services[0]
	if s.Name != "shop/web" || !s.Healthy || !slices.Equal(s.Published, []string{"10.0.0.1"}) {
		t.Errorf("service %+v", s)
	}
	// A wildcard inside the zone is not served there, so not listed.
	if want := []string{"web.shop.lb.example.test.", "www.lb.example.test."}; !slices.Equal(s.DNSNames, want) {
		t.Errorf("DNS names %v, want %v", s.DNSNames, want)
	}
	up := dashboardTarget(t, st, "shop/web", "n1")
	if up.State != "Up" || up.Address != "10.0.0.1" || up.Port != 80 || up.Protocol != "TCP" {
		t.Errorf("n1 target %+v, want Up on 10.0.0.1:80/TCP", up)
	}
	if !strings.Contains(up.Probe, "secret=db-cred") || !strings.HasPrefix(up.Probe, "mysql") {
		t.Errorf("probe %q, want the canonical mysql spec naming secret=db-cred", up.Probe)
	}
	var n2 *dashboard.VantageResult
	for i, v := range up.Vantages {
		if v.Vantage == "n2" {
			n2 = &up.Vantages[i]
		}
	}
	if len(up.Vantages) != 3 || n2 == nil || n2.State != "Up" || n2.Outcome != "L4OK" || n2.LatencySeconds != 0.0015 {
		t.Errorf("n1 target's vantages %+v, want n2 Up L4OK 1.5ms among 3", up.Vantages)
	}
	if !slices.Equal(s.PublishedNodes, []string{"n1"}) {
		t.Errorf("published nodes %v, want [n1] from %s", s.PublishedNodes, contract.AnnotationNodes)
	}
	down := dashboardTarget(t, st, "shop/web", "n2")
	if down.State != "Down" {
		t.Errorf("n2 target %s, want Down by n1 and n3", down.State)
	}
	// The history measures a failover from the first failed probe.
	if want := testNow.Add(-1500 * time.Millisecond); !down.FailingSince.Equal(want) || !strings.HasPrefix(down.Reason, "down by 2 of 3 probers") {
		t.Errorf("n2 target failing since %v for %q, want %v and the quorum's reason", down.FailingSince, down.Reason, want)
	}
	if !up.FailingSince.IsZero() || up.Flapping {
		t.Errorf("n1 target failing since %v, flapping %v; want neither while Up", up.FailingSince, up.Flapping)
	}
	for _, v := range down.Vantages {
		if v.Stale != (v.Vantage == "n4") {
			t.Errorf("vantage %s stale=%v; only n4's report is stale", v.Vantage, v.Stale)
		}
		if v.Vantage == "n1" && (v.Outcome != "L4TOUT" || v.Message != "connect timeout") {
			t.Errorf("vantage n1 %+v, want L4TOUT connect timeout", v)
		}
	}
	if len(st.Transitions) != 0 {
		t.Errorf("transitions %+v on the first build, want none: nothing changed yet", st.Transitions)
	}

	// n2 recovers, then node n1's beacon fails by quorum.
	now = now.Add(time.Second)
	for _, r := range []*v1alpha1.ProbeReport{
		withBeacon(withResult(report("n1", 0), svc, 80, "n2", v1alpha1.StateUp), "n2", v1alpha1.StateUp),
		withResult(withResult(withBeacon(report("n2", 0), "n1", v1alpha1.StateDown), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp),
		withResult(withResult(withBeacon(report("n3", 0), "n1", v1alpha1.StateDown), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp),
		withResult(withResult(withBeacon(report("n4", 0), "n1", v1alpha1.StateUp), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp),
	} {
		r.Status.HeartbeatTime = metav1.NewTime(now)
		if err := c.reports.Update(r); err != nil {
			t.Fatal(err)
		}
	}
	st, err = judgeThenBuild(ctx, c, feed)
	if err != nil {
		t.Fatal(err)
	}
	if got := dashboardTarget(t, st, "shop/web", "n2"); got.State != "Up" || !got.Since.Equal(now) {
		t.Errorf("n2 target %s since %v, want Up since %v", got.State, got.Since, now)
	}
	if got := dashboardTarget(t, st, "shop/web", "n1"); got.State != "Down" || got.Reason != "node beacon is down" ||
		!got.FailingSince.Equal(testNow.Add(-1500*time.Millisecond)) {
		t.Errorf("n1 target %s (%q) failing since %v, want Down: its node's beacon is down, failing since the beacon's first failed probe",
			got.State, got.Reason, got.FailingSince)
	}
	type change struct{ service, node, from, to string }
	var got []change
	for _, tr := range st.Transitions {
		got = append(got, change{tr.Service, tr.Node, tr.From, tr.To})
		if !tr.Time.Equal(now) || tr.Reason == "" {
			t.Errorf("transition %+v: want time %v and a reason", tr, now)
		}
	}
	want := []change{{"shop/web", "n2", "Down", "Up"}, {"shop/web", "n1", "Up", "Down"}, {"", "n1", "Unknown", "Down"}}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("transitions %+v lack %+v", got, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("transitions %+v, want %d", got, len(want))
	}

	// Nothing changes: no new transitions, and the list is kept.
	st, err = judgeThenBuild(ctx, c, feed)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Transitions) != len(want) {
		t.Errorf("%d transitions after an unchanged build, want %d", len(st.Transitions), len(want))
	}
}

func TestDashboardStateWithoutHealthChecks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web", func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{{Type: status.ConditionHealthy, Status: metav1.ConditionFalse}}
		s.Annotations = map[string]string{contract.Prefix + "all-down": "publish-none"}
	}), "n1,n2")
	objs := cluster(svc)
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Name == "n2" {
			n.Labels[contract.LabelUnhealthy] = "true"
		}
	}
	f := newFixture(t, objs...)
	c := f.controller(ctx)
	feed, err := NewDashboardFeed(c, informers.NewSharedInformerFactory(f.client, 0), informers.NewSharedInformerFactory(f.client, 0),
		dashboard.New(dashboard.Options{}), DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := feed.build()
	if err != nil {
		t.Fatal(err)
	}
	s := st.Services[0]
	if s.Healthy || s.AllDown != "publish-none" || s.DNSNames != nil {
		t.Errorf("service %+v, want not healthy, publish-none, no DNS names without a zone", s)
	}
	if got := dashboardTarget(t, st, "shop/web", "n1"); got.State != "Unknown" || len(got.Vantages) != 0 || got.Probe != "tcp" {
		t.Errorf("n1 target %+v, want Unknown without vantages, probe tcp", got)
	}
	if got := dashboardTarget(t, st, "shop/web", "n2"); got.State != "Down" {
		t.Errorf("n2 target %s, want Down: the node is labelled unhealthy", got.State)
	}
}

// TestDashboardFeedRun runs the feed on started informers: a new Service
// appears on the dashboard, and a burst of changes is rebuilt at most once
// per MinInterval.
func TestDashboardFeedRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(newNode("n1", "10.0.0.1"))
	cluster := informers.NewSharedInformerFactory(client, 0)
	system := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(systemNS))
	c, err := New(ctx, client, cluster, system, nil, Config{Placement: placement.Config{Namespace: systemNS, Image: "pulselb:test"}})
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(dashboard.Options{})
	const minInterval = 100 * time.Millisecond
	feed, err := NewDashboardFeed(c, cluster, system, d, DashboardConfig{MinInterval: minInterval, Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cluster.Start(ctx.Done())
	system.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		cluster.Shutdown()
		system.Shutdown()
	}()

	start := time.Now()
	for i := range 30 {
		s := newService("web" + string(rune('a'+i)))
		if _, err := client.CoreV1().Services("shop").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := httptestGetState(t, d)
		if len(resp.Services) == 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard shows %d services, want 30", len(resp.Services))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each version is one build that changed something; builds are at
	// least MinInterval apart.
	if max := uint64(time.Since(start)/minInterval) + 2; d.Version() > max {
		t.Errorf("%d versions in %v, want at most %d with a %v rate limit", d.Version(), time.Since(start), max, minInterval)
	}
}

func httptestGetState(t *testing.T, d *dashboard.Dashboard) dashboard.State {
	t.Helper()
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, dashboard.PathState, nil))
	var st dashboard.State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("decoding %s: %v", dashboard.PathState, err)
	}
	return st
}

func withCert(r *v1alpha1.ProbeReport, node string, notAfter time.Time) *v1alpha1.ProbeReport {
	for i := range r.Status.Results {
		if r.Status.Results[i].Node == node {
			r.Status.Results[i].CertNotAfter = &metav1.Time{Time: notAfter}
		}
	}
	return r
}

// TestDashboardCertNotAfter checks that a target shows the earliest
// certificate expiry its vantages report, stale reports included, and
// nothing from a prober that is not one of its vantages.
func TestDashboardCertNotAfter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.Prefix + "probe": "https verify=false"}
	}), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	soon, later, latest := testNow.Add(10*24*time.Hour), testNow.Add(30*24*time.Hour), testNow.Add(90*24*time.Hour)
	// n1 cannot be a vantage of its own node's target: its value must not
	// count although it is the earliest.
	reports := []*v1alpha1.ProbeReport{
		withCert(withResult(withResult(report("n1", time.Second), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp),
			"n1", testNow.Add(24*time.Hour)),
		withCert(withResult(withResult(report("n2", time.Second), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp), "n1", latest),
		withResult(withResult(report("n3", time.Second), svc, 80, "n1", v1alpha1.StateDown), svc, 80, "n2", v1alpha1.StateUp),
		withCert(withResult(withResult(report("n4", time.Minute), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp), "n1", soon),
	}
	c := f.healthController(ctx, reports...)
	feed, err := NewDashboardFeed(c, informers.NewSharedInformerFactory(f.client, 0), informers.NewSharedInformerFactory(f.client, 0),
		dashboard.New(dashboard.Options{}), DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	feed.now = func() time.Time { return testNow }
	build := func() dashboard.State {
		t.Helper()
		st, err := judgeThenBuild(ctx, c, feed)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	st := build()
	n1 := dashboardTarget(t, st, "shop/web", "n1")
	var vantages []string
	for _, v := range n1.Vantages {
		vantages = append(vantages, v.Vantage)
	}
	if want := []string{"n2", "n3", "n4"}; !slices.Equal(vantages, want) {
		t.Fatalf("n1 target's vantages %v, want %v", vantages, want)
	}
	if !n1.CertNotAfter.Equal(soon) {
		t.Errorf("n1 target certNotAfter %v, want %v from n4's stale report, the earliest among its vantages", n1.CertNotAfter, soon)
	}
	if n2 := dashboardTarget(t, st, "shop/web", "n2"); !n2.CertNotAfter.IsZero() {
		t.Errorf("n2 target certNotAfter %v, want none: no vantage reported one", n2.CertNotAfter)
	}

	// n4's prober now sees a renewed certificate.
	r := withCert(withResult(withResult(report("n4", 0), svc, 80, "n1", v1alpha1.StateUp), svc, 80, "n2", v1alpha1.StateUp), "n1", later)
	if err := c.reports.Update(r); err != nil {
		t.Fatal(err)
	}
	if got := dashboardTarget(t, build(), "shop/web", "n1").CertNotAfter; !got.Equal(later) {
		t.Errorf("after renewal certNotAfter %v, want %v", got, later)
	}
}

// TestDashboardFlappingHeldDown: while the leader holds a flapping target
// Down, every replica's dashboard shows it Down too, not the Up its
// probers report.
func TestDashboardFlappingHeldDown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	c, feed, now := healthFeed(ctx, t, svc)
	for i, s := range []struct {
		at    time.Duration
		state v1alpha1.State
		want  string
	}{
		{0, v1alpha1.StateUp, "Up"},
		{time.Minute, v1alpha1.StateDown, "Down"},
		{61 * time.Second, v1alpha1.StateUp, "Up"},
		{62 * time.Second, v1alpha1.StateDown, "Down"}, // down again at once: a flap
		{63 * time.Second, v1alpha1.StateUp, "Down"},   // held
		{64 * time.Second, v1alpha1.StateUp, "Down"},
		{65 * time.Second, v1alpha1.StateUp, "Up"}, // up for status.Hold(1) = 2 s
	} {
		*now = testNow.Add(s.at)
		var reports []*v1alpha1.ProbeReport
		for _, by := range []string{"n2", "n3", "n4"} {
			reports = append(reports, withResult(report(by, 0), svc, 80, "n1", s.state))
		}
		setReports(t, c, *now, reports...)
		st, err := judgeThenBuild(ctx, c, feed)
		if err != nil {
			t.Fatal(err)
		}
		tg := dashboardTarget(t, st, "shop/web", "n1")
		if got := tg.State; got != s.want {
			t.Fatalf("step %d at %s: probers say %s, dashboard shows %s, want %s as the leader holds it", i, s.at, s.state, got, s.want)
		}
		if held := s.state == v1alpha1.StateUp && s.want == "Down"; tg.Flapping != held {
			t.Errorf("step %d: flapping %v, want %v", i, tg.Flapping, held)
		}
		if s.state == v1alpha1.StateUp && s.want == "Down" && st.Transitions[0].Time.Equal(*now) {
			t.Errorf("step %d: transition %+v while held Down, want none", i, st.Transitions[0])
		}
	}
}

// TestDashboardAgreesWithLeader feeds the leader's evaluate and a
// replica's dashboard the same reports at the same times, a flapping
// target and a node whose beacon goes Down among them, and checks that the
// dashboard shows every target as the leader judges it.
func TestDashboardAgreesWithLeader(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	c, feed, now := healthFeed(ctx, t, svc)
	nodes := []string{"n1", "n2", "n3", "n4"}
	const up, down = v1alpha1.StateUp, v1alpha1.StateDown
	// step is what the probers see at a time: web's port on n1, and the
	// node whose beacon is down; that node's own prober is cut off and
	// says everything else is down.
	type step struct {
		at       time.Duration
		web      v1alpha1.State
		nodeDown string
	}
	for i, s := range []step{
		{0, up, ""},
		{time.Minute, down, ""},
		{61 * time.Second, up, ""},
		{62 * time.Second, down, ""}, // a flap
		{63 * time.Second, up, ""},   // held Down
		{64 * time.Second, up, "n2"},
		{65 * time.Second, up, "n2"}, // released
		{66 * time.Second, up, "n2"},
		{67 * time.Second, up, ""},
		{68 * time.Second, down, ""},
		{69 * time.Second, up, ""}, // held again, longer
	} {
		*now = testNow.Add(s.at)
		var reports []*v1alpha1.ProbeReport
		for _, by := range nodes {
			r := report(by, 0)
			seen := func(node string, state v1alpha1.State) v1alpha1.State {
				switch {
				case by == s.nodeDown && node != by, node == s.nodeDown:
					return down
				}
				return state
			}
			for _, n := range nodes {
				if n != by {
					r = withBeacon(r, n, seen(n, up))
				}
			}
			reports = append(reports, withResult(withResult(r, svc, 80, "n1", seen("n1", s.web)), svc, 80, "n2", seen("n2", up)))
		}
		setReports(t, c, *now, reports...)
		if err := c.evaluate(ctx, healthKey); err != nil {
			t.Fatal(err)
		}
		if s.nodeDown != "" && c.verdicts.Verdict(contract.BeaconKey(s.nodeDown)).Verdict != status.VerdictDown {
			t.Fatalf("step %d at %s: %s's beacon is not Down; the sequence must exercise a node failure", i, s.at, s.nodeDown)
		}
		st, err := feed.build()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"n1", "n2"} {
			leader := c.verdicts.Verdict(contract.TargetKey("shop/web", "TCP", 80, n))
			want := leader.Verdict.String()
			if beacon := c.verdicts.Verdict(contract.BeaconKey(n)); beacon.Verdict == status.VerdictDown {
				want = status.VerdictDown.String()
			}
			if got := dashboardTarget(t, st, "shop/web", n).State; got != want {
				t.Errorf("step %d at %s: dashboard shows the target on %s %s, the leader judges it %s (%s)",
					i, s.at, n, got, want, leader.Summary())
			}
		}
	}
	if got := c.verdicts.Verdict(contract.TargetKey("shop/web", "TCP", 80, "n1")); got.Reason != status.ReasonFlapping {
		t.Errorf("the target on n1 ends %s (%s), want held Down: the sequence must exercise flap damping", got.Verdict, got.Reason)
	}
}

// healthFeed returns, for a cluster serving svc, a Controller with the
// health pipeline on and no reports yet, a replica's DashboardFeed on it,
// and the clock both read.
func healthFeed(ctx context.Context, t *testing.T, svc *corev1.Service) (*Controller, *DashboardFeed, *time.Time) {
	t.Helper()
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx)
	feed, err := NewDashboardFeed(c, informers.NewSharedInformerFactory(f.client, 0), informers.NewSharedInformerFactory(f.client, 0),
		dashboard.New(dashboard.Options{}), DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := testNow
	c.now = func() time.Time { return now }
	feed.now = func() time.Time { return now }
	return c, feed, &now
}

// TestDashboardHistoryTimesFailover: when the Service's status drops a
// node whose target is Down, the replica's dashboard history logs a
// failover timed from the target's first failed probe.
func TestDashboardHistoryTimesFailover(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}}
		s.Status.Conditions = []metav1.Condition{{Type: status.ConditionHealthy, Status: metav1.ConditionTrue}}
	}), "n1,n2")
	f := newFixture(t, cluster(svc)...)
	c := f.healthController(ctx)
	d := dashboard.New(dashboard.Options{})
	feed, err := NewDashboardFeed(c, f.cluster, f.system, d, DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := testNow
	c.now = func() time.Time { return now }
	feed.now = func() time.Time { return now }
	step := func(at time.Duration, n2 v1alpha1.State) {
		t.Helper()
		now = testNow.Add(at)
		setReports(t, c, now, meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": n2})...)
		st, err := judgeThenBuild(ctx, c, feed)
		if err != nil {
			t.Fatal(err)
		}
		d.Update(st)
	}
	step(0, v1alpha1.StateUp)
	step(time.Second, v1alpha1.StateDown) // failing since testNow-1.5s (observation)
	// The leader takes n2 out of the status.
	out := svc.DeepCopy()
	out.Annotations[contract.AnnotationNodes] = "n1"
	out.Status.LoadBalancer.Ingress = out.Status.LoadBalancer.Ingress[:1]
	if err := f.cluster.Core().V1().Services().Informer().GetIndexer().Update(out); err != nil {
		t.Fatal(err)
	}
	step(2*time.Second, v1alpha1.StateDown)

	h := d.History()
	if len(h.Services) != 1 || len(h.Services[0].Failovers) != 1 {
		t.Fatalf("history services %+v, want one failover", h.Services)
	}
	fo := h.Services[0].Failovers[0]
	if !slices.Equal(fo.Nodes, []string{"n2"}) || !slices.Equal(fo.Addresses, []string{"10.0.0.2"}) ||
		!fo.FirstFailure.Equal(testNow.Add(-1500*time.Millisecond)) || fo.DurationSeconds != 3.5 {
		t.Errorf("failover %+v, want n2's 10.0.0.2, 3.5 s after its first failed probe", fo)
	}
	var changes []string
	for _, th := range h.Targets {
		if th.Node == "n2" {
			for _, ch := range th.Changes {
				changes = append(changes, ch.From+"→"+ch.To+" "+ch.Outcome)
			}
		}
	}
	if want := []string{"→Up L4OK", "Up→Down L4TOUT"}; !slices.Equal(changes, want) {
		t.Errorf("n2's changes %q, want %q", changes, want)
	}
}

// TestDashboardExternalVantages: an external vantage's results show in its
// own column, marked external, on the Services it probes, and count in no
// verdict.
func TestDashboardExternalVantages(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	off := published(newService("quiet", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationExternalVantages: contract.ExternalOff}
		s.Spec.Ports[0].Port = 81
	}), "n1,n2")
	f := newFixture(t, cluster(svc, off, deploymentPod(off, "n1"))...)
	reports := append(meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": v1alpha1.StateUp}),
		externalReport("vps", v1alpha1.StateDown, v1alpha1.StateUp))
	c := f.healthController(ctx, reports...)
	feed, err := NewDashboardFeed(c, informers.NewSharedInformerFactory(f.client, 0), informers.NewSharedInformerFactory(f.client, 0),
		dashboard.New(dashboard.Options{}), DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	feed.now = func() time.Time { return testNow }
	st, err := judgeThenBuild(ctx, c, feed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.ExternalVantages, []string{"external-vps"}) || slices.Contains(st.Vantages, "external-vps") {
		t.Errorf("vantages %v, external %v; want external-vps only among the external ones", st.Vantages, st.ExternalVantages)
	}
	n1 := dashboardTarget(t, st, "shop/web", "n1")
	if n1.State != "Up" {
		t.Errorf("n1's verdict %s, want Up: an external vantage takes no part in it", n1.State)
	}
	i := slices.IndexFunc(n1.Vantages, func(vr dashboard.VantageResult) bool { return vr.Vantage == "external-vps" })
	if i < 0 || !n1.Vantages[i].External || n1.Vantages[i].State != "Down" || n1.Vantages[i].Outcome != "L4TOUT" {
		t.Fatalf("n1's vantages %+v, want external-vps Down L4TOUT marked external", n1.Vantages)
	}
	for _, vr := range dashboardTarget(t, st, "shop/quiet", "n1").Vantages {
		if vr.External {
			t.Errorf("shop/quiet (external-vantages: off) shows external result %+v", vr)
		}
	}
}

// judgeThenBuild runs a round of the controller's verdicts, as its health
// worker does on every report change, then feed's build, both at feed's
// time: the dashboard shows the verdicts of that round.
func judgeThenBuild(ctx context.Context, c *Controller, feed *DashboardFeed) (dashboard.State, error) {
	c.now = feed.now
	if err := c.evaluate(ctx, healthKey); err != nil {
		return dashboard.State{}, err
	}
	return feed.build()
}
