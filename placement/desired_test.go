package placement

import (
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
)

func TestName(t *testing.T) {
	dns1123 := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	long := strings.Repeat("a", 63)
	tests := []struct {
		ns, name string
		want     string // "" to check shape only
	}{
		{"shop", "web", "pulselb-web-"},
		{"other", "web", "pulselb-web-"},
		{"shop", long, "pulselb-" + strings.Repeat("a", 44) + "-"},
		{"shop", long[:62] + "b", "pulselb-" + strings.Repeat("a", 44) + "-"},
		{"shop", strings.Repeat("a", 43) + "-b", "pulselb-" + strings.Repeat("a", 43) + "-"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := Name(tt.ns, tt.name)
		if len(got) > 63 || !dns1123.MatchString(got) {
			t.Errorf("Name(%q, %q) = %q: not a DNS-1123 label of at most 63 characters", tt.ns, tt.name, got)
		}
		if !strings.HasPrefix(got, tt.want) {
			t.Errorf("Name(%q, %q) = %q, want prefix %q", tt.ns, tt.name, got, tt.want)
		}
		if again := Name(tt.ns, tt.name); again != got {
			t.Errorf("Name(%q, %q) is not stable: %q then %q", tt.ns, tt.name, got, again)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("Name(%q, %q) = %q collides with %s", tt.ns, tt.name, got, prev)
		}
		seen[got] = tt.ns + "/" + tt.name
	}
}

const goldenHash = "97375646b1"

func TestNameGolden(t *testing.T) {
	// sha256("shop/web") starts with these hex digits; a change would
	// orphan every workload in existing clusters.
	if got := Name("shop", "web"); got != "pulselb-web-"+goldenHash {
		t.Errorf("Name(shop, web) = %q, want %q", got, "pulselb-web-"+goldenHash)
	}
}

func TestDesired(t *testing.T) {
	three := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	tests := []struct {
		name     string
		svc      *corev1.Service
		nodes    []*corev1.Node
		mode     contract.Mode
		replicas int32
		eligible []string
		problems []string // keys
		check    func(t *testing.T, w Workload)
	}{
		{
			name: "defaults", svc: service(), nodes: three,
			mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
		},
		{
			name: "replicas capped by eligible nodes", svc: service(annotate(contract.AnnotationReplicas, "5")), nodes: three,
			mode: contract.ModeDeployment, replicas: 3, eligible: []string{"n1", "n2", "n3"},
		},
		{
			name: "exclusion labels, not ready, cordoned, unhealthy and untolerated taints are not eligible",
			svc:  service(annotate(contract.AnnotationReplicas, "5")),
			nodes: []*corev1.Node{
				node("ok"),
				node("cp", taint("node-role.kubernetes.io/control-plane", corev1.TaintEffectNoSchedule)),
				node("excluded", label(contract.LabelExcludeFromLB, "")),
				node("excluded2", label(contract.LabelExclude, "true")),
				node("unhealthy", label(contract.LabelUnhealthy, "true")),
				node("maintenance", label(contract.LabelMaintenance, "true")),
				node("down", notReady),
				node("cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
				node("gpu", taint("gpu", corev1.TaintEffectNoSchedule)),
				node("soft", taint("gpu", corev1.TaintEffectPreferNoSchedule)),
			},
			// The cordoned node and the one in maintenance count toward
			// the cap, not as eligible.
			mode: contract.ModeDeployment, replicas: 5, eligible: []string{"cp", "ok", "soft"},
		},
		{
			name: "node selector", svc: service(annotate(contract.AnnotationNodeSelector, "role in (edge),zone!=b")),
			nodes: []*corev1.Node{
				node("e1", label("role", "edge"), label("zone", "a")),
				node("e2", label("role", "edge"), label("zone", "b")),
				node("w1", label("role", "worker")),
			},
			mode: contract.ModeDeployment, replicas: 1, eligible: []string{"e1"},
			check: func(t *testing.T, w Workload) {
				reqs := w.Deployment.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
				want := []corev1.NodeSelectorRequirement{
					{Key: contract.LabelExcludeFromLB, Operator: corev1.NodeSelectorOpDoesNotExist},
					{Key: contract.LabelExclude, Operator: corev1.NodeSelectorOpDoesNotExist},
					{Key: contract.LabelUnhealthy, Operator: corev1.NodeSelectorOpDoesNotExist},
					{Key: contract.LabelMaintenance, Operator: corev1.NodeSelectorOpDoesNotExist},
					{Key: "role", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge"}},
					{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"b"}},
				}
				if !equalReqs(reqs, want) {
					t.Errorf("required affinity = %+v, want %+v", reqs, want)
				}
			},
		},
		{
			name: "no eligible node keeps one pending replica", svc: service(), nodes: []*corev1.Node{node("n1", notReady)},
			mode: contract.ModeDeployment, replicas: 1,
		},
		{
			name: "daemonset", svc: service(annotate(contract.AnnotationProxyMode, "daemonset")), nodes: three,
			mode: contract.ModeDaemonSet, replicas: 3, eligible: []string{"n1", "n2", "n3"},
			check: func(t *testing.T, w Workload) {
				if w.Deployment != nil || w.DaemonSet == nil {
					t.Fatalf("want only a DaemonSet")
				}
				if w.DaemonSet.Spec.Template.Spec.TopologySpreadConstraints != nil {
					t.Errorf("a DaemonSet needs no zone spread")
				}
			},
		},
		{
			name:  "invalid annotations fall back to defaults",
			svc:   service(annotate(contract.AnnotationProxyMode, "statefulset", contract.AnnotationReplicas, "two", contract.AnnotationNodeSelector, "role in (", contract.AnnotationAddressType, "public")),
			nodes: three, mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
			problems: []string{contract.AnnotationAddressType, contract.AnnotationNodeSelector, contract.AnnotationProxyMode, contract.AnnotationReplicas},
		},
		{
			name: "SCTP port is skipped",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: 9, Protocol: corev1.ProtocolSCTP})
			}),
			nodes: three, mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
			problems: []string{"spec.ports"},
			check: func(t *testing.T, w Workload) {
				if got := containerArg(w, "--ports="); got != "--ports=TCP:80,UDP:53" {
					t.Errorf("ports flag = %q", got)
				}
			},
		},
		{
			name:  "headless Service gets no workload",
			svc:   service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
			nodes: three, mode: contract.ModeDeployment, eligible: []string{"n1", "n2", "n3"},
			problems: []string{"spec.clusterIP"},
			check: func(t *testing.T, w Workload) {
				if !w.Empty() {
					t.Errorf("want no workload")
				}
			},
		},
		{
			name: "dual-stack Service: both ClusterIPs and IPv6 forwarding",
			svc: service(func(s *corev1.Service) {
				s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
				s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/32"}
			}),
			nodes: three, mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
			check: func(t *testing.T, w Workload) {
				if got := containerArg(w, "--cluster-ips="); got != "--cluster-ips=10.96.0.10,fd00::10" {
					t.Errorf("cluster-ips flag = %q", got)
				}
				if got := w.Deployment.Annotations[contract.AnnotationSourceRanges]; got != "192.0.2.0/24,2001:db8::/32" {
					t.Errorf("source-ranges annotation = %q", got)
				}
				if args := w.Deployment.Spec.Template.Spec.InitContainers[0].Args; !slices.Contains(args, "--ipv6") {
					t.Errorf("proxy-init args = %q, want --ipv6", args)
				}
			},
		},
		{
			name:  "externalTrafficPolicy Local targets NodePorts next to the backends",
			svc:   service(func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
			nodes: three, mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
			check: func(t *testing.T, w Workload) {
				if !w.NodePortTarget {
					t.Errorf("NodePortTarget = false")
				}
				spec := w.Deployment.Spec.Template.Spec
				env := map[string]corev1.EnvVar{}
				for _, e := range spec.Containers[0].Env {
					env[e.Name] = e
				}
				if got := env[EnvNodePortTarget].Value; got != "TCP:80=30080,UDP:53=30053" {
					t.Errorf("%s = %q", EnvNodePortTarget, got)
				}
				if f := env[EnvNodeIPs].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "status.hostIPs" {
					t.Errorf("%s = %+v, want the downward API's status.hostIPs", EnvNodeIPs, env[EnvNodeIPs])
				}
				// Preferred, not required: before any backend exists the
				// proxies must run somewhere, or nothing is published.
				pa := spec.Affinity.PodAffinity
				if pa == nil || len(pa.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || len(pa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
					pa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels["app"] != "web" ||
					pa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.Namespaces[0] != "shop" {
					t.Errorf("pod affinity = %+v, want a preference for the backends' selector in shop", pa)
				}
			},
		},
		{
			name: "externalTrafficPolicy Local without NodePorts falls back to the ClusterIP",
			svc: service(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Ports[1].NodePort = 0
			}),
			nodes: three, mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
			problems: []string{"spec.allocateLoadBalancerNodePorts"},
			check: func(t *testing.T, w Workload) {
				if w.NodePortTarget || w.Deployment.Spec.Template.Spec.Affinity.PodAffinity != nil {
					t.Errorf("want ClusterIP forwarding without pod affinity")
				}
			},
		},
		{
			name: "health port moves off a Service port",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Port: 9470, Protocol: corev1.ProtocolTCP}, {Port: 9471, Protocol: corev1.ProtocolTCP}}
			}),
			nodes: three, mode: contract.ModeDeployment, replicas: 2, eligible: []string{"n1", "n2", "n3"},
			check: func(t *testing.T, w Workload) {
				c := w.Deployment.Spec.Template.Spec.Containers[0]
				if got := c.ReadinessProbe.HTTPGet.Port.IntValue(); got != 9472 {
					t.Errorf("readiness probe port = %d, want 9472", got)
				}
				if c.Env[0].Name != EnvHealthAddress || c.Env[0].Value != ":9472" {
					t.Errorf("health address env = %+v", c.Env[0])
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, problems := Desired(tt.svc, tt.nodes, testCfg)
			var keys []string
			for _, p := range problems {
				keys = append(keys, p.Key)
				if !strings.Contains(p.String(), p.Key) || p.Reason == "" || p.Default == "" {
					t.Errorf("problem %q does not name key, reason and default", p.String())
				}
			}
			if !slices.Equal(keys, tt.problems) {
				t.Errorf("problems = %q, want keys %q", problems, tt.problems)
			}
			if w.Mode != tt.mode || w.Replicas != tt.replicas || !slices.Equal(w.EligibleNodes, tt.eligible) {
				t.Errorf("mode %s, replicas %d, eligible %q; want %s, %d, %q", w.Mode, w.Replicas, w.EligibleNodes, tt.mode, tt.replicas, tt.eligible)
			}
			if !w.Empty() {
				checkInvariants(t, tt.svc, w)
			}
			if tt.check != nil {
				tt.check(t, w)
			}
		})
	}
}

