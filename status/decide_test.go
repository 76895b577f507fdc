package status

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
)

var now = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func svc(families ...corev1.IPFamily) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeLoadBalancer,
			IPFamilies: families,
			Ports:      []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
}

// node returns a node with addresses given as "ext:IP" or "int:IP".
func node(name string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, a := range addrs {
		kind, ip, _ := strings.Cut(a, ":")
		t := corev1.NodeInternalIP
		if kind == "ext" {
			t = corev1.NodeExternalIP
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: t, Address: ip})
	}
	return n
}

// pod returns a proxy pod on nodeName: state is "ready", "running"
// (not ready), "pending" (bound, not running), "terminating",
// "terminating-gated" (terminating, its containers ready, its readiness
// gate closed) or "pinned" (unbound, pinned to nodeName).
func pod(nodeName, state string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: "p-" + nodeName}, Spec: corev1.PodSpec{NodeName: nodeName}}
	switch state {
	case "terminating-gated":
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		}
		p.DeletionTimestamp = &now
	case "pinned":
		p.Name += "-next"
		p.Spec.NodeName = ""
		p.Annotations = map[string]string{contract.AnnotationHome: nodeName}
		p.Status.Phase = corev1.PodPending
	case "ready", "terminating":
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if state == "terminating" {
			p.DeletionTimestamp = &now
		}
	case "running":
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	default:
		p.Status.Phase = corev1.PodPending
	}
	return p
}

func nodeMap(nodes ...*corev1.Node) map[string]*corev1.Node {
	m := map[string]*corev1.Node{}
	for _, n := range nodes {
		m[n.Name] = n
	}
	return m
}

func ingressIPs(r Result) []string {
	var out []string
	for _, in := range r.LoadBalancer.Ingress {
		if in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeProxy {
			panic("ingress without ipMode Proxy: " + in.IP)
		}
		out = append(out, in.IP)
	}
	return out
}

