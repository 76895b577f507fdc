package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
)

// syncNode keeps the node's labels: pulselb.io/external-ip equal to whether
// the node has an ExternalIP address (proxies prefer such nodes), and
// pulselb.io/unhealthy while its beacon is down by quorum. On a failed node,
// or one out of service, it also force-deletes the Deployment proxy pods;
// from a leaving node it evicts them (syncLeaving).
func (c *Controller) syncNode(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting node %s: %w", name, err)
	}
	patchLabels := map[string]any{} // a nil value removes the label in a merge patch
	want := hasExternalIP(node)
	if value, present := node.Labels[contract.LabelExternalIP]; want != (value == "true") || !want && present {
		if want {
			patchLabels[contract.LabelExternalIP] = "true"
		} else {
			patchLabels[contract.LabelExternalIP] = nil
		}
	}
	beacon := status.VerdictUnknown
	var summary string
	if c.reports != nil {
		j := c.verdicts.Verdict(contract.BeaconKey(name))
		beacon, summary = j.Verdict, j.Summary()
	}
	_, unhealthy := node.Labels[contract.LabelUnhealthy]
	switch {
	case beacon == status.VerdictDown && !unhealthy:
		patchLabels[contract.LabelUnhealthy] = "true"
	case beacon == status.VerdictUp && unhealthy:
		// Only an Up verdict clears the label: without fresh reports the
		// node stays out rather than flapping back in.
		patchLabels[contract.LabelUnhealthy] = nil
	}
	if len(patchLabels) > 0 {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patchLabels}})
		if err != nil {
			return fmt.Errorf("encoding node label patch: %w", err)
		}
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("labelling node %s: %w", name, err)
		}
		c.metrics.writes.WithLabelValues("nodes", "patch").Inc()
		klog.FromContext(ctx).Info("Updated node labels", "node", klog.KObj(node), "labels", patchLabels)
		if v, ok := patchLabels[contract.LabelUnhealthy]; ok {
			if v != nil {
				c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonNodeFailed, "labelled %s: %s", contract.LabelUnhealthy, summary)
			} else {
				c.recorder.Eventf(node, corev1.EventTypeNormal, "NodeRecovered", "removed %s: %s", contract.LabelUnhealthy, summary)
			}
		}
	}
	if beacon == status.VerdictDown || outOfService(node) {
		if err := c.evictFailed(ctx, name); err != nil {
			return err
		}
	}
	again, err := c.syncLeaving(ctx, node)
	if again {
		c.nodeQueue.AddAfter(name, leavingRecheck)
	}
	return err
}

func hasExternalIP(n *corev1.Node) bool {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeExternalIP && a.Address != "" {
			return true
		}
	}
	return false
}
