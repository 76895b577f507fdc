package contract

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func targetNode(name string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "z"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func targetPod(name, node string, objLabels map[string]string, hostPorts ...int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: name, Labels: objLabels},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if len(hostPorts) > 0 {
		c := corev1.Container{Name: "proxy"}
		for _, hp := range hostPorts {
			c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: hp, HostPort: hp})
		}
		p.Spec.Containers = []corev1.Container{c}
	}
	return p
}

// TestListTargets lists a small cluster in which each proxy pod or port
// left out is left out for one reason, and checks the reasons, the
// targets (one per Service, port and node, whatever the pods), their
// addresses per family and their vantages.
func TestListTargets(t *testing.T) {
	svc := func(name string, opts ...func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
		for _, o := range opts {
			o(s)
		}
		return s
	}
	now := metav1.Now()
	web := svc("web", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 81, Protocol: corev1.ProtocolTCP})
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	})
	gone := svc("gone", func(s *corev1.Service) { s.DeletionTimestamp = &now; s.Finalizers = []string{"x"} })
	other := svc("other", func(s *corev1.Service) { s.Spec.LoadBalancerClass = new("example.com/other") })
	services := map[types.NamespacedName]*corev1.Service{}
	for _, s := range []*corev1.Service{web, gone, other} {
		services[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	proxy := func(name, node string, s *corev1.Service, hostPorts ...int32) *corev1.Pod {
		return targetPod(name, node, ProxySelector(s), hostPorts...)
	}
	deleting := proxy("web-deleting", "n2", web)
	deleting.DeletionTimestamp = &now
	proxies := []*corev1.Pod{
		proxy("web-1", "n1", web, 80, 81),
		proxy("web-1b", "n1", web), // a second pod on n1: the same targets
		proxy("web-old", "n2", web, 80),
		proxy("web-pending", "", web),
		deleting,
		proxy("gone-1", "n1", gone),
		proxy("other-1", "n1", other),
		proxy("web-bare", "n5", web),
		targetPod("stray", "n1", map[string]string{LabelAppName: ProxyAppName}),
	}
	var probers []*corev1.Pod
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		probers = append(probers, targetPod("prober-"+n, n, map[string]string{LabelAppName: ProberAppName}))
	}
	// n4's prober restarts: no vantage, but its node keeps a beacon. n6's
	// is being deleted: neither.
	probers[3].Status.Conditions[0].Status = corev1.ConditionFalse
	probers[5].DeletionTimestamp = &now
	parsed := 0
	in := TargetInput{
		Service: func(n types.NamespacedName) (*corev1.Service, bool) { s, ok := services[n]; return s, ok },
		Settings: func(s *corev1.Service) Settings {
			parsed++
			settings, _ := Parse(s)
			return settings
		},
		Nodes: []*corev1.Node{targetNode("n1", "10.0.0.1", "fd00::1"), targetNode("n2", "10.0.0.2"), targetNode("n3", "10.0.0.3"),
			targetNode("n4", "10.0.0.4"), targetNode("n5"), targetNode("n6", "10.0.0.6")},
		Probers: probers, Proxies: proxies, Vantages: 3,
	}
	got := ListTargets(in)

	type exclusion struct {
		pod  string
		port int32
		why  ExcludedReason
	}
	var excluded []exclusion
	for _, e := range got.Excluded {
		excluded = append(excluded, exclusion{e.Pod, e.Port.Port, e.Reason})
	}
	want := []exclusion{
		{"pulselb-system/web-old", 81, ExcludedPortNotHeld},
		{"pulselb-system/web-pending", 0, ExcludedNotScheduled},
		{"pulselb-system/web-deleting", 0, ExcludedPodDeleting},
		{"pulselb-system/gone-1", 0, ExcludedServiceDeleting},
		{"pulselb-system/other-1", 0, ExcludedNotServed},
		{"pulselb-system/web-bare", 0, ExcludedNoAddress},
		{"pulselb-system/stray", 0, ExcludedNoService},
	}
	if !slices.Equal(excluded, want) {
		t.Errorf("excluded %v, want %v", excluded, want)
	}

	var keys []string
	for _, p := range got.Ports {
		keys = append(keys, p.Key)
		if len(p.Vantages) != 3 || slices.Contains(p.Vantages, p.Node) {
			t.Errorf("%s: vantages %v, want 3 other nodes", p.Key, p.Vantages)
		}
	}
	wantKeys := []string{TargetKey("shop/web", "TCP", 80, "n1"), TargetKey("shop/web", "TCP", 81, "n1"), TargetKey("shop/web", "TCP", 80, "n2")}
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("targets %v, want %v", keys, wantKeys)
	}
	n1 := got.Ports[0]
	if len(n1.Pods) != 2 {
		t.Errorf("%s served by %d pods, want both of n1's", n1.Key, len(n1.Pods))
	}
	// IPv6 first, as the Service lists its families; the second family's
	// probe has a key of its own.
	if want := []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.1")}; !slices.Equal(n1.Addrs, want) {
		t.Errorf("%s probed on %v, want %v", n1.Key, n1.Addrs, want)
	}
	if k := n1.AddrKey(1); k != n1.Key+"|10.0.0.1" || n1.AddrKey(0) != n1.Key {
		t.Errorf("per-family keys %q %q", n1.AddrKey(0), k)
	}
	if a := got.Ports[2].Addrs; len(a) != 1 || a[0] != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("n2's target probed on %v, want its only address", a)
	}
	var beacons []string
	for _, b := range got.Beacons {
		beacons = append(beacons, b.Node)
	}
	if want := []string{"n1", "n2", "n3", "n4"}; !slices.Equal(beacons, want) {
		t.Errorf("beacons of %v, want %v (n4's prober not ready, n5 without an address, n6's prober deleted)", beacons, want)
	}
	var cands []string
	for _, v := range got.Candidates {
		cands = append(cands, v.Node)
	}
	if want := []string{"n1", "n2", "n3", "n5"}; !slices.Equal(cands, want) {
		t.Errorf("vantages %v, want %v (the ready probers)", cands, want)
	}
	if b := got.Beacons[3]; len(b.Vantages) != 3 || slices.Contains(b.Vantages, "n4") {
		t.Errorf("n4's beacon judged by %v, want 3 ready probers of other nodes", b.Vantages)
	}
	if parsed != 1 {
		t.Errorf("settings read %d times, want once: only web has targets", parsed)
	}
}

// TestListTargetsPortRange: a port no socket can be opened on is left out
// with its reason.
func TestListTargetsPortRange(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	in := TargetInput{
		Service: func(types.NamespacedName) (*corev1.Service, bool) { return s, true },
		Settings: func(*corev1.Service) Settings {
			return Settings{Probes: []Probe{{Port: PortKey{Protocol: corev1.ProtocolTCP, Port: 70000}}}}
		},
		Nodes:    []*corev1.Node{targetNode("n1", "10.0.0.1")},
		Proxies:  []*corev1.Pod{targetPod("web-1", "n1", ProxySelector(s))},
		Vantages: 3,
	}
	got := ListTargets(in)
	if len(got.Ports) != 0 || len(got.Excluded) != 1 || got.Excluded[0].Reason != ExcludedPortOutOfRange {
		t.Errorf("targets %+v, excluded %+v; want port 70000 left out as %s", got.Ports, got.Excluded, ExcludedPortOutOfRange)
	}
}