func TestDecide(t *testing.T) {
	mixed := nodeMap(
		node("a", "int:10.0.0.1", "ext:203.0.113.1"),
		node("b", "int:10.0.0.2"),
		node("c", "int:10.0.0.3", "ext:203.0.113.3", "int:fd00::3", "ext:2001:db8::3"),
	)
	internalOnly := nodeMap(node("a", "int:10.0.0.1"), node("b", "int:10.0.0.2"))
	tests := []struct {
		name        string
		in          Input
		want        []string
		healthy     string // reason of Healthy
		scheduled   string // reason of ProxiesScheduled
		annotations map[string]string
	}{
		{
			name: "internal IPs when no proxy node has an external one",
			in:   Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("b", "ready"), pod("a", "ready")}},
			want: []string{"10.0.0.1", "10.0.0.2"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
			annotations: map[string]string{contract.AnnotationInternalIPs: "10.0.0.1,10.0.0.2", contract.AnnotationExternalIPs: "", contract.AnnotationNodes: "a,b"},
		},
		{
			name: "auto prefers external IPs when any proxy node has one",
			in:   Input{Service: svc(corev1.IPv4Protocol), Nodes: mixed, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")}},
			want: []string{"203.0.113.1"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
			annotations: map[string]string{contract.AnnotationInternalIPs: "10.0.0.1,10.0.0.2", contract.AnnotationExternalIPs: "203.0.113.1", contract.AnnotationNodes: "a,b"},
		},
		{
			name: "internal", in: Input{Service: svc(corev1.IPv4Protocol), Nodes: mixed, AddressType: contract.AddressInternal, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")}},
			want: []string{"10.0.0.1", "10.0.0.2"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "both", in: Input{Service: svc(corev1.IPv4Protocol), Nodes: mixed, AddressType: contract.AddressBoth, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")}},
			want: []string{"10.0.0.1", "10.0.0.2", "203.0.113.1"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "dual-stack IPv6 first by ipFamilies",
			in: Input{Service: svc(corev1.IPv6Protocol, corev1.IPv4Protocol), Nodes: mixed, AddressType: contract.AddressExternal,
				Pods: []*corev1.Pod{pod("c", "ready"), pod("a", "ready")}},
			want: []string{"2001:db8::3", "203.0.113.1", "203.0.113.3"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "single-stack IPv4 never publishes IPv6",
			in:   Input{Service: svc(corev1.IPv4Protocol), Nodes: mixed, AddressType: contract.AddressBoth, Pods: []*corev1.Pod{pod("c", "ready")}},
			want: []string{"10.0.0.3", "203.0.113.3"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "only ready pods publish; terminating and unready do not",
			in: Input{Service: svc(), Nodes: mixed, AddressType: contract.AddressInternal,
				Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "running"), pod("c", "terminating")}},
			want: []string{"10.0.0.1"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "unhealthy node dropped",
			in: Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")},
				Health: map[string]Health{"a": {Down: true}}},
			want: []string{"10.0.0.2"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "all down publishes every proxy node by default",
			in: Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")},
				Health: map[string]Health{"a": {Down: true}, "b": {Down: true}}},
			want: []string{"10.0.0.1", "10.0.0.2"}, healthy: ReasonAllDown, scheduled: ReasonScheduled,
		},
		{
			name: "all down with publish-none publishes nothing",
			in: Input{Service: svc(), Nodes: internalOnly, AllDown: contract.AllDownPublishNone, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")},
				Health: map[string]Health{"a": {Down: true}, "b": {Down: true}}},
			want: nil, healthy: ReasonAllDown, scheduled: ReasonScheduled,
		},
		{
			name: "new Service with no ready proxy publishes nothing yet",
			in:   Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "pending")}},
			want: nil, healthy: ReasonNoProxyReady, scheduled: ReasonScheduled,
		},
		{
			name: "published Service whose proxies all turn unready stays on the scheduled nodes",
			in: Input{Service: func() *corev1.Service {
				s := svc()
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
				return s
			}(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "running"), pod("b", "running")}},
			want: []string{"10.0.0.1", "10.0.0.2"}, healthy: ReasonAllDown, scheduled: ReasonScheduled,
		},
		{
			// Every proxy node drained at once: the old proxies still
			// forward for their drain delay, the new one is not ready.
			name: "published Service whose proxies are all being removed stays on the draining ones, not the new one",
			in: Input{Service: func() *corev1.Service {
				s := svc()
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}}
				return s
			}(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "terminating"), pod("b", "terminating"), pod("c", "pending")}},
			want: []string{"10.0.0.1", "10.0.0.2"}, healthy: ReasonAllDown, scheduled: ReasonScheduled,
		},
		{
			// A one-proxy Service rolled in place (its other nodes cut
			// off): the old proxy drains, its successor is pinned to the
			// same node and waits for the host port.
			name: "published Service rolled in place keeps its node while the old proxy drains, ready or not",
			in: Input{Service: func() *corev1.Service {
				s := svc()
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
				return s
			}(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "terminating-gated"), pod("a", "pinned")}},
			want: []string{"10.0.0.1"}, healthy: ReasonAllDown, scheduled: ReasonPending,
		},
		{
			name: "published Service rolled in place keeps its node between the old proxy's exit and the successor's binding",
			in: Input{Service: func() *corev1.Service {
				s := svc()
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
				return s
			}(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "pinned")}},
			want: []string{"10.0.0.1"}, healthy: ReasonAllDown, scheduled: ReasonPending,
		},
		{
			name: "a pinned pod does not publish a Service with nothing published",
			in:   Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "pinned")}},
			want: nil, healthy: ReasonNoProxyReady, scheduled: ReasonPending,
		},
		{
			name: "externalTrafficPolicy Local publishes only nodes with a ready endpoint",
			in: Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "ready"), pod("b", "ready")},
				LocalEndpointNodes: map[string]bool{"b": true}},
			want: []string{"10.0.0.2"}, healthy: ReasonHealthy, scheduled: ReasonScheduled,
		},
		{
			name: "port conflict",
			in:   Input{Service: svc(), Nodes: internalOnly, Pods: []*corev1.Pod{pod("a", "ready")}, Conflicts: []string{"port TCP:80 is held on node b by service shop/api"}},
			want: []string{"10.0.0.1"}, healthy: ReasonHealthy, scheduled: ReasonPortConflict,
		},
		{
			name: "no eligible node",
			in:   Input{Service: svc(), Nodes: internalOnly},
			want: nil, healthy: ReasonNoProxyReady, scheduled: ReasonNoEligibleNode,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = now
			if tt.scheduled != ReasonNoEligibleNode {
				tt.in.EligibleNodes = len(tt.in.Nodes)
			}
			tt.in.Servable = true
			r := Decide(tt.in)
			if got := ingressIPs(r); !slices.Equal(got, tt.want) {
				t.Errorf("ingress %q, want %q", got, tt.want)
			}
			if c := findCondition(r.Conditions, ConditionHealthy); c == nil || c.Reason != tt.healthy {
				t.Errorf("Healthy condition %+v, want reason %s", c, tt.healthy)
			}
			if c := findCondition(r.Conditions, ConditionProxiesScheduled); c == nil || c.Reason != tt.scheduled {
				t.Errorf("ProxiesScheduled condition %+v, want reason %s", c, tt.scheduled)
			}
			for k, v := range tt.annotations {
				if r.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, r.Annotations[k], v)
				}
			}
			// Deterministic: shuffled pods give the same result.
			shuffled := tt.in
			shuffled.Pods = slices.Clone(tt.in.Pods)
			slices.Reverse(shuffled.Pods)
			if again := Decide(shuffled); Differs(withResult(tt.in.Service, r), again) {
				t.Errorf("result depends on pod order")
			}
		})
	}
}