// checkInvariants asserts what every proxy workload must have.
func checkInvariants(t *testing.T, svc *corev1.Service, w Workload) {
	t.Helper()
	var meta metav1.ObjectMeta
	var spec corev1.PodTemplateSpec
	var sel *metav1.LabelSelector
	if w.DaemonSet != nil {
		meta, spec, sel = w.DaemonSet.ObjectMeta, w.DaemonSet.Spec.Template, w.DaemonSet.Spec.Selector
	} else {
		meta, spec, sel = w.Deployment.ObjectMeta, w.Deployment.Spec.Template, w.Deployment.Spec.Selector
	}
	if meta.Name != Name(svc.Namespace, svc.Name) || meta.Namespace != "pulselb-system" {
		t.Errorf("workload %s/%s", meta.Namespace, meta.Name)
	}
	if k, ok := contract.ServiceOf(meta.Labels); !ok || k.Namespace != svc.Namespace || k.Name != svc.Name {
		t.Errorf("workload labels %v do not point back to the Service", meta.Labels)
	}
	if k, ok := contract.ServiceOf(spec.Labels); !ok || k.Name != svc.Name {
		t.Errorf("pod labels %v do not point back to the Service", spec.Labels)
	}
	for k, v := range sel.MatchLabels {
		if spec.Labels[k] != v {
			t.Errorf("selector %v does not match pod labels %v", sel.MatchLabels, spec.Labels)
		}
	}
	if meta.Annotations[contract.AnnotationSpecHash] == "" {
		t.Errorf("no spec hash annotation")
	}
	ps := spec.Spec
	if ps.ServiceAccountName != DefaultProxyServiceAccount || ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v: want %s's token, which reads only proxy workloads", ps.ServiceAccountName, ps.AutomountServiceAccountToken, DefaultProxyServiceAccount)
	}
	if ps.PriorityClassName != DefaultPriorityClassName {
		t.Errorf("priority class %q", ps.PriorityClassName)
	}
	if len(ps.InitContainers) != 1 || ps.InitContainers[0].Args[0] != "proxy-init" ||
		ps.InitContainers[0].SecurityContext == nil || !*ps.InitContainers[0].SecurityContext.Privileged {
		t.Errorf("want one privileged proxy-init container, got %+v", ps.InitContainers)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.Args[0] != "proxy" {
		t.Errorf("proxy args %q", c.Args)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) {
		t.Errorf("proxy security context %+v: want NET_ADMIN only, not privileged", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("proxy resources %+v: want small requests and a memory limit", c.Resources)
	}
	var want []corev1.ContainerPort
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolTCP || p.Protocol == corev1.ProtocolUDP {
			want = append(want, corev1.ContainerPort{ContainerPort: p.Port, HostPort: p.Port, Protocol: p.Protocol})
		}
	}
	if !slices.Equal(c.Ports, want) {
		t.Errorf("container ports %+v, want every Service port as a hostPort %+v", c.Ports, want)
	}
	tolerated := map[string]bool{}
	for _, tol := range ps.Tolerations {
		tolerated[tol.Key] = true
	}
	if !tolerated["node-role.kubernetes.io/control-plane"] {
		t.Errorf("control-plane taint not tolerated: %+v", ps.Tolerations)
	}
	pref := ps.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 1 || pref[0].Preference.MatchExpressions[0].Key != contract.LabelExternalIP {
		t.Errorf("preferred affinity %+v, want %s", pref, contract.LabelExternalIP)
	}
	if w.Deployment != nil {
		tsc := ps.TopologySpreadConstraints
		if len(tsc) != 1 || tsc[0].TopologyKey != corev1.LabelTopologyZone {
			t.Errorf("topology spread %+v, want zone", tsc)
		}
	}
}

