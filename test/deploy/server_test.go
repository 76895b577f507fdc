package deploy

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pulselb/pulselb/test/cluster"
)

// TestManifestsServerValidation sends every rendered object — the
// kustomize base and the chart with each value set — to a real Kubernetes
// 1.37 API server as a server-side apply dry run with strict field
// validation: the server's own schemas, defaulting and admission (including
// PodSecurity and the CEL of the admission policy) judge them. The CRDs are
// installed for real first, so custom kinds validate against them.
func TestManifestsServerValidation(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 1, NoKubeProxy: true})
	ctx := t.Context()
	a, err := NewApplier(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// Namespaced objects need their namespace to exist, even in a dry run.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// The validation can fail: an unknown field is rejected, not dropped.
	bad := Find(render(t, nil), "Deployment", "pulselb-controller").DeepCopy()
	containers, _, _ := unstructured.NestedSlice(bad.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["imagePullPolicyy"] = "Always"
	if err := unstructured.SetNestedSlice(bad.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, bad, true); err == nil || !strings.Contains(err.Error(), "imagePullPolicyy") {
		t.Fatalf("dry run of a Deployment with an unknown field: %v, want an error naming the field", err)
	}

	base, err := Build(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	sets := []struct {
		name string
		objs []*unstructured.Unstructured
	}{{"kustomize-base", base}}
	for _, vs := range valueSets {
		sets = append(sets, struct {
			name string
			objs []*unstructured.Unstructured
		}{"chart-" + vs.name, Objects(render(t, vs.values))})
	}
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			for _, o := range set.objs {
				if IsCRD(o) {
					if _, err := a.Apply(ctx, o, false); err != nil {
						t.Fatal(err)
					}
					if err := WaitEstablished(ctx, a.Dynamic, o.GetName(), 30*time.Second); err != nil {
						t.Fatal(err)
					}
				}
			}
			validated := 0
			for _, o := range set.objs {
				if IsCRD(o) {
					continue
				}
				if o.GetAPIVersion() == "monitoring.coreos.com/v1" {
					// The Prometheus Operator's CRD is not installed here;
					// the render test checks the ServiceMonitor parses.
					t.Logf("not validated by the server (its CRD is not installed): %s %s", o.GetKind(), o.GetName())
					continue
				}
				if _, err := a.Apply(ctx, o, true); err != nil {
					t.Errorf("server rejected %s %s: %v", o.GetKind(), o.GetName(), err)
					continue
				}
				validated++
			}
			t.Logf("%d objects validated by the API server", validated)
		})
	}
}