func withResult(s *corev1.Service, r Result) *corev1.Service {
	s = s.DeepCopy()
	ApplyStatus(s, r)
	ApplyAnnotations(s, r)
	return s
}

func TestDecideSteadyState(t *testing.T) {
	in := Input{Service: svc(), Nodes: nodeMap(node("a", "int:10.0.0.1")), Pods: []*corev1.Pod{pod("a", "ready")},
		EligibleNodes: 1, Servable: true, Now: now,
		Problems: []Problem{{Reason: ReasonInvalidAnnotation, Message: `pulselb.io/replicas="two": not a whole number; using 2`}}}
	first := Decide(in)
	if c := findCondition(first.Conditions, ConditionConfigValid); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "replicas") {
		t.Errorf("ConfigValid %+v, want False naming the annotation", c)
	}
	if len(first.Events) != 1 || first.Events[0].Reason != ReasonInvalidAnnotation || first.Events[0].Type != corev1.EventTypeWarning {
		t.Errorf("events %+v, want one InvalidAnnotation warning", first.Events)
	}
	// Written and synced again later: nothing differs and no new Events.
	in.Service = withResult(in.Service, first)
	in.Now = metav1.NewTime(now.Add(time.Hour))
	second := Decide(in)
	if Differs(in.Service, second) || AnnotationsDiffer(in.Service, second) {
		t.Errorf("a second decision on an unchanged Service differs")
	}
	if len(second.Events) != 0 {
		t.Errorf("events %+v on an unchanged Service", second.Events)
	}
	// Someone else's condition survives.
	in.Service.Status.Conditions = append(in.Service.Status.Conditions, metav1.Condition{Type: "example.com/Other", Status: metav1.ConditionTrue})
	if third := Decide(in); findCondition(third.Conditions, "example.com/Other") == nil {
		t.Errorf("a foreign condition was dropped")
	}
	// Port errors from the health seam reach the ingress entry.
	in.Health = map[string]Health{"a": {PortErrors: map[contract.PortKey]string{{Protocol: corev1.ProtocolTCP, Port: 80}: "L4CON connection refused"}}}
	r := Decide(in)
	if p := r.LoadBalancer.Ingress[0].Ports; len(p) != 1 || p[0].Error == nil || *p[0].Error != "L4CON connection refused" {
		t.Errorf("ports %+v, want the port error", p)
	}
}

func TestCleared(t *testing.T) {
	s := withResult(svc(), Decide(Input{Service: svc(), Nodes: nodeMap(node("a", "int:10.0.0.1")), Pods: []*corev1.Pod{pod("a", "ready")}, Servable: true, EligibleNodes: 1, Now: now}))
	s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: "example.com/Other"})
	r := Cleared(s)
	c := withResult(s, r)
	if len(c.Status.LoadBalancer.Ingress) != 0 || len(c.Status.Conditions) != 1 || len(c.Annotations) != 0 {
		t.Errorf("cleared Service still has %+v %+v %v", c.Status.LoadBalancer, c.Status.Conditions, c.Annotations)
	}
	// Marked tells a Service pulselb wrote from one it never did or has
	// released, whatever its address.
	if !Marked(s) {
		t.Errorf("a published Service is not marked as pulselb's")
	}
	if Marked(c) {
		t.Errorf("a cleared Service is still marked as pulselb's: %v %+v", c.Annotations, c.Status.Conditions)
	}
	c.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	if Marked(c) {
		t.Errorf("another implementation's address and condition mark a Service as pulselb's")
	}
	conditionOnly := svc()
	conditionOnly.Status.Conditions = []metav1.Condition{{Type: ConditionProxiesScheduled, Status: metav1.ConditionFalse}}
	if !Marked(conditionOnly) {
		t.Errorf("a Service with pulselb's conditions but no annotation is not marked")
	}
}