func containerArg(w Workload, prefix string) string {
	for _, a := range w.Deployment.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, prefix) {
			return a
		}
	}
	return ""
}

func equalReqs(a, b []corev1.NodeSelectorRequirement) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.NodeSelectorRequirement) bool {
		return x.Key == y.Key && x.Operator == y.Operator && slices.Equal(x.Values, y.Values)
	})
}

func TestDesiredStable(t *testing.T) {
	nodes := []*corev1.Node{node("n1"), node("n2")}
	a, _ := Desired(service(), nodes, testCfg)
	b, _ := Desired(service(), []*corev1.Node{node("n2"), node("n1")}, testCfg)
	if a.Deployment.Annotations[contract.AnnotationSpecHash] != b.Deployment.Annotations[contract.AnnotationSpecHash] {
		t.Errorf("the spec hash depends on node order")
	}
	// Health labels change eligibility (replicas) but never the pod
	// template, so failing nodes never start a rollout.
	c, _ := Desired(service(annotate(contract.AnnotationReplicas, "1")), []*corev1.Node{node("n1", label(contract.LabelUnhealthy, "true")), node("n2")}, testCfg)
	d, _ := Desired(service(annotate(contract.AnnotationReplicas, "1")), nodes, testCfg)
	if c.Deployment.Spec.Template.String() != d.Deployment.Spec.Template.String() {
		t.Errorf("pod template changes with node health")
	}
	// A port change must change the hash so the controller updates.
	e, _ := Desired(service(func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 }), nodes, testCfg)
	if e.Deployment.Annotations[contract.AnnotationSpecHash] == a.Deployment.Annotations[contract.AnnotationSpecHash] {
		t.Errorf("the spec hash ignores a port change")
	}
}

