package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

// testFirstAddressStaysFirst checks that a Service's first published
// address stays first when a second proxy, on a node whose address sorts
// before it, is published seconds later, as Kubernetes' own LoadBalancer
// specs and users' scripts read ingress[0] as the Service's address (the
// spec "should be able to create LoadBalancer Service without NodePort and
// change it" failed in CI on this). The Service's two proxies may run on
// nodes low and high only (low's address sorts first); a pod outside
// pulselb holds the Service's port on low, so only high's proxy starts;
// once high is published the pod goes, and low's proxy starts and joins.
// selector and target choose the backends; ips are the nodes' addresses.
func testFirstAddressStaysFirst(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, selector map[string]string, target intstr.IntOrString, low, high string, ips map[string]string) {
	const name, port = "first", 8092
	if netip.MustParseAddr(ips[low]).Compare(netip.MustParseAddr(ips[high])) >= 0 {
		t.Fatalf("%s's address %s does not sort before %s's %s", low, ips[low], high, ips[high])
	}
	// A priority above the proxies' (system-cluster-critical), or the
	// scheduler would preempt it to place the proxy.
	blocker, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "holds-8092", Namespace: "default", Labels: map[string]string{"app": "holds-8092"}},
		Spec: corev1.PodSpec{
			NodeName:          low,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{Name: "echo", Image: "registry.example/echo:1",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080, HostPort: port}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the pod that holds port %d on %s: %v", port, low, err)
	}
	waitPodsRunning(ctx, t, cs, "app=holds-8092", 1)
	defer func() {
		_ = cs.CoreV1().Pods(blocker.Namespace).Delete(context.WithoutCancel(ctx), blocker.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			contract.AnnotationNodeSelector: fmt.Sprintf("%s in (%s,%s)", corev1.LabelHostname, low, high),
		}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: target}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Services(ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	ingress := func() []string { return ingressInOrder(ctx, cs, ns, name) }
	poll(ctx, t, 60*time.Second, "the Service published on "+high+" alone", func() bool {
		got := ingress()
		return len(got) == 1 && got[0] == ips[high]
	})
	freed := time.Now()
	if err := cs.CoreV1().Pods(blocker.Namespace).Delete(ctx, blocker.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// Every status seen until low joins must still lead with high.
	var moved []string
	poll(ctx, t, 90*time.Second, "low's proxy published too", func() bool {
		got := ingress()
		if len(got) > 0 && got[0] != ips[high] && moved == nil {
			moved = got
		}
		return len(got) == 2
	})
	got := ingress()
	t.Logf("%s joined %s after its port was freed: ingress %v", low, time.Since(freed).Round(time.Millisecond), got)
	if moved != nil {
		t.Errorf("ingress[0] moved while %s joined: %v, want %s first", low, moved, ips[high])
	}
	if len(got) != 2 || got[0] != ips[high] || got[1] != ips[low] {
		t.Errorf("ingress %v, want [%s %s]: the first address stays first", got, ips[high], ips[low])
	}
}
