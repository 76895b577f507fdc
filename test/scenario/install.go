package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
)

// Component selectors and the namespace of pulselb installed from
// deploy/base.
const (
	SystemNamespace    = "pulselb-system"
	ControllerSelector = "app.kubernetes.io/name=pulselb-controller"
	ProberSelector     = "app.kubernetes.io/name=pulselb-prober"
)

// InstallBase applies objs (deploy/base built with kustomize, or an
// overlay of it) as `kubectl apply -k` would, CRDs first, and waits up to
// timeout for 2 controllers and one prober per node running and ready.
// The simulator runs images whose name contains "pulselb" as the pulselb
// binary of this checkout, with the pod's own service-account token: the
// components run with the permissions the manifests give them.
func InstallBase(ctx context.Context, c *cluster.Cluster, objs []*unstructured.Unstructured, timeout time.Duration) error {
	for _, o := range objs {
		for _, ctr := range UnstructuredSlice(o.Object, "spec", "template", "spec", "containers") {
			if img, _ := ctr["image"].(string); !strings.Contains(img, "pulselb") {
				return fmt.Errorf("%s %s runs image %q: the simulator runs pulselb only for images named pulselb", o.GetKind(), o.GetName(), img)
			}
		}
	}
	a, err := deploy.NewApplier(c.RESTConfig)
	if err != nil {
		return err
	}
	if err := a.Install(ctx, objs); err != nil {
		return fmt.Errorf("installing deploy/base: %w", err)
	}
	nodes := len(c.Nodes())
	return Poll(ctx, timeout, fmt.Sprintf("2 controllers and %d probers running and ready", nodes), func() bool {
		return len(ReadyPods(ctx, c.Client, SystemNamespace, ControllerSelector)) == 2 &&
			len(ReadyPods(ctx, c.Client, SystemNamespace, ProberSelector)) == nodes
	})
}

// UnstructuredSlice returns the list of maps at path in obj.
func UnstructuredSlice(obj map[string]any, path ...string) []map[string]any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	l, _ := cur.([]any)
	var out []map[string]any
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