// TestProxyContainersRunAsRoot checks that both proxy containers ask for
// root explicitly: the image's default user is not root, and without root
// proxy-init cannot write /proc/sys and the proxy holds no NET_ADMIN.
func TestProxyContainersRunAsRoot(t *testing.T) {
	w, _ := Desired(service(), []*corev1.Node{node("n1")}, testCfg)
	spec := w.Deployment.Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("container %s does not run as root: %+v", c.Name, sc)
		}
		if c.Name == ContainerProxy && (sc.Privileged == nil || *sc.Privileged) {
			t.Errorf("the proxy container is privileged")
		}
	}
}

// TestDesiredPlannedChanges: what lets a planned change lose nothing is in
// the workload: the proxy's drain delay and timeout, a grace period that
// covers both, a rollout in place that takes a Service's only proxy down
// first only when it has nowhere to surge to, and a budget.
func TestDesiredPlannedChanges(t *testing.T) {
	env := func(w Workload, name string) string {
		for _, e := range w.Deployment.Spec.Template.Spec.Containers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	three := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	tests := []struct {
		name           string
		svc            *corev1.Service
		nodes          []*corev1.Node
		cfg            Config
		delay, timeout string
		grace          int64
		maxUnavailable int32
	}{
		{"defaults: the TTL plus the margin", service(), three, Config{}, "15s", "10s", 30, 1},
		{"the controller's TTL", service(), three, Config{DNSTTL: 30}, "40s", "10s", 55, 1},
		{"the Service's TTL", service(annotate(contract.AnnotationDNSTTL, "60")), three, Config{DNSTTL: 30}, "1m10s", "10s", 85, 1},
		{"the annotation", service(annotate(contract.AnnotationDrainDelay, "2m")), three, Config{DrainTimeout: 30 * time.Second}, "2m0s", "30s", 155, 1},
		{"no delay", service(annotate(contract.AnnotationDrainDelay, "0s")), three, Config{}, "0s", "10s", 15, 1},
		{"a fraction of a second rounds up", service(annotate(contract.AnnotationDrainDelay, "1500ms")), three, Config{}, "1.5s", "10s", 17, 1},
		{"every eligible node runs a proxy", service(annotate(contract.AnnotationReplicas, "3")), three, Config{}, "15s", "10s", 30, 1},
		{"one node", service(annotate(contract.AnnotationReplicas, "1")), three[:1], Config{}, "15s", "10s", 30, 1},
		{"one replica, nodes to surge to", service(annotate(contract.AnnotationReplicas, "1")), three, Config{}, "15s", "10s", 30, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := Desired(tt.svc, tt.nodes, tt.cfg)
			if got := env(w, EnvDrainDelay); got != tt.delay {
				t.Errorf("%s = %q, want %q", EnvDrainDelay, got, tt.delay)
			}
			if got := env(w, EnvDrainTimeout); got != tt.timeout {
				t.Errorf("%s = %q, want %q", EnvDrainTimeout, got, tt.timeout)
			}
			if got := *w.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; got != tt.grace {
				t.Errorf("terminationGracePeriodSeconds = %d, want %d", got, tt.grace)
			}
			if got := w.Deployment.Spec.Strategy.RollingUpdate.MaxUnavailable.IntVal; got != tt.maxUnavailable {
				t.Errorf("maxUnavailable = %d, want %d", got, tt.maxUnavailable)
			}
			b := w.Budget
			if b == nil || b.Name != w.Name || b.Namespace != w.Namespace || b.Spec.MaxUnavailable.IntVal != 1 ||
				!maps.Equal(b.Spec.Selector.MatchLabels, w.Deployment.Spec.Selector.MatchLabels) || b.Annotations[contract.AnnotationSpecHash] == "" {
				t.Errorf("budget %+v, want maxUnavailable 1 over the Deployment's pods", b)
			}
		})
	}
	if w, _ := Desired(service(annotate(contract.AnnotationProxyMode, "daemonset")), three, Config{}); w.Budget != nil {
		t.Errorf("daemonset mode has budget %v; a drain leaves daemon pods alone", w.Budget.Name)
	}
}

