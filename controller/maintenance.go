package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
)

// Planned node changes: a node labelled pulselb.io/maintenance, or excluded
// while proxies run on it, leaves gracefully. Its addresses leave every
// Service's status at once (health), its Deployment proxy pods are evicted
// (the Eviction API, so that their PodDisruptionBudgets hold) and keep
// forwarding for their drain delay while replacements start on other nodes,
// and a node condition says when no proxy is left and the node is safe to
// drain. DaemonSet proxies leave through their node affinity.
const (
	// ConditionProxiesDrained is the node condition of a leaving node:
	// False while pulselb proxy pods run on it, True once none does.
	ConditionProxiesDrained = "pulselb.io/ProxiesDrained"

	// Event reasons on a leaving node.
	ReasonNodeLeaving = "NodeLeaving"
	ReasonNodeDrained = "NodeDrained"

	// Reasons of ConditionProxiesDrained.
	reasonDraining = "Draining"
	reasonDrained  = "Drained"

	// leavingRecheck is how soon a leaving node is looked at again while
	// its proxies drain or an eviction waits for a budget.
	leavingRecheck = 2 * time.Second
)

// leaving is what planLeaving decides for a node.
type leaving struct {
	// label is what makes the node leave (contract.Leaving); "" when it
	// does not.
	label string
	// evict are the Deployment proxy pods to evict: on the node and not
	// terminating yet.
	evict []*corev1.Pod
	// remaining are the proxy pods still on the node, terminating ones
	// and DaemonSet pods included.
	remaining []*corev1.Pod
}

// planLeaving decides what happens to the proxy pods of node, given every
// proxy pod. It is pure.
func planLeaving(node *corev1.Node, proxies []*corev1.Pod) leaving {
	l := leaving{label: contract.Leaving(node)}
	if l.label == "" {
		return l
	}
	for _, p := range proxies {
		if p.Spec.NodeName != node.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		l.remaining = append(l.remaining, p)
		if p.DeletionTimestamp == nil && ownedByReplicaSet(p) {
			l.evict = append(l.evict, p)
		}
	}
	return l
}

// condition returns the ProxiesDrained condition l wants on its node, nil
// for none.
func (l leaving) condition() *corev1.NodeCondition {
	if l.label == "" {
		return nil
	}
	c := &corev1.NodeCondition{Type: ConditionProxiesDrained, Status: corev1.ConditionTrue, Reason: reasonDrained,
		Message: "labelled " + l.label + ": no pulselb proxy runs here and the node's addresses are in no Service's status; safe to drain"}
	if len(l.remaining) > 0 {
		names := make([]string, len(l.remaining))
		for i, p := range l.remaining {
			names[i] = p.Name
		}
		slices.Sort(names)
		c.Status, c.Reason = corev1.ConditionFalse, reasonDraining
		c.Message = fmt.Sprintf("labelled %s: the node's addresses left every Service's status; %d proxy pods keep forwarding for their drain delay, then move: %s",
			l.label, len(names), contract.ShortList(names, 5))
	}
	return c
}

// syncLeaving evicts the proxies of a leaving node and keeps its
// ProxiesDrained condition; on a node that no longer leaves it removes the
// condition. It reports whether to look at the node again soon.
func (c *Controller) syncLeaving(ctx context.Context, node *corev1.Node) (bool, error) {
	proxies, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProxyAppName}))
	if err != nil {
		return false, fmt.Errorf("listing proxy pods: %w", err)
	}
	l := planLeaving(node, proxies)
	blocked := false
	for _, p := range l.evict {
		ok, err := c.evict(ctx, p)
		if err != nil {
			return false, err
		}
		blocked = blocked || !ok
	}
	if err := c.setDrainedCondition(ctx, node, l.condition()); err != nil {
		return false, err
	}
	return blocked || len(l.remaining) > 0, nil
}

// evict asks the API server to evict p, which respects p's
// PodDisruptionBudget. It returns false when the budget does not allow it
// now (the caller tries again), and counts a pod already gone as evicted.
func (c *Controller) evict(ctx context.Context, p *corev1.Pod) (bool, error) {
	err := c.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
	switch {
	case apierrors.IsTooManyRequests(err):
		klog.FromContext(ctx).V(2).Info("Eviction of proxy pod waits for its disruption budget", "pod", klog.KObj(p), "node", p.Spec.NodeName)
		return false, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("evicting pod %s/%s from node %s: %w", p.Namespace, p.Name, p.Spec.NodeName, err)
	}
	c.metrics.writes.WithLabelValues("pods/eviction", "create").Inc()
	klog.FromContext(ctx).Info("Evicted proxy pod from leaving node", "pod", klog.KObj(p), "node", p.Spec.NodeName)
	return true, nil
}

// setDrainedCondition makes node's ProxiesDrained condition want (nil:
// absent), writing only a change, and records an Event when the node
// starts leaving and when it is drained.
func (c *Controller) setDrainedCondition(ctx context.Context, node *corev1.Node, want *corev1.NodeCondition) error {
	var cur *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == ConditionProxiesDrained {
			cur = &node.Status.Conditions[i]
		}
	}
	var patch map[string]any
	switch {
	case want == nil && cur == nil:
		return nil
	case want == nil:
		patch = map[string]any{"type": ConditionProxiesDrained, "$patch": "delete"}
	case cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message:
		return nil
	default:
		now := metav1.NewTime(c.now())
		want.LastHeartbeatTime, want.LastTransitionTime = now, now
		if cur != nil && cur.Status == want.Status {
			want.LastTransitionTime = cur.LastTransitionTime
		}
		patch = map[string]any{"type": want.Type, "status": want.Status, "reason": want.Reason, "message": want.Message,
			"lastHeartbeatTime": want.LastHeartbeatTime, "lastTransitionTime": want.LastTransitionTime}
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{patch}}})
	if err != nil {
		return fmt.Errorf("encoding node condition patch: %w", err)
	}
	if _, err := c.client.CoreV1().Nodes().PatchStatus(ctx, node.Name, body); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("setting condition %s of node %s: %w", ConditionProxiesDrained, node.Name, err)
	}
	c.metrics.writes.WithLabelValues("nodes/status", "patch").Inc()
	switch {
	case want == nil:
		klog.FromContext(ctx).Info("Node no longer leaving", "node", klog.KObj(node))
	case cur == nil || cur.Status != want.Status:
		reason := ReasonNodeLeaving
		if want.Status == corev1.ConditionTrue {
			reason = ReasonNodeDrained
		}
		klog.FromContext(ctx).Info("Node leaving", "node", klog.KObj(node), "drained", want.Status, "message", want.Message)
		c.recorder.Event(node, corev1.EventTypeNormal, reason, want.Message)
	}
	return nil
}

// outOfService reports whether node has Kubernetes' out-of-service taint:
// it is shut down, and its proxies count as down at once.
func outOfService(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
}

// leavingReason says why a node's addresses are out of every status
// without a failure, for the dashboard: "" when they are not.
func leavingReason(node *corev1.Node) string {
	if l := contract.Leaving(node); l != "" {
		return "node is leaving: labelled " + l
	}
	if outOfService(node) {
		return "node is out of service (" + corev1.TaintNodeOutOfService + ")"
	}
	return ""
}
