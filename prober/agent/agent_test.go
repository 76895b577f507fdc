package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/report"
)

const systemNS = "pulselb-system"

func node(name, ip, zone string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		},
	}
}

func readyPod(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func proberPod(node string) *corev1.Pod {
	return readyPod("prober-"+node, node, map[string]string{contract.LabelAppName: contract.ProberAppName})
}

func proxyPod(svc *corev1.Service, node string) *corev1.Pod {
	return readyPod("pulselb-"+svc.Name+"-"+node, node, contract.ProxySelector(svc))
}

func service(name string, annotations map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: annotations},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports},
	}
}

// waitReport polls node's ProbeReport until ok holds for it, and returns it.
func waitReport(t *testing.T, ctx context.Context, reports *v1alpha1.Client, node, what string, ok func(*v1alpha1.ProbeReport) bool) *v1alpha1.ProbeReport {
	t.Helper()
	var last *v1alpha1.ProbeReport
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := reports.Get(ctx, systemNS, node)
		if err != nil {
			return false, nil
		}
		last = r
		return ok(r), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last report %+v", what, err, last)
	}
	return last
}

// resultsByTarget indexes r's results by target key.
func resultsByTarget(r *v1alpha1.ProbeReport) map[string]*v1alpha1.ProbeResult {
	out := map[string]*v1alpha1.ProbeResult{}
	for i := range r.Status.Results {
		res := &r.Status.Results[i]
		out[contract.TargetKey(res.Service, res.PortProtocol, res.Port, res.Node)] = res
	}
	return out
}

// newAgent returns an agent on node self whose informers run on a fake
// clientset holding objs, and its reports' dynamic client. Its Lease is
// kept in the fake clientset unless cfg.Leases is set.
func newAgent(t *testing.T, ctx context.Context, self string, cfg Config, objs ...runtime.Object) (*Agent, *v1alpha1.Client) {
	t.Helper()
	f := newFixture(t, ctx, self, cfg, true, objs...)
	return f.agent, f.reports
}

// fixture is an agent with its fake API clients.
type fixture struct {
	agent   *Agent
	reports *v1alpha1.Client
	dyn     *dynamicfake.FakeDynamicClient
	client  *fake.Clientset
}

// newFixture is newAgent with its clients, and with leases false an agent
// without Leases (report heartbeats, as before Leases).
func newFixture(t *testing.T, ctx context.Context, self string, cfg Config, leases bool, objs ...runtime.Object) fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	cluster := informers.NewSharedInformerFactory(client, 0)
	system := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(systemNS))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "ProbeReportList"})
	reports := v1alpha1.NewClient(dyn)
	cfg.Node, cfg.Namespace, cfg.Services = self, systemNS, contract.Selection{}
	if leases && cfg.Leases == nil {
		cfg.Leases = client.CoordinationV1().Leases(systemNS)
	}
	a, err := New(ctx, cluster, system, reports, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ictx, stop := context.WithCancel(ctx)
	cluster.Start(ictx.Done())
	system.Start(ictx.Done())
	t.Cleanup(func() {
		stop()
		cluster.Shutdown()
		system.Shutdown()
	})
	cluster.WaitForCacheSync(ictx.Done())
	system.WaitForCacheSync(ictx.Done())
	return fixture{agent: a, reports: reports, dyn: dyn, client: client}
}

