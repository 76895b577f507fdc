package placement

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// Reasons a node cannot host a Service's proxies; "" means eligible.
const (
	ReasonNotReady      = "notReady"
	ReasonUnschedulable = "unschedulable"
	ReasonExcluded      = "excluded"
	ReasonUnhealthy     = "unhealthy"
	ReasonMaintenance   = "maintenance"
	ReasonNotSelected   = "notSelected"
	ReasonTainted       = "tainted"
)

// Ineligible returns why node cannot host proxies under s, or "" when it
// can. It mirrors the pod template's required affinity and tolerations plus
// the node state the scheduler checks, so its count caps replicas.
func Ineligible(node *corev1.Node, s contract.Settings) string {
	if !contract.NodeReady(node) {
		return ReasonNotReady
	}
	if node.Spec.Unschedulable {
		return ReasonUnschedulable
	}
	if _, ok := node.Labels[contract.LabelExcludeFromLB]; ok {
		return ReasonExcluded
	}
	if _, ok := node.Labels[contract.LabelExclude]; ok {
		return ReasonExcluded
	}
	if _, ok := node.Labels[contract.LabelUnhealthy]; ok {
		return ReasonUnhealthy
	}
	if _, ok := node.Labels[contract.LabelMaintenance]; ok {
		return ReasonMaintenance
	}
	if !s.SelectsNode(node.Labels) {
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
func EligibleNodes(nodes []*corev1.Node, s contract.Settings) []string {
	var out []string
	for _, n := range nodes {
		if Ineligible(n, s) == "" {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// tolerated reports whether the proxy pods' tolerations tolerate t.
func tolerated(t corev1.Taint) bool {
	for _, tol := range tolerations(contract.ModeDeployment) {
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
