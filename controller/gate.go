package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
)

// Reasons of the probed readiness gate condition.
const (
	reasonProbedUp     = "ProbedUp"
	reasonNotProbed    = "HealthChecksOff"
	gateMessageProbed  = "the probers found every port of the Service served on this node"
	gateMessageNoCheck = "the controller judges no health (--probe-reports=false)"
)

// gateWaiting returns the proxy pods of own whose probed readiness gate is
// still closed: the gate is in their spec, they are scheduled, running and
// not terminating, and the condition is not True yet.
func gateWaiting(own []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range own {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning ||
			!slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == contract.PodConditionProbed }) {
			continue
		}
		if slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == contract.PodConditionProbed && c.Status == corev1.ConditionTrue
		}) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// openGates sets the probed readiness gate of svc's proxy pods whose node
// is now found serving by the rule that adds a node to the status: its
// beacon not Down, its ports Up by quorum (or with no vantage to probe
// them). Until then a pod is not Ready, so a rollout does not replace an old
// proxy with it. A gate once open stays open: a later failure is the
// verdicts' and the restart rule's to act on, not a rollout's.
func (c *Controller) openGates(ctx context.Context, svc *corev1.Service, own []*corev1.Pod, publishWhen string) error {
	waiting := gateWaiting(own)
	if len(waiting) == 0 {
		return nil
	}
	name := cache.MetaObjectToName(svc).String()
	for _, p := range waiting {
		reason, msg := reasonNotProbed, gateMessageNoCheck
		if c.reports != nil {
			if status.NodeHealth(c.nodeVerdicts(svc, name, p.Spec.NodeName, false), publishWhen).Down {
				continue
			}
			reason, msg = reasonProbedUp, gateMessageProbed
		}
		cond := map[string]any{"type": contract.PodConditionProbed, "status": corev1.ConditionTrue, "reason": reason,
			"message": msg, "lastTransitionTime": metav1.NewTime(c.now())}
		body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
		if err != nil {
			return fmt.Errorf("encoding pod condition patch: %w", err)
		}
		_, err = c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("opening the readiness gate of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		c.metrics.writes.WithLabelValues("pods/status", "patch").Inc()
		klog.FromContext(ctx).Info("Opened proxy pod's readiness gate", "pod", klog.KObj(p), "node", p.Spec.NodeName, "reason", reason)
	}
	return nil
}