func TestTargetsFollowVantageAssignment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	web := service("web", map[string]string{contract.AnnotationProbe: "http path=/healthz"},
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	other := service("other", nil, corev1.ServicePort{Port: 81, Protocol: corev1.ProtocolTCP})
	other.Spec.LoadBalancerClass = ptr.To("example.com/other")
	objs := []runtime.Object{web, other}
	var cands []contract.Vantage
	for i := range 12 {
		n := "n" + string(rune('a'+i))
		zone := "z" + string(rune('0'+i%3))
		objs = append(objs, node(n, fmt.Sprintf("10.0.0.%d", i+1), zone), proberPod(n), proxyPod(web, n), proxyPod(other, n))
		cands = append(cands, contract.Vantage{Node: n, Zone: zone})
	}
	for _, k := range []int{1, 3} {
		t.Run("k="+string(rune('0'+k)), func(t *testing.T) {
			a, _ := newAgent(t, ctx, "nc", Config{Vantages: k}, objs...)
			targets, meta, err := a.targets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]prober.Target{}
			for _, tg := range targets {
				got[tg.Key] = tg
			}
			for _, v := range cands {
				keys := []string{contract.BeaconKey(v.Node), contract.TargetKey("shop/web", "TCP", 80, v.Node), contract.TargetKey("shop/web", "UDP", 53, v.Node)}
				for _, key := range keys {
					want := v.Node != "nc" && slices.Contains(contract.Vantages(key, v.Node, v.Zone, cands, k), "nc")
					if _, ok := got[key]; ok != want {
						t.Errorf("%s probed = %v, want %v", key, ok, want)
					}
				}
				if _, ok := got[contract.TargetKey("shop/other", "TCP", 81, v.Node)]; ok {
					t.Errorf("probes a Service of another class on %s", v.Node)
				}
			}
			for key, tg := range got {
				m := meta[key]
				switch {
				case m.Beacon && (tg.Protocol != probespec.TCP || tg.Addr.Port() != DefaultBeaconPort):
					t.Errorf("beacon %s: %s %s", key, tg.Protocol, tg.Addr)
				case !m.Beacon && m.Port == 80 && tg.Protocol != probespec.HTTP:
					t.Errorf("%s: protocol %s, want http from the annotation", key, tg.Protocol)
				case !m.Beacon && m.Port == 53 && tg.Protocol != probespec.UDP:
					t.Errorf("%s: protocol %s, want udp: http cannot check a UDP port", key, tg.Protocol)
				}
			}
			if len(got) == 0 {
				t.Fatal("no targets")
			}
		})
	}
}

