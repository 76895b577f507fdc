package e2e

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/planned"
	"github.com/pulselb/pulselb/test/scenario"
	"github.com/pulselb/pulselb/test/traffic"
)

// The Services of TestPlannedChanges. web is pulselb as a user runs it
// with short timings: DNS TTL 1 s, drain delay 3 s. nodelay is what K3s
// ServiceLB does, no drain delay, with pulselb's default TTL of 5 s, which
// a client holds: it must lose requests, which shows the client sees a
// loss when there is one.
var (
	plannedWeb     = planned.ServiceConfig{Name: "web", Port: 80, DrainDelay: "3s"}
	plannedNoDelay = planned.ServiceConfig{Name: "nodelay", Port: 81, DrainDelay: "0s", DNSTTL: 5}
)

// TestPlannedChanges runs the planned changes of DESIGN.md ("Planned
// changes lose nothing") on one cluster of four nodes (three for proxies,
// one for the backend), while a client outside the cluster sends requests
// without a pause to each Service, resolving its name through pulselb's
// DNS servers and holding each answer for its TTL: web must lose none.
func TestPlannedChanges(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 4, WaitForMachine: 30 * time.Minute})
	ctx := t.Context()
	start := time.Now()
	env, err := planned.Setup(ctx, c, planned.Config{
		Services: []planned.ServiceConfig{plannedWeb, plannedNoDelay},
		DNSTTL:   1,
		Logf:     t.Logf,
	})
	if env != nil {
		t.Cleanup(func() {
			if err := env.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatalf("setting up pulselb: %v; pods: %s", err, describePods(ctx, c.Client, planned.SystemNamespace))
	}
	t.Logf("set up in %s", time.Since(start).Round(time.Millisecond))

	// measure runs change under the clients and checks that web lost
	// nothing. It returns the reports, nil when the change failed.
	measure := func(t *testing.T, change func(context.Context) error) map[string]traffic.Report {
		t.Helper()
		began := time.Now()
		reports, err := env.Measure(ctx, change)
		for _, s := range []planned.ServiceConfig{plannedWeb, plannedNoDelay} {
			r := reports[s.Name]
			t.Logf("%s: %s", s.Name, r)
			for _, f := range r.Failures(5) {
				report := t.Logf
				if s == plannedWeb {
					report = t.Errorf
				}
				report("%s: request to %s at +%s (%s) failed after %s: %s", s.Name, f.Addr, f.At.Sub(began).Round(time.Millisecond),
					f.At.Format("15:04:05.000"), f.Took.Round(time.Millisecond), f.Err)
			}
		}
		t.Logf("change and settling took %s", time.Since(began).Round(time.Millisecond))
		if err != nil {
			t.Errorf("change: %v\npods: %s", err, describePods(ctx, c.Client, planned.SystemNamespace))
			return nil
		}
		return reports
	}
	// lostWithoutDelay checks that nodelay, whose proxy on node was
	// removed without a drain delay, lost requests.
	lostWithoutDelay := func(t *testing.T, reports map[string]traffic.Report, hadProxy bool) {
		t.Helper()
		if reports == nil {
			return
		}
		if !hadProxy {
			t.Logf("nodelay had no proxy on the node; its loss is not checked")
			return
		}
		if reports[plannedNoDelay.Name].Failed == 0 {
			t.Errorf("nodelay (drain-delay 0s) lost no request: the client would not see a loss either")
		}
	}
	hasProxy := func(svc, node string) bool {
		for _, n := range env.ProxyNodesOf(ctx, svc) {
			if n == node {
				return true
			}
		}
		return false
	}

	t.Run("ProxiesRolled", func(t *testing.T) {
		measure(t, func(ctx context.Context) error { return env.RollProxies(ctx, "ghcr.io/pulselb/pulselb:v2") })
	})

	t.Run("MaintenanceThenDrain", func(t *testing.T) {
		node := env.SharedProxyNode(ctx)
		noDelayThere := hasProxy(plannedNoDelay.Name, node)
		reports := measure(t, func(ctx context.Context) error { return env.MaintainAndDrain(ctx, node) })
		lostWithoutDelay(t, reports, noDelayThere)
		if reports == nil {
			_ = env.EndMaintenance(ctx, node)
		}
	})

	t.Run("TwoNodesDrained", func(t *testing.T) {
		nodes := env.ProxyNodesOf(ctx, plannedWeb.Name)
		var results []cluster.DrainResult
		measure(t, func(ctx context.Context) error {
			var err error
			results, err = env.DrainNodes(ctx, nodes...)
			return err
		})
		refused := 0
		for i, r := range results {
			t.Logf("drained %s: evicted %v, refused %d times", nodes[i], r.Evicted, r.Refused)
			refused += r.Refused
		}
		// Both of web's proxies were asked to go at once: its budget
		// must have refused one until the other's replacement was ready.
		if results != nil && refused == 0 {
			t.Errorf("no eviction was refused while both of web's proxy nodes %v drained: no PodDisruptionBudget held", nodes)
		}
	})

	t.Run("ReplicasLowered", func(t *testing.T) {
		measure(t, func(ctx context.Context) error { return env.SetReplicas(ctx, plannedWeb.Name, 1) })
		if err := env.SetReplicas(ctx, plannedWeb.Name, 2); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitSettled(ctx, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LeaderKilledAndProbersRolled", func(t *testing.T) {
		recs := map[string]*scenario.StatusRecorder{}
		for _, s := range []planned.ServiceConfig{plannedWeb, plannedNoDelay} {
			recs[s.Name] = scenario.RecordStatus(ctx, c.Client, planned.AppNamespace, s.Name)
		}
		// The recorders' first observation is the current status.
		poll(ctx, t, 10*time.Second, "the status recorders started", func() bool {
			return recs[plannedWeb.Name].Count() > 0 && recs[plannedNoDelay.Name].Count() > 0
		})
		reports := measure(t, func(ctx context.Context) error {
			if err := env.KillLeader(ctx); err != nil {
				return err
			}
			return env.RollProbers(ctx)
		})
		for name, rec := range recs {
			for _, w := range rec.Since(1) {
				t.Errorf("%s: status written at %s (ingress %v); a leader change and a prober rollout must write none", name, w.At.Format(time.RFC3339Nano), w.IPs)
			}
		}
		if r := reports[plannedNoDelay.Name]; reports != nil && r.Failed > 0 {
			t.Errorf("nodelay lost %d requests although no proxy changed", r.Failed)
		}
	})

	t.Run("SourceRangesInPlace", func(t *testing.T) {
		testSourceRanges(ctx, t, c.Client, planned.AppNamespace, map[string]string{"app": planned.Backend},
			intstr.FromString("http"), map[string]string{contract.AnnotationNodeSelector: corev1.LabelHostname + "!=" + env.BackendNode})
	})

	t.Run("ClientAddress", func(t *testing.T) {
		testClientAddress(ctx, t, c.Client, clientAddressCase{namespace: planned.AppNamespace, selector: map[string]string{"app": planned.Backend},
			backendPort: intstr.FromString("http"), version: "v2",
			annotations: map[string]string{contract.AnnotationNodeSelector: corev1.LabelHostname + "!=" + env.BackendNode}})
	})

	t.Run("AddressBeforeBackends", func(t *testing.T) {
		testAddressBeforeBackends(ctx, t, c.Client, planned.AppNamespace, env.BackendNode,
			map[string]string{contract.AnnotationNodeSelector: corev1.LabelHostname + "!=" + env.BackendNode})
	})

	t.Run("FirstAddressStaysFirst", func(t *testing.T) {
		low, high := env.ProxyNodes[0], env.ProxyNodes[1]
		testFirstAddressStaysFirst(ctx, t, c.Client, planned.AppNamespace, map[string]string{"app": planned.Backend}, intstr.FromString("http"),
			low, high, map[string]string{low: env.NodeIP(low), high: env.NodeIP(high)})
	})

	t.Run("OneProxyRolledInPlace", func(t *testing.T) {
		testOneProxyRolledInPlace(ctx, t, c.Client, planned.AppNamespace, env.SharedProxyNode(ctx), map[string]string{"app": planned.Backend})
	})

	t.Run("ConnectionSurvivesDrain", func(t *testing.T) {
		node := env.SharedProxyNode(ctx)
		noDelayThere := hasProxy(plannedNoDelay.Name, node)
		addr := netip.AddrPortFrom(netip.MustParseAddr(env.NodeIP(node)), uint16(plannedWeb.Port))
		conn, err := traffic.DialEcho(ctx, planned.InClientNamespace, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		delay, err := time.ParseDuration(plannedWeb.DrainDelay)
		if err != nil {
			t.Fatal(err)
		}
		reports := measure(t, func(ctx context.Context) error {
			drained := make(chan error, 1)
			go func() {
				_, err := env.DrainNodes(ctx, node)
				drained <- err
			}()
			var deleted time.Time
			poll(ctx, t, 30*time.Second, "web's proxy on "+node+" terminating", func() bool {
				for _, p := range listPods(ctx, t, c.Client, planned.SystemNamespace, contract.LabelServiceName+"=web") {
					if p.Spec.NodeName == node && p.DeletionTimestamp != nil {
						deleted = time.Now()
						return true
					}
				}
				return false
			})
			// Past the drain delay the proxy refuses new connections;
			// this one, opened before, must still carry data, and close
			// well before the drain timeout.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(deleted.Add(delay + time.Second))):
			}
			if err := conn.Exchange("still there after the drain delay", 2*time.Second); err != nil {
				t.Errorf("the connection opened before the drain broke: %v", err)
			}
			if err := conn.Close(); err != nil {
				t.Errorf("closing: %v", err)
			}
			return <-drained
		})
		lostWithoutDelay(t, reports, noDelayThere)
	})

	t.Run("PortChanged", func(t *testing.T) {
		for _, s := range []planned.ServiceConfig{
			{Name: "ports-tcp", Port: 8081, Protocol: corev1.ProtocolTCP},
			{Name: "ports-udp", Port: 5301, Protocol: corev1.ProtocolUDP},
		} {
			t.Run(string(s.Protocol), func(t *testing.T) { testPortChanged(ctx, t, env, s, s.Port+1) })
		}
	})

	if t.Failed() {
		for _, ctl := range env.Controllers {
			log, _ := os.ReadFile(ctl.LogPath())
			t.Logf("controller log %s (tail):\n%s", ctl.LogPath(), scenario.Tail(string(log), 40))
		}
	}
	t.Logf("TestPlannedChanges took %s", time.Since(start).Round(time.Second))
}

// portAnswerBound is how soon after a Service's port changed every address
// it had must answer on the new port: a new proxy's start and its probes
// (Kubernetes' own spec allows two minutes).
const portAnswerBound = 30 * time.Second

// testPortChanged is Kubernetes' "should be able to change the type and
// ports of a TCP/UDP service" in pulselb's terms: a Service's port changes
// (s.Port to port), the addresses it publishes stay the same throughout,
// and each answers on the new port within portAnswerBound.
func testPortChanged(ctx context.Context, t *testing.T, env *planned.Env, s planned.ServiceConfig, port int32) {
	if err := env.AddService(ctx, s); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.DeleteService(ctx, s.Name); err != nil {
			t.Error(err)
		}
	}()
	before, err := env.Ingress(ctx, s.Name)
	if err != nil || len(before) == 0 {
		t.Fatalf("published %v, %v", before, err)
	}
	for _, ip := range before {
		if err := planned.Answers(ip, s.Port, s.Protocol); err != nil {
			t.Fatalf("before the change: %v", err)
		}
	}
	rec := scenario.RecordStatus(ctx, env.Client, planned.AppNamespace, s.Name)
	poll(ctx, t, 10*time.Second, "the status recorder started", func() bool { return rec.Count() > 0 })

	changed := time.Now()
	if err := env.ChangePort(ctx, s.Name, port); err != nil {
		t.Fatal(err)
	}
	pending := slices.Clone(before)
	for len(pending) > 0 && time.Since(changed) < portAnswerBound {
		pending = slices.DeleteFunc(pending, func(ip string) bool {
			if err := planned.Answers(ip, port, s.Protocol); err != nil {
				return false
			}
			t.Logf("%s answers on %s/%d %s after the change", ip, s.Protocol, port, time.Since(changed).Round(10*time.Millisecond))
			return true
		})
		time.Sleep(100 * time.Millisecond)
	}
	for _, ip := range pending {
		t.Errorf("%s (published before the change) does not answer on %s/%d %s after it: %v", ip, s.Protocol, port, portAnswerBound, planned.Answers(ip, port, s.Protocol))
	}
	// Once the old proxies are gone, and a little longer, the status must
	// still be what it was, and must never have been anything else.
	if err := env.WaitProxiesRolled(ctx, s.Name, 3*time.Minute); err != nil {
		t.Error(err)
	}
	time.Sleep(5 * time.Second)
	for _, w := range rec.Since(0) {
		if !slices.Equal(w.IPs, before) {
			t.Errorf("status at +%s: ingress %v, want %v throughout", w.At.Sub(changed).Round(time.Millisecond), w.IPs, before)
		}
	}
	for _, ip := range before {
		if err := planned.Answers(ip, port, s.Protocol); err != nil {
			t.Errorf("after the rollout: %v", err)
		}
	}
	t.Logf("%s: proxies on %v", s.Name, env.ProxyNodesOf(ctx, s.Name))
}
