// Package placement owns the desired proxy workload of a LoadBalancer
// Service: its name, labels, pod template, node affinity, replica count,
// and the problems (invalid annotations, unservable spec fields, port
// conflicts) found on the way. Everything here is a pure function of
// cached objects; the controller package writes the result.
package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

// Config is the controller-wide part of every proxy workload.
type Config struct {
	// Namespace holds the proxy workloads (pulselb-system).
	Namespace string
	// Image is the pulselb image; it runs both proxy and proxy-init.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// PriorityClassName of proxy pods; empty for none.
	PriorityClassName string
	// ProxyMode is the proxy's --mode: auto, iptables or userspace.
	ProxyMode string
	// HealthPort is where the proxy serves /healthz in its pod for the
	// kubelet's probes; moved up when a Service port uses it.
	HealthPort int32
	// DNSTTL is the TTL, in seconds, of a Service's records when it sets
	// none (the controller's --dns-ttl); the default drain delay follows
	// it (default contract.DefaultDNSTTL).
	DNSTTL uint32
	// DrainTimeout is how long a proxy lets open connections finish once
	// its drain delay is over (default DefaultDrainTimeout).
	DrainTimeout time.Duration
	// ServiceAccount runs the proxy pods (default DefaultProxyServiceAccount):
	// it may read the proxy workloads in Namespace, where each proxy finds
	// its allow-list.
	ServiceAccount string
	// ProbeSources are the addresses pulselb's probers probe from (their
	// pods' and nodes' addresses), sorted. A Service with source ranges lets
	// them through: without them its proxies could never be probed.
	ProbeSources []netip.Addr
	// ReadinessGate makes proxy pods Ready only once the controller has
	// set contract.PodConditionProbed, on probers' verdicts; set it when
	// the controller judges health from ProbeReports.
	ReadinessGate bool
	// ForwardingSysctls turns forwarding on through the pod's
	// securityContext.sysctls (ForwardingSysctls) instead of the
	// privileged proxy-init init container. They are unsafe sysctls: the
	// kubelet must allow them (KubeletSysctlFlag), or it refuses the pod
	// (ReasonSysctlForbidden).
	ForwardingSysctls bool
}

// Defaults of Config.
const (
	DefaultPriorityClassName = "system-cluster-critical"
	// DefaultProxyServiceAccount is the proxy pods' ServiceAccount.
	DefaultProxyServiceAccount = "pulselb-proxy"
	DefaultHealthPort          = 9470
	DefaultProxyMode           = "auto"
	DefaultDrainTimeout        = 10 * time.Second
	// terminationMargin is added to a proxy's drain delay and timeout for
	// its pod's terminationGracePeriodSeconds: the proxy's own shutdown
	// after the drain, so that the kubelet never kills it mid-drain.
	terminationMargin = 5 * time.Second

	// ContainerProxy and ContainerProxyInit name the pod's containers.
	ContainerProxy     = "proxy"
	ContainerProxyInit = "proxy-init"
)

// Environment variables of the proxy container that the proxy command reads
// (it maps --flag-name to PULSELB_FLAG_NAME).
const (
	EnvHealthAddress = "PULSELB_HEALTH_ADDRESS"
	// EnvNodePortTarget and EnvNodeIPs carry externalTrafficPolicy Local:
	// forward each port to the node's own IP at the Service's NodePort
	// ("TCP:80=30080,UDP:53=30053") instead of to the ClusterIP. They are
	// environment variables rather than flags so that a proxy that does not
	// know them yet still starts and forwards to the ClusterIP.
	EnvNodePortTarget = "PULSELB_NODE_PORT_TARGET"
	EnvNodeIPs        = "PULSELB_NODE_IPS"
	// EnvDrainDelay and EnvDrainTimeout are the proxy's --drain-delay and
	// --drain-timeout, as environment variables for the same reason.
	EnvDrainDelay   = "PULSELB_DRAIN_DELAY"
	EnvDrainTimeout = "PULSELB_DRAIN_TIMEOUT"
	// EnvAllowListFrom names the proxy's workload ("deployment/NAME"),
	// whose annotations carry the allow-list (contract.AllowListAnnotations),
	// and EnvNamespace its namespace: the proxy follows the list in place.
	EnvAllowListFrom = "PULSELB_ALLOW_LIST_FROM"
	EnvNamespace     = "PULSELB_NAMESPACE"
	// EnvPodName is the proxy's own pod, where it reports the allow-list
	// it applies (contract.PodConditionAllowList).
	EnvPodName = "PULSELB_POD_NAME"
	// EnvProxyProtocol is the proxy's --proxy-protocol: the TCP ports whose
	// relay sends a PROXY protocol header ("TCP:443=v2,TCP:25=v1").
	EnvProxyProtocol = "PULSELB_PROXY_PROTOCOL"
)