// TestAllowListOnWorkload: source ranges and the probers' addresses go on
// the workload, never into the pod template, so that a change of either
// updates the workload (its spec hash) without rolling the proxies out, and
// every proxy is told where its workload is.
func TestAllowListOnWorkload(t *testing.T) {
	nodes := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	probers := []netip.Addr{netip.MustParseAddr("198.18.129.5"), netip.MustParseAddr("198.18.1.2")}
	cfg := Config{Namespace: "pulselb-system", Image: "pulselb:test", ProbeSources: probers}
	desired := func(cfg Config, mut func(*corev1.Service)) Workload {
		t.Helper()
		var opts []svcOpt
		if mut != nil {
			opts = append(opts, mut)
		}
		w, problems := Desired(service(opts...), nodes, cfg)
		if len(problems) > 0 {
			t.Fatalf("problems: %v", problems)
		}
		return w
	}
	open := desired(cfg, nil)
	if a := open.Deployment.Annotations; a[contract.AnnotationSourceRanges] != "" || a[contract.AnnotationProbeSources] != "" {
		t.Errorf("a Service without ranges has allow-list annotations %v", a)
	}
	if got := containerArg(open, "--source-ranges"); got != "" {
		t.Errorf("pod template carries %q", got)
	}
	env := map[string]string{}
	for _, e := range open.Deployment.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[EnvAllowListFrom] != "deployment/"+open.Name {
		t.Errorf("%s = %q, want deployment/%s", EnvAllowListFrom, env[EnvAllowListFrom], open.Name)
	}

	ranged := desired(cfg, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.18.3.1/24"} })
	a := ranged.Deployment.Annotations
	if a[contract.AnnotationSourceRanges] != "198.18.3.0/24" || a[contract.AnnotationProbeSources] != "198.18.129.5,198.18.1.2" ||
		a[contract.AnnotationAllowListHash] != contract.AllowListHash([]netip.Prefix{netip.MustParsePrefix("198.18.3.0/24")}, probers) {
		t.Errorf("allow-list annotations %v", a)
	}
	changed := desired(cfg, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.18.4.0/24"} })
	moreProbers := cfg
	moreProbers.ProbeSources = append(slices.Clone(probers), netip.MustParseAddr("198.18.130.9"))
	prober := desired(moreProbers, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.18.3.1/24"} })
	for name, w := range map[string]Workload{"ranges added": ranged, "ranges changed": changed, "a prober added": prober} {
		base := open
		if name != "ranges added" {
			base = ranged
		}
		if w.Deployment.Annotations[contract.AnnotationSpecHash] == base.Deployment.Annotations[contract.AnnotationSpecHash] {
			t.Errorf("%s: spec hash unchanged, the controller would not write the new list", name)
		}
		if w.Deployment.Annotations[contract.AnnotationTemplateHash] != base.Deployment.Annotations[contract.AnnotationTemplateHash] {
			t.Errorf("%s: pod template changed, the proxies would roll out", name)
		}
	}
	// Probers do not matter while every client is allowed.
	if got := desired(moreProbers, nil); got.Deployment.Annotations[contract.AnnotationSpecHash] != open.Deployment.Annotations[contract.AnnotationSpecHash] {
		t.Errorf("a new prober changed a Service without ranges")
	}
	// The beta annotation counts when the field is empty, as in kube-proxy.
	beta := desired(cfg, func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationBetaSourceRanges: "198.18.5.0/24, 198.18.6.0/24"}
	})
	if got := beta.Deployment.Annotations[contract.AnnotationSourceRanges]; got != "198.18.5.0/24,198.18.6.0/24" {
		t.Errorf("beta annotation gave %q", got)
	}
	ds := desired(cfg, func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationProxyMode: "daemonset"}
		s.Spec.LoadBalancerSourceRanges = []string{"198.18.3.0/24"}
	})
	if ds.DaemonSet == nil || ds.DaemonSet.Annotations[contract.AnnotationSourceRanges] != "198.18.3.0/24" {
		t.Fatalf("daemonset without the allow-list")
	}
	for _, e := range ds.DaemonSet.Spec.Template.Spec.Containers[0].Env {
		if e.Name == EnvAllowListFrom && e.Value != "daemonset/"+ds.Name {
			t.Errorf("%s = %q", EnvAllowListFrom, e.Value)
		}
	}
}

