package contract

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels on every proxy workload and its pods. They point back to the
// Service, so a workload can be found from its Service and a Service key
// from a workload or pod, without owner references (which cannot cross
// namespaces).
const (
	LabelAppName          = "app.kubernetes.io/name"
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	LabelServiceName      = Prefix + "service-name"
	LabelServiceNamespace = Prefix + "service-namespace"

	// ProxyAppName and ProberAppName are the app.kubernetes.io/name of
	// proxy and prober pods.
	ProxyAppName  = "pulselb-proxy"
	ProberAppName = "pulselb-prober"
	ManagedBy     = "pulselb"

	// AnnotationService names the Service as namespace/name on a workload.
	AnnotationService = Prefix + "service"
	// AnnotationSpecHash is the hash of the desired workload; the
	// controller updates a workload only when it differs.
	AnnotationSpecHash = Prefix + "spec-hash"
	// AnnotationTemplateHash is the hash of a workload's pod template: an
	// update that changes it rolls the proxies out again.
	AnnotationTemplateHash = Prefix + "template-hash"
)

// PodConditionProbed is the readiness gate of proxy pods: the controller
// sets it True once the probers found the pod's node serving every port of
// its Service, so that a rollout replaces a proxy only after its successor
// is probed Up, not merely started.
const PodConditionProbed = Prefix + "probed"

// SchedulingGateHome is the scheduling gate of Deployment proxy pods: the
// controller removes it once it has chosen the pod's node (pinning it to the
// node of the proxy it replaces, so that a Service keeps its addresses), or
// found none to choose and left the node to the scheduler.
const SchedulingGateHome = Prefix + "home"

// AnnotationHome names, on a proxy pod, the node the controller pinned it
// to when it removed its scheduling gate (the pod's node selector holds that
// node's hostname label).
const AnnotationHome = Prefix + "home"

// PinnedNode returns the node a proxy pod was pinned to (AnnotationHome),
// or "".
func PinnedNode(p *corev1.Pod) string {
	return p.Annotations[AnnotationHome]
}

// Node labels pulselb reads and writes.
const (
	// LabelExcludeFromLB is Kubernetes' well-known exclusion label; any
	// value excludes the node.
	LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"
	// LabelExclude excludes a node from pulselb only; any value.
	LabelExclude = Prefix + "exclude"
	// LabelUnhealthy is set by the controller on a node whose beacon is
	// down by quorum.
	LabelUnhealthy = Prefix + "unhealthy"
	// LabelExternalIP is "true" on a node with an ExternalIP address; the
	// controller maintains it and proxies prefer such nodes.
	LabelExternalIP = Prefix + "external-ip"
	// LabelMaintenance, any value, takes a node out of service gracefully:
	// its addresses leave every Service's status at once, its proxies keep
	// forwarding for their drain delay and move to other nodes.
	LabelMaintenance = Prefix + "maintenance"
)

// Leaving reports why node is to be taken out of service gracefully, by
// its label, or "" when it is not: the maintenance label, or an exclusion
// label set while proxies may run there.
func Leaving(node *corev1.Node) string {
	for _, l := range []string{LabelMaintenance, LabelExclude, LabelExcludeFromLB} {
		if _, ok := node.Labels[l]; ok {
			return l
		}
	}
	return ""
}

// AnnotationAllowedNamespaces on a Secret in the pulselb namespace lists
// (comma-separated) the namespaces whose Services may name it in a mysql
// probe's secret= option.
const AnnotationAllowedNamespaces = Prefix + "allowed-namespaces"

// ProxySelector returns the labels selecting a Service's proxy pods. They
// never change for a Service, as a Deployment's selector is immutable.
func ProxySelector(svc *corev1.Service) map[string]string {
	return map[string]string{
		LabelAppName:          ProxyAppName,
		LabelServiceNamespace: svc.Namespace,
		LabelServiceName:      svc.Name,
	}
}