// deploymentTolerationSeconds is how long a Deployment proxy stays on a
// node that is not ready or unreachable before it is evicted and replaced;
// the default 300 s would keep a dead node's proxy for five minutes when the
// health pipeline has not already moved it.
const deploymentTolerationSeconds = 30

// Workload is the desired proxy workload of a Service. Exactly one of
// Deployment and DaemonSet is set, or neither when the Service cannot be
// served (its Problems say why) and any existing workload should go.
type Workload struct {
	Name      string
	Namespace string
	Mode      contract.Mode
	// Settings are the Service's parsed annotations.
	Settings   contract.Settings
	Deployment *appsv1.Deployment
	DaemonSet  *appsv1.DaemonSet
	// Budget is the Deployment's PodDisruptionBudget; nil in daemonset
	// mode, whose pods a drain leaves alone.
	Budget *policyv1.PodDisruptionBudget
	// EligibleNodes are the sorted names of nodes that may host proxies.
	EligibleNodes []string
	// Replicas is the number of proxy pods wanted: the capped replica count
	// in deployment mode, the eligible node count in daemonset mode.
	Replicas int32
	// NodePortTarget is set for externalTrafficPolicy Local: proxies
	// forward to the node's NodePorts and only nodes with a ready local
	// endpoint may be published.
	NodePortTarget bool
}

// Empty reports whether no workload is wanted.
func (w Workload) Empty() bool { return w.Deployment == nil && w.DaemonSet == nil }