// TestDesiredSCTP: an SCTP port is reported, with a Problem that says it is
// neither forwarded nor probed, and left out of the proxy; a probe
// annotation for it is reported too, rather than as a protocol mismatch. A
// Service with SCTP ports only gets no proxies, and its problems say why.
func TestDesiredSCTP(t *testing.T) {
	three := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	sctp := corev1.ServicePort{Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP}
	tests := []struct {
		name     string
		svc      *corev1.Service
		ports    string // the proxy's --ports; "" for no workload
		problems []string
	}{
		{
			name: "TCP and SCTP",
			svc: service(annotate(contract.AnnotationProbePrefix+"sig", "tcp"), func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, sctp}
			}),
			ports: "--ports=TCP:80",
			problems: []string{
				`pulselb.io/probe.sig="tcp": pulselb forwards TCP and UDP only, so this SCTP port is neither forwarded nor probed; using nothing (ignored)`,
				`spec.ports="SCTP:2905": pulselb forwards TCP and UDP only, so this SCTP port is neither forwarded nor probed; using the other ports only (this one is not probed, judged or published)`,
			},
		},
		{
			name: "SCTP only",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{sctp}
			}),
			problems: []string{
				`spec.ports="SCTP:2905": pulselb forwards TCP and UDP only, so this SCTP port is neither forwarded nor probed; using the other ports only (this one is not probed, judged or published)`,
				`spec.ports="": no TCP or UDP port; using no proxies`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, problems := Desired(tt.svc, three, testCfg)
			var got []string
			for _, p := range problems {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.problems) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.problems, "\n"))
			}
			if tt.ports == "" {
				if !w.Empty() {
					t.Fatalf("want no workload")
				}
				return
			}
			if w.Empty() {
				t.Fatalf("no workload")
			}
			if got := containerArg(w, "--ports="); got != tt.ports {
				t.Errorf("ports flag = %q, want %q", got, tt.ports)
			}
			for _, cp := range w.Deployment.Spec.Template.Spec.Containers[0].Ports {
				if cp.Protocol == corev1.ProtocolSCTP {
					t.Errorf("container port %d/%s: want no SCTP hostPort", cp.ContainerPort, cp.Protocol)
				}
			}
			if _, ok := w.Settings.Probe(contract.PortKeyOf(sctp)); ok {
				t.Errorf("settings have a probe for the SCTP port")
			}
		})
	}
}