// ServiceOf returns the Service a proxy workload or pod belongs to, from
// its labels, and whether the labels name one.
func ServiceOf(objLabels map[string]string) (types.NamespacedName, bool) {
	if objLabels[LabelAppName] != ProxyAppName {
		return types.NamespacedName{}, false
	}
	ns, name := objLabels[LabelServiceNamespace], objLabels[LabelServiceName]
	if ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// NodeReady reports whether node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodReady reports whether p is Running with its Ready condition True,
// terminating or not.
func PodReady(p *corev1.Pod) bool { return runningWith(p, corev1.PodReady) }

// ContainersReady reports whether p is Running with every container
// ready (passing its readiness probe), whether or not its readiness gates
// are open: a proxy that forwards.
func ContainersReady(p *corev1.Pod) bool { return runningWith(p, corev1.ContainersReady) }

// runningWith reports whether p is Running with condition t True.
func runningWith(p *corev1.Pod, t corev1.PodConditionType) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Candidates returns the vantages among pods (prober pods): those Running,
// Ready and not terminating, on a node that ready reports Ready, with the
// node's zone from zone. Each node counts once; the order is pods'.
func Candidates(pods []*corev1.Pod, ready map[string]bool, zone map[string]string) []Vantage {
	var out []Vantage
	seen := map[string]bool{}
	for _, p := range pods {
		n := p.Spec.NodeName
		if n == "" || seen[n] || !ready[n] || p.DeletionTimestamp != nil || !PodReady(p) {
			continue
		}
		seen[n] = true
		out = append(out, Vantage{Node: n, Zone: zone[n]})
	}
	return out
}

// BeaconNodes returns the nodes whose beacon is probed: those of pods
// (prober pods) not terminating, ready or not, on a node that ready
// reports Ready, with the node's zone, each once, in pods' order. A prober
// that is not ready (starting, restarting, in a crash loop) does not probe
// nor vote, but its node is still probed: the beacon probe counts a
// refused connection as the node reached (prober.Beacon), and only
// silence as Down.
func BeaconNodes(pods []*corev1.Pod, ready map[string]bool, zone map[string]string) []Vantage {
	var out []Vantage
	seen := map[string]bool{}
	for _, p := range pods {
		n := p.Spec.NodeName
		if n == "" || seen[n] || !ready[n] || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		seen[n] = true
		out = append(out, Vantage{Node: n, Zone: zone[n]})
	}
	return out
}

// ProberLeasePrefix starts the name of every prober's Lease in the pulselb
// namespace; the rest is the prober's node. The prefix keeps a node from
// sharing a name with another Lease there, such as the controller's leader
// Lease, which the admission policy would otherwise let that node's prober
// write.
const ProberLeasePrefix = "pulselb-prober-"

// MaxNameLength is the longest name of a Lease (a DNS subdomain).
const MaxNameLength = 253

// ProberLeaseLabels are on every prober's Lease, so that the controller
// watches those and not the leader election's Leases of the same
// namespace.
func ProberLeaseLabels() map[string]string {
	return map[string]string{LabelAppName: ProberAppName, LabelManagedBy: ManagedBy}
}

// ProberLeaseName returns the name of node's prober Lease, or an error when
// node's name is too long to make one.
func ProberLeaseName(node string) (string, error) {
	name := ProberLeasePrefix + node
	if len(name) > MaxNameLength {
		return "", fmt.Errorf("node name %q is longer than %d characters: its Lease name %s<node> would be longer than %d",
			node, MaxNameLength-len(ProberLeasePrefix), ProberLeasePrefix, MaxNameLength)
	}
	return name, nil
}

// ProberLeaseNode returns the node whose prober Lease is named name, and
// false when name is no prober Lease's.
func ProberLeaseNode(name string) (string, bool) {
	node, ok := strings.CutPrefix(name, ProberLeasePrefix)
	return node, ok && node != ""
}

// ExternalReportPrefix starts the name of an external vantage's ProbeReport:
// external-<vantage name>. Its Lease is the prober Lease of that name
// (ProberLeaseName), pulselb-prober-external-<vantage name>.
const ExternalReportPrefix = "external-"

// ExternalVantageAccountPrefix starts the name of an external vantage's
// ServiceAccount in the pulselb namespace: pulselb-vantage-<vantage name>.
// The admission policy lets the account of that name write only the
// report and the Lease of that vantage name.
const ExternalVantageAccountPrefix = "pulselb-vantage-"

// ExternalReportName returns the name of the ProbeReport of the external
// vantage named vantage, or an error when vantage cannot name one: it must
// be a DNS label (lower-case letters, digits and '-', starting and ending
// with a letter or digit), short enough that its ServiceAccount, report and
// Lease names fit.
func ExternalReportName(vantage string) (string, error) {
	const maxLen = 63 - len(ExternalVantageAccountPrefix)
	if vantage == "" || len(vantage) > maxLen {
		return "", fmt.Errorf("vantage name %q: want 1 to %d characters", vantage, maxLen)
	}
	for i, r := range vantage {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '-' || i == 0 || i == len(vantage)-1) {
			return "", fmt.Errorf("vantage name %q: want lower-case letters, digits and '-', starting and ending with a letter or digit", vantage)
		}
	}
	return ExternalReportPrefix + vantage, nil
}