// Desired returns the proxy workload svc should have given the cluster's
// nodes, and every problem with the Service's settings. It never fails: a
// problem falls back to a default, or to no workload when nothing can be
// served.
func Desired(svc *corev1.Service, nodes []*corev1.Node, cfg Config) (Workload, []contract.Problem) {
	s, problems := contract.Parse(svc)
	pinned, hostname, lbIPProblem := loadBalancerIPNode(svc, nodes)
	if lbIPProblem != nil {
		problems = append(problems, *lbIPProblem)
	}
	if pinned != "" {
		// spec.loadBalancerIP is this node's address: one proxy, there.
		s.NodeSelector = append(s.NodeSelector, corev1.NodeSelectorRequirement{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}})
		s.Replicas = 1
	}
	w := Workload{
		Name:          Name(svc.Namespace, svc.Name),
		Namespace:     cfg.Namespace,
		Mode:          s.Mode,
		Settings:      s,
		EligibleNodes: EligibleNodes(nodes, s),
	}
	if pinned != "" {
		w.EligibleNodes = slices.DeleteFunc(w.EligibleNodes, func(n string) bool { return n != pinned })
	}

	ports, portProblems := proxyPorts(svc)
	problems = append(problems, portProblems...)
	if p := affinityProblem(svc); p != nil {
		problems = append(problems, *p)
	}
	clusterIPs, ipProblem := clusterIPs(svc)
	if ipProblem != nil {
		problems = append(problems, *ipProblem)
	}
	if len(ports) == 0 || len(clusterIPs) == 0 {
		return w, problems
	}

	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var nodePorts []string
	if local {
		for _, p := range ports {
			if p.NodePort == 0 {
				problems = append(problems, contract.Problem{Key: "spec.allocateLoadBalancerNodePorts", Value: "false",
					Reason:  fmt.Sprintf("externalTrafficPolicy Local needs a NodePort, and port %s:%d has none", contract.PortKeyOf(p).Protocol, p.Port),
					Default: "forwarding to the ClusterIP on every eligible node"})
				nodePorts, local = nil, false
				break
			}
			nodePorts = append(nodePorts, fmt.Sprintf("%s:%d=%d", contract.PortKeyOf(p).Protocol, p.Port, p.NodePort))
		}
	}
	if local && len(svc.Spec.Selector) == 0 {
		problems = append(problems, contract.Problem{Key: "spec.selector", Value: "",
			Reason:  "externalTrafficPolicy Local without a selector: proxies cannot follow the endpoints",
			Default: "proxies on any eligible node, published only where a ready endpoint runs"})
	}
	w.NodePortTarget = local
	ranges, rangeProblems := contract.SourceRanges(svc)
	problems = append(problems, rangeProblems...)

	cfg = withDefaults(cfg)
	pod := podTemplate(svc, s, cfg, ports, clusterIPs, nodePorts, w.Name)
	objMeta := metav1.ObjectMeta{
		Name:        w.Name,
		Namespace:   cfg.Namespace,
		Labels:      workloadLabels(svc),
		Annotations: map[string]string{contract.AnnotationService: svc.Namespace + "/" + svc.Name},
	}
	// The allow-list goes on the workload, not its pod template: a change
	// reaches the running proxies, which watch it, without a rollout.
	allow := contract.AllowListAnnotations(ranges, cfg.ProbeSources)
	selector := &metav1.LabelSelector{MatchLabels: contract.ProxySelector(svc)}
	switch s.Mode {
	case contract.ModeDaemonSet:
		w.Replicas = int32(len(w.EligibleNodes))
		ds := &appsv1.DaemonSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
			ObjectMeta: objMeta,
			Spec: appsv1.DaemonSetSpec{
				Selector: selector,
				Template: pod,
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
					Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{
						MaxUnavailable: ptr.To(intstr.FromInt32(1)),
						MaxSurge:       ptr.To(intstr.FromInt32(0)),
					},
				},
				RevisionHistoryLimit: ptr.To[int32](2),
			},
		}
		maps.Copy(ds.Annotations, allow)
		ds.Annotations[contract.AnnotationSpecHash] = specHash(ds.Labels, workloadSpec{ds.Spec, allow})
		ds.Annotations[contract.AnnotationTemplateHash] = specHash(nil, ds.Spec.Template)
		w.DaemonSet = ds
	default:
		// Cordoned nodes and nodes in maintenance count toward the cap: a
		// drain cordons its nodes before it evicts, and a cap that shrank
		// with them would have the ReplicaSet delete a proxy outside the
		// disruption budget, perhaps on a node that stays, while the drain
		// evicts another, leaving the Service none. A replacement that
		// finds no node waits, Pending, until the node is back.
		w.Replicas = min(s.Replicas, int32(hostable(nodes, s)))
		if w.Replicas == 0 {
			// Keep one pod Pending rather than none, so the Service
			// starts serving as soon as a node becomes eligible.
			w.Replicas = 1
		}
		pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     selector,
		}}
		pod.Spec.Tolerations = tolerations(contract.ModeDeployment)
		// The controller chooses each pod's node before the scheduler
		// does: the node of the proxy it replaces (Homes).
		pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: contract.SchedulingGateHome}}
		d := &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: objMeta,
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(w.Replicas),
				Selector: selector,
				Template: pod,
				Strategy: appsv1.DeploymentStrategy{
					Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{
						MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable(w.Replicas, len(w.EligibleNodes)))),
						MaxSurge:       ptr.To(intstr.FromInt32(1)),
					},
				},
				RevisionHistoryLimit: ptr.To[int32](2),
			},
		}
		maps.Copy(d.Annotations, allow)
		d.Annotations[contract.AnnotationSpecHash] = specHash(d.Labels, workloadSpec{d.Spec, allow})
		d.Annotations[contract.AnnotationTemplateHash] = specHash(nil, d.Spec.Template)
		w.Deployment = d
		w.Budget = budget(objMeta, selector)
	}
	return w, problems
}