func TestPublish(t *testing.T) {
	all := []string{"a", "b"}
	tests := []struct {
		name     string
		healthy  []string
		allDown  string
		want     []string
		failOpen bool
	}{
		{"the healthy ones", []string{"b"}, "", []string{"b"}, false},
		{"healthy ones even with publish-none", []string{"b"}, contract.AllDownPublishNone, []string{"b"}, false},
		{"none healthy: fail open to every candidate", nil, "", all, true},
		{"none healthy with publish-all", nil, contract.AllDownPublishAll, all, true},
		{"none healthy with publish-none: nothing", nil, contract.AllDownPublishNone, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, failOpen := Publish(tt.healthy, all, tt.allDown)
			if !slices.Equal(got, tt.want) || failOpen != tt.failOpen {
				t.Errorf("Publish(%v, %v, %q) = %v, %v; want %v, %v", tt.healthy, all, tt.allDown, got, failOpen, tt.want, tt.failOpen)
			}
		})
	}
}

// TestFailOpenNeverShrinksOntoUnprobed replays a start with 70 proxy
// nodes that are all really down: every verdict starts Unknown, then the
// nodes are probed Down in batches. The answer starts failed open (every
// node) and must stay so: it must never narrow onto the nodes not probed
// yet, which are published only because the answer failed open, and then
// jump back to every node once they too are probed Down. When a node is
// probed Up instead, the answer does narrow, to it.
func TestFailOpenNeverShrinksOntoUnprobed(t *testing.T) {
	const n = 70
	p80 := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 80}
	pending := Judgement{Reason: ReasonNoMajority, Fresh: 3, Assigned: 3}
	down := Judgement{Verdict: VerdictDown, Reason: ReasonMajorityDown, Fresh: 3, Down: 3, Assigned: 3}
	up := Judgement{Verdict: VerdictUp, Reason: ReasonMajorityUp, Fresh: 3, Up: 3, Assigned: 3}
	for _, lastUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "all down", true: "all down but the last"}[lastUp], func(t *testing.T) {
			var nodes []*corev1.Node
			var pods []*corev1.Pod
			verdicts := map[string]Judgement{}
			for i := range n {
				name := fmt.Sprintf("n%02d", i)
				nodes = append(nodes, node(name, fmt.Sprintf("int:10.0.0.%d", i+1)))
				pods = append(pods, pod(name, "ready"))
				verdicts[name] = pending
			}
			s := svc()
			var sizes []int
			round := func() {
				t.Helper()
				published := map[string]bool{}
				for _, nd := range strings.Split(s.Annotations[contract.AnnotationNodes], ",") {
					published[nd] = true
				}
				health := map[string]Health{}
				for name, j := range verdicts {
					health[name] = NodeHealth(NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: j}, Published: published[name]}, "")
				}
				r := Decide(Input{Service: s, Nodes: nodeMap(nodes...), Pods: pods, Health: health, AllDown: contract.AllDownPublishAll, Servable: true, EligibleNodes: n, Now: now})
				s = withResult(s, r)
				sizes = append(sizes, len(r.LoadBalancer.Ingress))
			}
			round()
			// Probed in batches of 9, the last batch of 7 (63 + 7).
			for i := 0; i < n; i += 9 {
				for j := i; j < min(i+9, n); j++ {
					name := fmt.Sprintf("n%02d", j)
					verdicts[name] = down
					if lastUp && j == n-1 {
						verdicts[name] = up
					}
				}
				round()
			}
			want := slices.Repeat([]int{n}, len(sizes))
			if lastUp {
				want[len(want)-1] = 1
			}
			if !slices.Equal(sizes, want) {
				t.Errorf("published node counts round by round = %v, want %v", sizes, want)
			}
		})
	}
}

