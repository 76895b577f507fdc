package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/test/cluster"
)

// TestLightNodes runs a DaemonSet over many light nodes: every node gets a
// pod the simulator reports Running and Ready. PULSELB_TEST_LIGHT_NODES sets
// the count (default 50; the harness is sized for 500).
func TestLightNodes(t *testing.T) {
	n := 50
	if s := os.Getenv("PULSELB_TEST_LIGHT_NODES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("PULSELB_TEST_LIGHT_NODES: %v", err)
		}
		n = v
	}
	began := time.Now()
	c := cluster.ForTest(t, cluster.Options{LightNodes: n, NoKubeProxy: true})
	t.Logf("cluster with %d light nodes up in %s", n, time.Since(began).Round(time.Millisecond))
	ctx := t.Context()

	labels := map[string]string{"app": "everywhere"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "everywhere", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers:                    []corev1.Container{{Name: "echo", Image: "echo"}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating daemonset: %v", err)
	}
	start := time.Now()
	poll(ctx, t, 2*time.Minute, "every light node running the daemon pod", func() bool {
		got, err := c.Client.AppsV1().DaemonSets("default").Get(ctx, "everywhere", metav1.GetOptions{})
		return err == nil && got.Status.DesiredNumberScheduled == int32(n) && got.Status.NumberReady == int32(n)
	})
	t.Logf("%d daemon pods ready in %s", n, time.Since(start).Round(time.Millisecond))
}