// workloadSpec is what a workload's spec hash covers: its spec and its
// allow-list annotations, which the controller writes without touching the
// pod template.
type workloadSpec struct {
	Spec  any
	Allow map[string]string `json:",omitempty"`
}

// maxUnavailable is a proxy Deployment's rollout maxUnavailable. A rollout
// replaces each proxy on its own node (Homes), so that the Service keeps
// its addresses. When the new pod's host ports differ from the old one's
// (a port change), it starts next to it, and the old one goes once it is
// Ready. When they are the same (a new image), the new one can start only
// once the old one is gone: with two replicas or more, one old proxy at a
// time goes first (maxUnavailable 1), leaving the status at once and
// forwarding for its drain delay, while the others serve. A Service's only
// proxy is never taken down first (maxUnavailable 0): its successor surges
// onto another eligible node and the address moves, unless it is the only
// eligible node, where there is nowhere to surge to.
func maxUnavailable(replicas int32, eligible int) int32 {
	if replicas < 2 && int(replicas) < eligible {
		return 0
	}
	return 1
}

// budget is the PodDisruptionBudget of a proxy Deployment: at most one of
// its pods evicted at a time, so that draining several nodes at once never
// takes a Service's last ready proxy while its replacement is not ready.
// Its owner reference to the Deployment is set when the Deployment exists
// (PlanWorkload), so that it goes with it.
func budget(objMeta metav1.ObjectMeta, selector *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
	b := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: *objMeta.DeepCopy(),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       selector.DeepCopy(),
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	}
	b.Annotations[contract.AnnotationSpecHash] = specHash(b.Labels, b.Spec)
	return b
}

func withDefaults(cfg Config) Config {
	if cfg.ProxyMode == "" {
		cfg.ProxyMode = DefaultProxyMode
	}
	if cfg.HealthPort == 0 {
		cfg.HealthPort = DefaultHealthPort
	}
	if cfg.ServiceAccount == "" {
		cfg.ServiceAccount = DefaultProxyServiceAccount
	}
	if cfg.ImagePullPolicy == "" {
		cfg.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if cfg.DNSTTL == 0 {
		cfg.DNSTTL = contract.DefaultDNSTTL
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	return cfg
}

func workloadLabels(svc *corev1.Service) map[string]string {
	l := contract.ProxySelector(svc)
	l[contract.LabelManagedBy] = contract.ManagedBy
	return l
}

// specHash identifies a desired workload; equal hashes mean no update.
func specHash(objLabels map[string]string, spec any) string {
	b, err := json.Marshal(struct {
		Labels map[string]string
		Spec   any
	}{objLabels, spec})
	if err != nil {
		// The spec is built from API types, which always marshal.
		panic(fmt.Sprintf("marshalling workload spec: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// proxyProtocolFlag returns the proxy's --proxy-protocol list: the ports of
// ports that send a PROXY protocol header, in their order.
func proxyProtocolFlag(s contract.Settings, ports []corev1.ServicePort) string {
	var items []string
	for _, p := range ports {
		k := contract.PortKeyOf(p)
		if v, ok := s.ProxyProtocol[k]; ok {
			items = append(items, fmt.Sprintf("%s:%d=%s", k.Protocol, k.Port, v))
		}
	}
	return strings.Join(items, ",")
}

// affinityProblem reports sessionAffinity ClientIP, which the proxies
// cannot honour: they connect to the ClusterIP from their own address, so
// kube-proxy's affinity keys on the proxy pod and every client entering
// through one proxy sticks to one backend.
func affinityProblem(svc *corev1.Service) *contract.Problem {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return nil
	}
	return &contract.Problem{Key: "spec.sessionAffinity", Value: string(corev1.ServiceAffinityClientIP),
		Reason: "pulselb's proxies connect to the ClusterIP from their own pod address, so kube-proxy keys the affinity on the proxy, " +
			"not the client: every client entering through one proxy sticks to the same backend",
		Default: "affinity per proxy pod, not per client"}
}

// proxyPorts returns the Service ports the proxy forwards (contract.Served),
// and a Problem for each of the others: placement is where a port pulselb
// does not serve is reported; the probers, the verdicts, the status and
// dnsexport leave it out without a word.
func proxyPorts(svc *corev1.Service) ([]corev1.ServicePort, []contract.Problem) {
	var ports []corev1.ServicePort
	var problems []contract.Problem
	for _, p := range svc.Spec.Ports {
		if reason := contract.UnservedReason(p); reason != "" {
			problems = append(problems, contract.Problem{Key: "spec.ports", Value: fmt.Sprintf("%s:%d", contract.PortKeyOf(p).Protocol, p.Port),
				Reason: reason, Default: "the other ports only (this one is not probed, judged or published)"})
			continue
		}
		ports = append(ports, p)
	}
	if len(svc.Spec.Ports) > 0 && len(ports) == 0 {
		problems = append(problems, contract.Problem{Key: "spec.ports", Reason: "no TCP or UDP port", Default: "no proxies"})
	}
	return ports, problems
}

// clusterIPs returns the Service's ClusterIPs the proxy forwards to.
func clusterIPs(svc *corev1.Service) ([]string, *contract.Problem) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if _, err := netip.ParseAddr(ip); err == nil {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		// A new Service's ClusterIP is allocated on creation, so this
		// is a headless Service or an unfinished object.
		return nil, &contract.Problem{Key: "spec.clusterIP", Value: svc.Spec.ClusterIP,
			Reason: "the proxy forwards to the ClusterIP, and there is none", Default: "no proxies"}
	}
	return out, nil
}

func hasIPv6(ips []string) bool {
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && a.Is6() && !a.Is4In6() {
			return true
		}
	}
	return false
}

func tolerations(mode contract.Mode) []corev1.Toleration {
	t := []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
	}
	if mode == contract.ModeDeployment {
		for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
			t = append(t, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](deploymentTolerationSeconds)})
		}
	}
	return t
}