func TestHealthy(t *testing.T) {
	up, down := Health{}, Health{Down: true}
	kept, unprobed := Health{Pending: true}, Health{Down: true, Pending: true}
	tests := []struct {
		name        string
		health      map[string]Health
		failingOpen bool
		want        []string
	}{
		{"up and down", map[string]Health{"a": up, "b": down, "c": up}, false, []string{"a", "c"}},
		{"missing means healthy", map[string]Health{"b": down, "c": down}, false, []string{"a"}},
		{"kept pending next to one up", map[string]Health{"a": kept, "b": up, "c": down}, false, []string{"a", "b"}},
		{"kept pending next to one up, failing open", map[string]Health{"a": kept, "b": up, "c": down}, true, []string{"a", "b"}},
		{"kept pending, published as healthy", map[string]Health{"a": kept, "b": down, "c": unprobed}, false, []string{"a"}},
		{"kept pending, published by fail-open", map[string]Health{"a": kept, "b": down, "c": unprobed}, true, nil},
		{"all down", map[string]Health{"a": down, "b": down, "c": down}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Healthy([]string{"a", "b", "c"}, tt.health, tt.failingOpen); !slices.Equal(got, tt.want) {
				t.Errorf("Healthy = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestFirstAddressStaysFirst checks that a published address keeps its
// place when one that sorts before it joins, and that the order of
// families comes first: Kubernetes' LoadBalancer specs, and many scripts,
// read ingress[0] as the Service's address.
func TestFirstAddressStaysFirst(t *testing.T) {
	nodes := nodeMap(node("a", "int:10.0.0.1", "int:fd00::1"), node("b", "int:10.0.0.2", "int:fd00::2"), node("c", "int:10.0.0.3", "int:fd00::3"))
	in := Input{Service: svc(corev1.IPv4Protocol, corev1.IPv6Protocol), Nodes: nodes, AllDown: contract.AllDownPublishAll,
		Pods: []*corev1.Pod{pod("b", "ready"), pod("a", "running"), pod("c", "running")}, Servable: true, EligibleNodes: 3, Now: now}
	first := Decide(in)
	if got := ingressIPs(first); !slices.Equal(got, []string{"10.0.0.2", "fd00::2"}) {
		t.Fatalf("first ingress %v, want b's addresses", got)
	}
	in.Service = withResult(in.Service, first)
	in.Pods = []*corev1.Pod{pod("b", "ready"), pod("a", "ready"), pod("c", "running")}
	second := Decide(in)
	if got := ingressIPs(second); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.1", "fd00::2", "fd00::1"}) {
		t.Errorf("with a joining: %v, want b's addresses first in each family", got)
	}
	in.Service = withResult(in.Service, second)
	in.Pods = []*corev1.Pod{pod("b", "ready"), pod("a", "ready"), pod("c", "ready")}
	third := Decide(in)
	if got := ingressIPs(third); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.1", "10.0.0.3", "fd00::2", "fd00::1", "fd00::3"}) {
		t.Errorf("with c joining: %v, want it last in each family", got)
	}
	// b fails: the next in place comes first; when b is back it follows.
	in.Service = withResult(in.Service, third)
	in.Health = map[string]Health{"b": {Down: true}}
	fourth := Decide(in)
	if got := ingressIPs(fourth); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.3", "fd00::1", "fd00::3"}) {
		t.Errorf("without b: %v", got)
	}
	in.Service, in.Health = withResult(in.Service, fourth), nil
	if got := ingressIPs(Decide(in)); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.3", "10.0.0.2", "fd00::1", "fd00::3", "fd00::2"}) {
		t.Errorf("b back: %v, want it last", got)
	}
	// A Service that was never published is sorted by address.
	in.Service = svc(corev1.IPv6Protocol, corev1.IPv4Protocol)
	if got := ingressIPs(Decide(in)); !slices.Equal(got, []string{"fd00::1", "fd00::2", "fd00::3", "10.0.0.1", "10.0.0.2", "10.0.0.3"}) {
		t.Errorf("new Service: %v, want IPv6 first, each family sorted", got)
	}
}

// TestFailOpenSkipsUnhealthyNodes: failing open, a Service is not
// published on a node labelled unhealthy (its proxy force-deleted and
// draining there) while another node runs a proxy, however far down the
// fallbacks; with every candidate unhealthy it still fails open onto them.
func TestFailOpenSkipsUnhealthyNodes(t *testing.T) {
	cut := node("n2", "int:198.18.1.2")
	cut.Labels = map[string]string{contract.LabelUnhealthy: "true"}
	nodes := nodeMap(node("n1", "int:198.18.1.1"), cut, node("n3", "int:198.18.1.3"))
	down := Health{Down: true}
	published := svc()
	published.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.1.1"}, {IP: "198.18.1.2"}, {IP: "198.18.1.3"}}
	in := Input{Service: published, Nodes: nodes, AllDown: contract.AllDownPublishAll, Servable: true, EligibleNodes: 3, Now: now,
		// n1 and n3: proxies running, not ready (their nodes' pods marked
		// not ready); n2: its proxy force-deleted, draining.
		Pods:   []*corev1.Pod{pod("n1", "running"), pod("n2", "terminating"), pod("n3", "running")},
		Health: map[string]Health{"n1": down, "n2": down, "n3": down}}
	if got := ingressIPs(Decide(in)); !slices.Equal(got, []string{"198.18.1.1", "198.18.1.3"}) {
		t.Errorf("ingress %v, want the two nodes not labelled unhealthy", got)
	}
	// Every candidate unhealthy: still failing open onto them.
	in.Pods = []*corev1.Pod{pod("n2", "terminating")}
	if got := ingressIPs(Decide(in)); !slices.Equal(got, []string{"198.18.1.2"}) {
		t.Errorf("ingress %v, want n2: failing open onto what there is", got)
	}
}
