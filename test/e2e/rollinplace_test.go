package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/scenario"
)

// testOneProxyRolledInPlace checks that a Service with one proxy, on the
// one node it may use, keeps its address while that proxy is replaced: the
// rollout (maxUnavailable 1, no other node for a surge) takes the old proxy
// down first, and its successor, pinned to the same node, waits for the
// host port. The fault soak found the status empty in that gap: a
// Service whose other nodes had just been cut off, rolled by an upgrade.
func testOneProxyRolledInPlace(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, node string, selector map[string]string) {
	const name, port = "solo", 8095
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			contract.AnnotationNodeSelector: corev1.LabelHostname + "=" + node,
			contract.AnnotationReplicas:     "1",
			contract.AnnotationDrainDelay:   "1s",
		}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
	proxies := func() []corev1.Pod {
		return listPods(ctx, t, cs, "", contract.LabelServiceName+"="+name)
	}
	var old types.UID
	poll(ctx, t, time.Minute, name+" published on "+node+" with its proxy ready", func() bool {
		ps := proxies()
		if len(ps) != 1 || !contract.PodReady(&ps[0]) || len(ingressIPs(ctx, cs, ns, name)) != 1 {
			return false
		}
		old = ps[0].UID
		return true
	})
	rec := scenario.RecordStatus(ctx, cs, ns, name)
	poll(ctx, t, 10*time.Second, "the status recorder started", func() bool { return rec.Count() > 0 })

	// A new drain delay changes the proxy's pod template: a rollout.
	patch := []byte(`{"metadata":{"annotations":{"` + contract.AnnotationDrainDelay + `":"2s"}}}`)
	if _, err := cs.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	poll(ctx, t, 2*time.Minute, "the proxy replaced and ready", func() bool {
		ps := proxies()
		return len(ps) == 1 && ps[0].UID != old && ps[0].DeletionTimestamp == nil && contract.PodReady(&ps[0])
	})
	t.Logf("proxy replaced in %s", time.Since(began).Round(time.Millisecond))
	// The writes that follow the successor's readiness (gates, conditions)
	// come within a second or two.
	time.Sleep(2 * time.Second)
	writes := rec.Since(0)
	for _, w := range writes {
		if !w.Deleted && len(w.IPs) == 0 {
			t.Errorf("status written empty at +%s, conditions %v", w.At.Sub(began).Round(time.Millisecond), w.Conds)
		}
	}
	if last := writes[len(writes)-1]; len(last.IPs) != 1 {
		t.Errorf("status after the rollout: %v, want %s's address", last.IPs, node)
	}
	var seen [][]string
	for _, w := range writes {
		seen = append(seen, w.IPs)
	}
	t.Logf("status writes from before the change on: %v", seen)
}