// healthPort returns the first port from want up that no Service port uses,
// so the kubelet's probes of the proxy are never forwarded to the Service.
func healthPort(ports []corev1.ServicePort, want int32) int32 {
	used := map[int32]bool{}
	for _, p := range ports {
		if contract.PortKeyOf(p).Protocol == corev1.ProtocolTCP {
			used[p.Port] = true
		}
	}
	for used[want] {
		want++
	}
	return want
}

func podTemplate(svc *corev1.Service, s contract.Settings, cfg Config, ports []corev1.ServicePort, clusterIPs, nodePorts []string, workload string) corev1.PodTemplateSpec {
	var portFlags []string
	var containerPorts []corev1.ContainerPort
	for _, p := range ports {
		portFlags = append(portFlags, fmt.Sprintf("%s:%d", contract.PortKeyOf(p).Protocol, p.Port))
		containerPorts = append(containerPorts, corev1.ContainerPort{
			ContainerPort: p.Port, HostPort: p.Port, Protocol: contract.PortKeyOf(p).Protocol,
		})
	}
	args := []string{"proxy",
		"--cluster-ips=" + strings.Join(clusterIPs, ","),
		"--ports=" + strings.Join(portFlags, ","),
		"--mode=" + cfg.ProxyMode,
	}
	kind := "deployment"
	if s.Mode == contract.ModeDaemonSet {
		kind = "daemonset"
	}
	hp := healthPort(ports, cfg.HealthPort)
	delay := s.DrainDelay(cfg.DNSTTL)
	env := []corev1.EnvVar{
		{Name: EnvHealthAddress, Value: ":" + strconv.Itoa(int(hp))},
		{Name: EnvDrainDelay, Value: delay.String()},
		{Name: EnvDrainTimeout, Value: cfg.DrainTimeout.String()},
		{Name: EnvAllowListFrom, Value: kind + "/" + workload},
		{Name: EnvNamespace, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: EnvPodName, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
	}
	if pp := proxyProtocolFlag(s, ports); pp != "" {
		env = append(env, corev1.EnvVar{Name: EnvProxyProtocol, Value: pp})
	}
	if len(nodePorts) > 0 {
		env = append(env,
			corev1.EnvVar{Name: EnvNodePortTarget, Value: strings.Join(nodePorts, ",")},
			corev1.EnvVar{Name: EnvNodeIPs, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIPs"}}},
		)
	}
	healthProbe := func(failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(hp), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: failures, SuccessThreshold: 1,
		}
	}

	required := []corev1.NodeSelectorRequirement{
		{Key: contract.LabelExcludeFromLB, Operator: corev1.NodeSelectorOpDoesNotExist},
		{Key: contract.LabelExclude, Operator: corev1.NodeSelectorOpDoesNotExist},
		{Key: contract.LabelUnhealthy, Operator: corev1.NodeSelectorOpDoesNotExist},
		{Key: contract.LabelMaintenance, Operator: corev1.NodeSelectorOpDoesNotExist},
	}
	required = append(required, s.NodeSelector...)
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: required}},
		},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: contract.LabelExternalIP, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}},
			}},
		}},
	}}
	if len(nodePorts) > 0 && len(svc.Spec.Selector) > 0 {
		// externalTrafficPolicy Local: a proxy is only useful next to a
		// backend. The controller pins a Deployment's proxies to nodes
		// with an endpoint while there are some (Homes); before there are
		// any, the proxies run where they can, so that the Service has an
		// address at once, and the preference puts them next to a backend
		// pod that exists but has no endpoint yet. Readiness is checked
		// when publishing.
		affinity.PodAffinity = &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: svc.Spec.Selector},
					Namespaces:    []string{svc.Namespace},
					TopologyKey:   corev1.LabelHostname,
				},
			}},
		}
	}

	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      workloadLabels(svc),
			Annotations: map[string]string{contract.AnnotationService: svc.Namespace + "/" + svc.Name},
		},
		Spec: corev1.PodSpec{
			// The token lets the proxy read its workload's allow-list, and
			// nothing else (the ServiceAccount's Role).
			ServiceAccountName:            cfg.ServiceAccount,
			AutomountServiceAccountToken:  ptr.To(true),
			EnableServiceLinks:            ptr.To(false),
			PriorityClassName:             cfg.PriorityClassName,
			TerminationGracePeriodSeconds: ptr.To(int64((delay + cfg.DrainTimeout + terminationMargin + time.Second - 1) / time.Second)),
			Affinity:                      affinity,
			Tolerations:                   tolerations(contract.ModeDaemonSet),
			ReadinessGates:                readinessGates(cfg),
			SecurityContext:               podSecurity(cfg, clusterIPs),
			InitContainers:                initContainers(cfg, clusterIPs),
			Containers: []corev1.Container{{
				Name:            ContainerProxy,
				Image:           cfg.Image,
				ImagePullPolicy: cfg.ImagePullPolicy,
				Args:            args,
				Env:             env,
				Ports:           containerPorts,
				ReadinessProbe:  healthProbe(1),
				LivenessProbe:   healthProbe(5),
				// Root inside the pod's own network namespace, not privileged:
				// a non-root user would not hold the added NET_ADMIN (nor the
				// default NET_BIND_SERVICE for ports below 1024 in userspace
				// mode), because Kubernetes sets no ambient capabilities.
				SecurityContext: &corev1.SecurityContext{
					Privileged:               ptr.To(false),
					AllowPrivilegeEscalation: ptr.To(false),
					RunAsUser:                ptr.To[int64](0),
					RunAsNonRoot:             ptr.To(false),
					Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
				},
				Resources: resources("10m", "16Mi", "64Mi"),
			}},
		},
	}
}

func readinessGates(cfg Config) []corev1.PodReadinessGate {
	if !cfg.ReadinessGate {
		return nil
	}
	return []corev1.PodReadinessGate{{ConditionType: contract.PodConditionProbed}}
}

func resources(cpu, memory, memoryLimit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(cpu),
			corev1.ResourceMemory: resource.MustParse(memory),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memoryLimit)},
	}
}
