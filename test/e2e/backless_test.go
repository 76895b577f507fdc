package e2e

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/test/cluster"
)

// testAddressBeforeBackends checks, with pulselb's probers running, that
// a TCP Service created before its backends gets its address (as the
// upstream LoadBalancer specs, Helm charts and users expect), and keeps it
// when the backends come and answer through it. backendNode runs the
// backends; annotations are the Service's.
func testAddressBeforeBackends(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, backendNode string, annotations map[string]string) {
	const name, port = "early", 8091
	created := time.Now()
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.WithoutCancel(ctx)
		_ = cs.CoreV1().Services(ns).Delete(bg, name, metav1.DeleteOptions{})
		_ = cs.AppsV1().Deployments(ns).Delete(bg, name, metav1.DeleteOptions{})
	})
	ingress := func() []string { return ingressIPs(ctx, cs, ns, name) }
	var addrs []string
	poll(ctx, t, 30*time.Second, "the Service without backends published", func() bool {
		addrs = ingress()
		return len(addrs) == 2
	})
	t.Logf("published on %v %s after creation, with no backend", addrs, time.Since(created).Round(time.Millisecond))

	dep := cluster.EchoDeployment(ns, name, 1, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: backendNode}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 60*time.Second, "the backend answering on every published address", func() bool {
		for _, a := range addrs {
			if ok, _ := httpFrom(rangesClientA, netip.AddrPortFrom(netip.MustParseAddr(a), port)); !ok {
				return false
			}
		}
		return true
	})
	// The readiness gates open and the status settles: the same addresses.
	time.Sleep(3 * time.Second)
	if got := ingress(); !slices.Equal(got, addrs) {
		t.Errorf("addresses %v once the backend answers, were %v", got, addrs)
	}
}