func TestSecretsAllowedNamespaces(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const password = "s3cret-value"
	secret := func(name, allowed string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name,
			Annotations: map[string]string{contract.AnnotationAllowedNamespaces: allowed}}, Data: data}
	}
	a, _ := newAgent(t, ctx, "n1", Config{},
		secret("db", "shop, billing", map[string][]byte{"password": []byte(password)}),
		secret("nokey", "shop", map[string][]byte{"pass": []byte(password)}))
	tests := []struct {
		name, namespace, secret string
		wantErr                 string
	}{
		{"listed namespace", "shop", "db", ""},
		{"second listed namespace", "billing", "db", ""},
		{"unlisted namespace", "dev", "db", `does not list namespace "dev"`},
		{"missing secret", "shop", "nope", "not found"},
		{"no password key", "shop", "nokey", `no key "password"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pw, err := Secrets{Lister: a.secrets, Namespace: tt.namespace}.Password(ctx, tt.secret)
			if tt.wantErr == "" {
				if err != nil || pw != password {
					t.Fatalf("Password = %q, %v", pw, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("error reveals the password: %v", err)
			}
		})
	}
}

// TestRunReportsRealProbes runs the agent against loopback listeners: a
// proxy port and a beacon on node n1, probed from n2.
func TestRunReportsRealProbes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proxyLn := acceptAndClose(t)
	beaconLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ServeBeacon(ctx, beaconLn, 0) }()

	port := int32(netip.MustParseAddrPort(proxyLn.Addr().String()).Port())
	web := service("web", map[string]string{contract.AnnotationProbeInterval: "100ms", contract.AnnotationRise: "1", contract.AnnotationFall: "1"},
		corev1.ServicePort{Name: "http", Port: port, Protocol: corev1.ProtocolTCP})
	a, reports := newAgent(t, ctx, "n2", Config{
		BeaconPort:       netip.MustParseAddrPort(beaconLn.Addr().String()).Port(),
		MinWriteInterval: 20 * time.Millisecond,
		Scheduler:        prober.Config{Interval: 100 * time.Millisecond, Rise: 1, Fall: 1},
	}, web, node("n1", "127.0.0.1", ""), node("n2", "127.0.0.2", ""), proberPod("n1"), proberPod("n2"), proxyPod(web, "n1"))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	key := contract.TargetKey("shop/web", "TCP", port, "n1")
	result := func(r *v1alpha1.ProbeReport) *v1alpha1.ProbeResult { return resultsByTarget(r)[key] }
	r := waitReport(t, ctx, reports, "n2", "target and beacon Up", func(r *v1alpha1.ProbeReport) bool {
		res := result(r)
		return res != nil && res.State == v1alpha1.StateUp && len(r.Status.Beacons) == 1 && r.Status.Beacons[0].State == v1alpha1.StateUp
	})
	if res := result(r); res.Protocol != "tcp" || res.Address != proxyLn.Addr().String() || res.Outcome != "L4OK" {
		t.Errorf("result %+v", res)
	}
	if r.Status.HeartbeatTime.IsZero() || r.Status.HeartbeatSeconds != 10 {
		t.Errorf("heartbeat %v every %ds", r.Status.HeartbeatTime, r.Status.HeartbeatSeconds)
	}

	proxyLn.Close()
	r = waitReport(t, ctx, reports, "n2", "target Down", func(r *v1alpha1.ProbeReport) bool {
		res := result(r)
		return res != nil && res.State == v1alpha1.StateDown
	})
	if res := result(r); res.FailingSince == nil || res.LastChange == nil || res.Outcome != "L4CON" || r.Status.Down != 1 {
		t.Errorf("down result %+v (down count %d), want failingSince, lastChange and L4CON", res, r.Status.Down)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLogsAtDefaultVerbosity: at the default verbosity a prober's log says
// that it started, and which of its targets went Down (with why) and came
// back, but not every target's first Up.
func TestLogsAtDefaultVerbosity(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	defer cancel()
	proxyLn := acceptAndClose(t)
	port := int32(netip.MustParseAddrPort(proxyLn.Addr().String()).Port())
	web := service("web", map[string]string{contract.AnnotationProbeInterval: "100ms", contract.AnnotationRise: "1", contract.AnnotationFall: "1"},
		corev1.ServicePort{Name: "http", Port: port, Protocol: corev1.ProtocolTCP})
	a, reports := newAgent(t, ctx, "n2", Config{
		BeaconPort:       1,
		MinWriteInterval: 20 * time.Millisecond,
		Scheduler:        prober.Config{Interval: 100 * time.Millisecond, Rise: 1, Fall: 1},
	}, web, node("n1", "127.0.0.1", ""), node("n2", "127.0.0.2", ""), proberPod("n1"), proberPod("n2"), proxyPod(web, "n1"))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	key := contract.TargetKey("shop/web", "TCP", port, "n1")
	state := func(want v1alpha1.State) func(*v1alpha1.ProbeReport) bool {
		return func(r *v1alpha1.ProbeReport) bool {
			res := resultsByTarget(r)[key]
			return res != nil && res.State == want
		}
	}
	waitReport(t, ctx, reports, "n2", "target Up", state(v1alpha1.StateUp))
	proxyLn.Close()
	waitReport(t, ctx, reports, "n2", "target Down", state(v1alpha1.StateDown))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	log := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []string{
		`INFO Started prober node="n2" external=false vantages=3 beaconPort=1 targets=2`,
		`INFO Probed target changed state target="` + key + `" from="Up" to="Down" outcome="L4CON" err="connecting: dial tcp :0->` +
			proxyLn.Addr().String() + `: connect: connection refused"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log at verbosity 0 lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, `from="Unknown" to="Up"`) {
		t.Errorf("the log at verbosity 0 has a first Up:\n%s", log)
	}
}

// TestServeBeaconLingers: a stopping prober answers its beacon for linger
// more, then refuses, and ServeBeacon returns.
func TestServeBeaconLingers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	const linger = 300 * time.Millisecond
	go func() { done <- ServeBeacon(ctx, ln, linger) }()
	cancel()
	stopped := time.Now()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatalf("beacon refused right after the stop, within its linger: %v", err)
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(stopped); d < linger {
			t.Errorf("ServeBeacon returned %s after the stop, before its linger of %s", d, linger)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeBeacon did not return after its linger")
	}
	// Closed by ServeBeacon, so the port answers no more. (Dialling it
	// would race with any other test that is handed the freed port.)
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("beacon's listener still open after its linger (closing it: %v)", err)
	}
}

// writes counts the update and create requests f's agent sent for its
// report and its Lease.
func (f fixture) writes() (reports, leases int) {
	for _, a := range f.dyn.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			reports++
		}
	}
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == "leases" && (a.GetVerb() == "update" || a.GetVerb() == "create") {
			leases++
		}
	}
	return reports, leases
}

// waitFor polls cond every 10ms for at most 10s.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestLeaseHeartbeatReportOnChange: with a Lease, the agent renews the
// Lease every heartbeat and writes its report only when a result changes,
// not as a heartbeat.
func TestLeaseHeartbeatReportOnChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proxyLn := acceptAndClose(t)
	beaconLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ServeBeacon(ctx, beaconLn, 0) }()
	port := int32(netip.MustParseAddrPort(proxyLn.Addr().String()).Port())
	web := service("web", map[string]string{contract.AnnotationProbeInterval: "50ms", contract.AnnotationRise: "1", contract.AnnotationFall: "1"},
		corev1.ServicePort{Name: "http", Port: port, Protocol: corev1.ProtocolTCP})
	const heartbeat = 50 * time.Millisecond
	f := newFixture(t, ctx, "n2", Config{
		BeaconPort:       netip.MustParseAddrPort(beaconLn.Addr().String()).Port(),
		Heartbeat:        heartbeat,
		MinWriteInterval: 10 * time.Millisecond,
		Scheduler:        prober.Config{Interval: 50 * time.Millisecond, Rise: 1, Fall: 1},
	}, true, web, node("n1", "127.0.0.1", ""), node("n2", "127.0.0.2", ""), proberPod("n1"), proberPod("n2"), proxyPod(web, "n1"))
	done := make(chan error, 1)
	go func() { done <- f.agent.Run(ctx) }()

	key := contract.TargetKey("shop/web", "TCP", port, "n1")
	waitReport(t, ctx, f.reports, "n2", "target and beacon Up", func(r *v1alpha1.ProbeReport) bool {
		res := resultsByTarget(r)[key]
		return res != nil && res.State == v1alpha1.StateUp && len(r.Status.Beacons) == 1 && r.Status.Beacons[0].State == v1alpha1.StateUp
	})

	// Steady state: twenty heartbeats renew the Lease twenty times and
	// write no report, though every probe measures a new latency.
	reports, leases := f.writes()
	waitFor(t, ctx, "20 more Lease renewals", func() bool {
		_, l := f.writes()
		return l >= leases+20
	})
	if r, _ := f.writes(); r != reports {
		t.Errorf("%d report writes in 20 heartbeats without a change, want none", r-reports)
	}
	l, err := f.client.CoordinationV1().Leases(systemNS).Get(ctx, contract.ProberLeasePrefix+"n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "n2" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 3 ||
		l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > 10*time.Second || l.Labels[contract.LabelAppName] != contract.ProberAppName {
		t.Errorf("Lease %+v %+v, want held by n2 for 3 heartbeats of 1s (the least), renewed, labelled", l.Labels, l.Spec)
	}

	// A change is written at once.
	proxyLn.Close()
	waitReport(t, ctx, f.reports, "n2", "target Down", func(r *v1alpha1.ProbeReport) bool {
		res := resultsByTarget(r)[key]
		return res != nil && res.State == v1alpha1.StateDown
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Every write says why: the first at start, the others for states
	// (the target and beacon concluding, then the target going down).
	reasons := f.agent.cfg.Metrics.reportReasons
	if got := testutil.ToFloat64(reasons.WithLabelValues("start")); got != 1 {
		t.Errorf("%v report writes at start, want 1", got)
	}
	if got := testutil.ToFloat64(reasons.WithLabelValues("state")); got < 1 {
		t.Errorf("%v report writes for a state change, want at least the target going down", got)
	}
	if got := testutil.ToFloat64(reasons.WithLabelValues("heartbeat")); got != 0 {
		t.Errorf("%v report writes as heartbeats with a Lease, want none", got)
	}
}

// TestRestartWritesReportOnce: a prober that restarts with nothing changed
// still writes its report once, so that it is fresh for a controller that
// reads report heartbeats, then no more.
func TestRestartWritesReportOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFixture(t, ctx, "n1", Config{Heartbeat: 20 * time.Millisecond}, true)
	old := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: "n1"},
		Status: v1alpha1.ProbeReportStatus{HeartbeatTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second)), HeartbeatSeconds: 1}}
	if _, err := f.reports.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	before, _ := f.writes()
	done := make(chan error, 1)
	go func() { done <- f.agent.Run(ctx) }()
	waitReport(t, ctx, f.reports, "n1", "the report written at start", func(r *v1alpha1.ProbeReport) bool {
		return time.Since(r.Status.HeartbeatTime.Time) < time.Minute
	})
	_, leases := f.writes()
	waitFor(t, ctx, "10 more Lease renewals", func() bool {
		_, l := f.writes()
		return l >= leases+10
	})
	if r, _ := f.writes(); r != before+1 {
		t.Errorf("%d report writes, want 1 at start", r-before)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNoLeaseHeartbeatsReport: without Leases (as before them), the report
// is rewritten every heartbeat, changed or not, and no Lease is written.
func TestNoLeaseHeartbeatsReport(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFixture(t, ctx, "n1", Config{Heartbeat: 20 * time.Millisecond}, false)
	done := make(chan error, 1)
	go func() { done <- f.agent.Run(ctx) }()
	waitFor(t, ctx, "10 report heartbeats", func() bool {
		r, _ := f.writes()
		return r >= 10
	})
	if _, l := f.writes(); l != 0 {
		t.Errorf("%d Lease writes without Leases", l)
	}
	if got := testutil.ToFloat64(f.agent.cfg.Metrics.reportReasons.WithLabelValues("heartbeat")); got < 9 {
		t.Errorf("%v report writes counted as heartbeats, want at least 9 of the 10", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLeaseNameTooLong: a node whose name makes no Lease name is refused
// with an error naming it.
func TestLeaseNameTooLong(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	long := strings.Repeat("n", 250)
	_, err := New(ctx, informers.NewSharedInformerFactory(client, 0), informers.NewSharedInformerFactory(client, 0), nil,
		Config{Node: long, Namespace: systemNS, Leases: client.CoordinationV1().Leases(systemNS)})
	if err == nil || !strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "Lease") {
		t.Fatalf("New = %v, want an error naming the node and its Lease", err)
	}
}

// TestTargetsPerFamily: a dual-stack Service's port is probed on each of
// the proxy node's addresses, in spec.ipFamilies order, and a
// single-stack Service's in its one family only.
func TestTargetsPerFamily(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dual := service("dual", nil, corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolTCP})
	dual.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	v6 := service("v6", nil, corev1.ServicePort{Port: 81, Protocol: corev1.ProtocolTCP})
	v6.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	legacy := service("legacy", nil, corev1.ServicePort{Port: 82, Protocol: corev1.ProtocolTCP})
	objs := []runtime.Object{dual, v6, legacy}
	for i, n := range []string{"na", "nb"} {
		nd := node(n, fmt.Sprintf("10.0.0.%d", i+1), "z")
		nd.Status.Addresses = append(nd.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00::%d", i+1)})
		objs = append(objs, nd, proberPod(n), proxyPod(dual, n), proxyPod(v6, n), proxyPod(legacy, n))
	}
	// Two nodes: the other one is every target's only vantage.
	a, _ := newAgent(t, ctx, "na", Config{Vantages: 1}, objs...)
	targets, meta, err := a.targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, tg := range targets {
		if m := meta[tg.Key]; !m.Beacon {
			got[m.Service] = append(got[m.Service], tg.Addr.String())
		}
	}
	want := map[string][]string{
		"shop/dual":   {"[fd00::2]:80", "10.0.0.2:80"},
		"shop/v6":     {"[fd00::2]:81"},
		"shop/legacy": {"10.0.0.2:82"},
	}
	for svc, w := range want {
		if !slices.Equal(got[svc], w) {
			t.Errorf("%s probed on %v, want %v", svc, got[svc], w)
		}
	}
}

// TestSourceAddrs: probes leave from the source address of their target's
// family, and a target that is gone takes its prober with it.
func TestSourceAddrs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	src := netip.MustParseAddr("127.0.0.5")
	from := make(chan netip.Addr, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyLn := serve(t, ln, func(c net.Conn) {
		select {
		case from <- netip.MustParseAddrPort(c.RemoteAddr().String()).Addr():
		default:
		}
		c.Close()
	})
	port := int32(netip.MustParseAddrPort(proxyLn.Addr().String()).Port())
	web := service("web", map[string]string{contract.AnnotationProbeInterval: "100ms", contract.AnnotationRise: "1", contract.AnnotationFall: "1"},
		corev1.ServicePort{Name: "http", Port: port, Protocol: corev1.ProtocolTCP})
	f := newFixture(t, ctx, "n2", Config{
		SourceAddrs:      []netip.Addr{netip.MustParseAddr("fd00:198:18::9"), src},
		MinWriteInterval: 20 * time.Millisecond,
		Scheduler:        prober.Config{Interval: 100 * time.Millisecond, Rise: 1, Fall: 1},
	}, true, web, node("n1", "127.0.0.1", ""), node("n2", "127.0.0.2", ""), proberPod("n1"), proberPod("n2"), proxyPod(web, "n1"))
	a := f.agent
	if got := a.source(netip.MustParseAddr("fd00:198:18::1")); got != netip.MustParseAddr("fd00:198:18::9") {
		t.Errorf("source of an IPv6 target %v, want the IPv6 source", got)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	key := contract.TargetKey("shop/web", "TCP", port, "n1")
	waitReport(t, ctx, f.reports, "n2", "target Up", func(r *v1alpha1.ProbeReport) bool {
		res := resultsByTarget(r)[key]
		return res != nil && res.State == v1alpha1.StateUp
	})
	if got := <-from; got != src {
		t.Errorf("probe came from %v, want %v", got, src)
	}

	// The proxy pod goes: its target's prober is dropped; the beacon's stays.
	if err := f.client.CoreV1().Pods(systemNS).Delete(ctx, "pulselb-web-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		_, target := a.probers[key]
		_, beacon := a.probers[contract.BeaconKey("n1")]
		return !target && beacon, nil
	})
	if err != nil {
		a.mu.Lock()
		t.Errorf("probers after the proxy pod left: %v", slices.Collect(maps.Keys(a.probers)))
		a.mu.Unlock()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNodeUpdatesThatChangeNoTarget: a Node update that changes none of
// what the targets read (addresses, Ready, zone) does not make the prober
// recompute its targets; one that does, does.
func TestNodeUpdatesThatChangeNoTarget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n1 := node("n1", "127.0.0.1", "z1")
	f := newFixture(t, ctx, "n2", Config{}, true, n1, node("n2", "127.0.0.2", "z1"), proberPod("n1"), proberPod("n2"))
	a := f.agent
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	refreshes := func() float64 { return testutil.ToFloat64(a.cfg.Metrics.refreshes) }
	// The start's refresh, and the informers' adds that may queue one more.
	waitReport(t, ctx, f.reports, "n2", "the first report", func(*v1alpha1.ProbeReport) bool { return true })
	settled := func() float64 {
		t.Helper()
		var last float64 = -1
		for range 50 {
			cur := refreshes()
			if cur == last {
				return cur
			}
			last = cur
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("refreshes still growing: %v", last)
		return 0
	}
	before := settled()

	update := func(what string, change func(*corev1.Node)) {
		t.Helper()
		cur, err := f.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cur)
		if _, err := f.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	update("unhealthy label", func(n *corev1.Node) { n.Labels[contract.LabelUnhealthy] = "true" })
	update("heartbeat", func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.Now() })
	update("taint", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}} })
	// The informer delivers in order: once a later, relevant update has
	// been handled, the three above have been too.
	update("not Ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse })
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return refreshes() > before, nil
	})
	if err != nil {
		t.Fatalf("a node going not Ready did not recompute the targets")
	}
	if got := settled(); got != before+1 {
		t.Errorf("%v recomputations after four Node updates, want 1 (for Ready only)", got-before)
	}

	for _, tc := range []struct {
		what   string
		change func(*corev1.Node)
		want   bool
	}{
		{"zone", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "z2" }, true},
		{"address", func(n *corev1.Node) { n.Status.Addresses[0].Address = "127.0.0.9" }, true},
		{"second address", func(n *corev1.Node) {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00:198:18::1"})
		}, true},
		{"Ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }, true},
		{"other label", func(n *corev1.Node) { n.Labels["x"] = "y" }, false},
		{"unschedulable", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false},
	} {
		cur := n1.DeepCopy()
		tc.change(cur)
		if got := nodeUpdateMatters(n1, cur); got != tc.want {
			t.Errorf("a change of %s matters: %v, want %v", tc.what, got, tc.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestTargetsLeaveOutSCTP: a Service with a TCP and an SCTP port is
// probed on its TCP port on every proxy node, by in-cluster and external
// vantages alike, and never on its SCTP port, which no proxy forwards
// (contract.Served): a probe there could only fail and fail the node.
func TestTargetsLeaveOutSCTP(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mixed := service("mixed", nil,
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP})
	mixed.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}}
	nodes := []string{"na", "nb", "nc", "nd"}
	objs := []runtime.Object{mixed}
	for i, n := range nodes {
		objs = append(objs, node(n, fmt.Sprintf("10.0.0.%d", i+1), "z"), proberPod(n), proxyPod(mixed, n))
	}
	check := func(t *testing.T, targets []prober.Target, meta map[string]report.Target, probed map[string]bool) {
		t.Helper()
		for _, tg := range targets {
			m := meta[tg.Key]
			if m.Beacon {
				continue
			}
			if m.PortProtocol != string(corev1.ProtocolTCP) || m.Port != 80 || tg.Addr.Port() != 80 || tg.Protocol != probespec.TCP {
				t.Errorf("target %s: %s/%d probed with %s at %s; want only TCP/80", tg.Key, m.PortProtocol, m.Port, tg.Protocol, tg.Addr)
			}
			probed[m.Node] = true
		}
	}

	t.Run("in-cluster", func(t *testing.T) {
		probed := map[string]bool{}
		for _, self := range nodes {
			a, _ := newAgent(t, ctx, self, Config{Vantages: 3}, objs...)
			targets, meta, err := a.targets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			check(t, targets, meta, probed)
		}
		if want := len(nodes); len(probed) != want {
			t.Errorf("TCP/80 probed on %v, want every one of the %d proxy nodes", probed, want)
		}
	})
	t.Run("external", func(t *testing.T) {
		probed := map[string]bool{}
		a, _ := newAgent(t, ctx, "vps", Config{External: true}, objs...)
		targets, meta, err := a.targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(t, targets, meta, probed)
		if !probed["na"] || !probed["nb"] || len(probed) != 2 {
			t.Errorf("TCP/80 probed on %v, want the published na and nb", probed)
		}
	})
}

// TestServiceUpdateMatters: a status-only write (the controller's own) does
// not recompute an in-cluster agent's targets; it does an external one's,
// which probes the published addresses; spec, annotations, labels and
// deletion always do.
func TestServiceUpdateMatters(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: map[string]string{"a": "1"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	now := metav1.Now()
	for _, tc := range []struct {
		what              string
		change            func(*corev1.Service)
		inCluster, extern bool
	}{
		{"ingress", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.1.1"}}
		}, false, true},
		{"condition", func(s *corev1.Service) {
			s.Status.Conditions = []metav1.Condition{{Type: "pulselb.io/Healthy", Status: metav1.ConditionTrue}}
		}, false, false},
		{"port", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }, true, true},
		{"annotation", func(s *corev1.Service) { s.Annotations["a"] = "2" }, true, true},
		// Written by the controller with every change of addresses.
		{"written annotations", func(s *corev1.Service) {
			s.Annotations[contract.AnnotationNodes] = "n1"
			s.Annotations[contract.AnnotationInternalIPs] = "198.18.1.1"
		}, false, true},
		{"held-out addresses", func(s *corev1.Service) { s.Annotations[contract.AnnotationExternalUnreachable] = "198.18.1.2" }, false, true},
		{"label", func(s *corev1.Service) { s.Labels = map[string]string{"x": "y"} }, true, true},
		{"deletion", func(s *corev1.Service) { s.DeletionTimestamp = &now }, true, true},
	} {
		cur := svc.DeepCopy()
		tc.change(cur)
		if got := serviceUpdateMatters(svc, cur, false); got != tc.inCluster {
			t.Errorf("in-cluster: a change of %s matters: %v, want %v", tc.what, got, tc.inCluster)
		}
		if got := serviceUpdateMatters(svc, cur, true); got != tc.extern {
			t.Errorf("external: a change of %s matters: %v, want %v", tc.what, got, tc.extern)
		}
	}
	if !serviceUpdateMatters(&corev1.Pod{}, &corev1.Pod{}, false) {
		t.Error("a pod update does not matter")
	}
}

// TestTargetsOnlyHeldPorts: after a Service's port changed from 80 to 81,
// a proxy from before the change (holding host port 80) is not probed on
// 81, which it does not serve and the controller does not judge there;
// its successor on another node is. Before the one target list
// (contract.ListTargets) the agent probed 81 on both.
func TestTargetsOnlyHeldPorts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	web := service("web", nil, corev1.ServicePort{Name: "http", Port: 81, Protocol: corev1.ProtocolTCP})
	holding := func(p *corev1.Pod, port int32) *corev1.Pod {
		p.Spec.Containers = []corev1.Container{{Name: "proxy", Ports: []corev1.ContainerPort{{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP}}}}
		return p
	}
	nodes := []string{"na", "nb", "nc", "nd"}
	objs := []runtime.Object{web, holding(proxyPod(web, "na"), 80), holding(proxyPod(web, "nb"), 81)}
	for i, n := range nodes {
		objs = append(objs, node(n, fmt.Sprintf("10.0.0.%d", i+1), "z"), proberPod(n))
	}
	probed := map[string]bool{}
	for _, self := range nodes {
		a, _ := newAgent(t, ctx, self, Config{Vantages: 3}, objs...)
		_, meta, err := a.targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range meta {
			if !m.Beacon {
				probed[fmt.Sprintf("%s/%d on %s", m.PortProtocol, m.Port, m.Node)] = true
			}
		}
	}
	if want := map[string]bool{"TCP/81 on nb": true}; !maps.Equal(probed, want) {
		t.Errorf("probed %v, want %v: na's proxy holds only the old port 80", probed, want)
	}
}