// TestForwardingSysctls: with Config.ForwardingSysctls the proxy pod sets
// the forwarding sysctls of its Service's families and runs no privileged
// container at all; without it, the privileged proxy-init does the work
// and the pod sets no sysctl.
func TestForwardingSysctls(t *testing.T) {
	single := service()
	dual := service(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"} })
	for _, tc := range []struct {
		name     string
		svc      *corev1.Service
		sysctls  bool
		want     []corev1.Sysctl
		wantInit []string
	}{
		{name: "default: privileged proxy-init", svc: single, wantInit: []string{"proxy-init"}},
		{name: "default, dual-stack: proxy-init --ipv6", svc: dual, wantInit: []string{"proxy-init", "--ipv6"}},
		{name: "sysctls", svc: single, sysctls: true, want: []corev1.Sysctl{{Name: "net.ipv4.ip_forward", Value: "1"}}},
		{name: "sysctls, dual-stack", svc: dual, sysctls: true,
			want: []corev1.Sysctl{{Name: "net.ipv4.ip_forward", Value: "1"}, {Name: "net.ipv6.conf.all.forwarding", Value: "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg
			cfg.ForwardingSysctls = tc.sysctls
			for _, mode := range []contract.Mode{contract.ModeDeployment, contract.ModeDaemonSet} {
				svc := tc.svc.DeepCopy()
				if mode == contract.ModeDaemonSet {
					annotate(contract.AnnotationProxyMode, "daemonset")(svc)
				}
				w, problems := Desired(svc, []*corev1.Node{node("n1")}, cfg)
				if len(problems) > 0 {
					t.Fatalf("problems: %v", problems)
				}
				spec := w.Deployment
				var ps corev1.PodSpec
				if spec != nil {
					ps = spec.Spec.Template.Spec
				} else {
					ps = w.DaemonSet.Spec.Template.Spec
				}
				var got []corev1.Sysctl
				if ps.SecurityContext != nil {
					got = ps.SecurityContext.Sysctls
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s: pod sysctls = %v, want %v", mode, got, tc.want)
				}
				var initArgs []string
				for _, c := range ps.InitContainers {
					initArgs = append(initArgs, c.Args...)
				}
				if !slices.Equal(initArgs, tc.wantInit) {
					t.Errorf("%s: init container args = %q, want %q", mode, initArgs, tc.wantInit)
				}
				for _, c := range append(ps.InitContainers, ps.Containers...) {
					privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
					if privileged != (c.Name == ContainerProxyInit) {
						t.Errorf("%s: container %s privileged = %v", mode, c.Name, privileged)
					}
				}
			}
		})
	}
	a, _ := Desired(single, []*corev1.Node{node("n1")}, testCfg)
	cfg := testCfg
	cfg.ForwardingSysctls = true
	b, _ := Desired(single, []*corev1.Node{node("n1")}, cfg)
	if a.Deployment.Annotations[contract.AnnotationTemplateHash] == b.Deployment.Annotations[contract.AnnotationTemplateHash] {
		t.Errorf("the template hash ignores the change of forwarding mode: running proxies would not roll out")
	}
}
