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

	"github.com/pulselb/pulselb/placement"
)

// syncNode keeps the pulselb.io/external-ip label equal to whether the node
// has an ExternalIP address; proxies prefer such nodes.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting node %s: %w", name, err)
	}
	want := hasExternalIP(node)
	value, present := node.Labels[placement.LabelExternalIP]
	if want == (value == "true") && (want || !present) {
		return nil
	}
	var label any // nil removes the label in a merge patch
	if want {
		label = "true"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{placement.LabelExternalIP: label}}})
	if err != nil {
		return fmt.Errorf("encoding node label patch: %w", err)
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("labelling node %s: %w", name, err)
	}
	writes.WithLabelValues("nodes", "patch").Inc()
	klog.FromContext(ctx).Info("Updated node label", "node", klog.KObj(node), "label", placement.LabelExternalIP, "externalIP", want)
	return nil
}

func hasExternalIP(n *corev1.Node) bool {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeExternalIP && a.Address != "" {
			return true
		}
	}
	return false
}
