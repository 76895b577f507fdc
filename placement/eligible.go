package placement

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

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
)

// Reasons a node cannot host a Service's proxies; "" means eligible.
const (
	ReasonNotReady      = "notReady"
	ReasonUnschedulable = "unschedulable"
	ReasonExcluded      = "excluded"
	ReasonUnhealthy     = "unhealthy"
	ReasonNotSelected   = "notSelected"
	ReasonTainted       = "tainted"
)

// Ineligible returns why node cannot host proxies under s, or "" when it
// can. It mirrors the pod template's required affinity and tolerations plus
// the node state the scheduler checks, so its count caps replicas.
func Ineligible(node *corev1.Node, s Settings) string {
	if !nodeReady(node) {
		return ReasonNotReady
	}
	if node.Spec.Unschedulable {
		return ReasonUnschedulable
	}
	if _, ok := node.Labels[LabelExcludeFromLB]; ok {
		return ReasonExcluded
	}
	if _, ok := node.Labels[LabelExclude]; ok {
		return ReasonExcluded
	}
	if _, ok := node.Labels[LabelUnhealthy]; ok {
		return ReasonUnhealthy
	}
	if s.nodeSelector != nil && !s.nodeSelector.Matches(labels.Set(node.Labels)) {
		return ReasonNotSelected
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule || tolerated(t) {
			continue
		}
		return ReasonTainted
	}
	return ""
}

// EligibleNodes returns the sorted names of the nodes that can host proxies.
func EligibleNodes(nodes []*corev1.Node, s Settings) []string {
	var out []string
	for _, n := range nodes {
		if Ineligible(n, s) == "" {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tolerated reports whether the proxy pods' tolerations tolerate t.
func tolerated(t corev1.Taint) bool {
	for _, tol := range tolerations(ModeDeployment) {
		if tol.Key != t.Key {
			continue
		}
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		if tol.Operator == corev1.TolerationOpExists || tol.Value == t.Value {
			return true
		}
	}
	return false
}
