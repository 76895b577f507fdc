package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
)

// TestReplicaSetReaper: on a cluster whose kube-controller-manager runs
// no garbage collector, a Service deleted and re-created at once (as the
// fault soak does) leaves its old proxy Deployment's ReplicaSet behind,
// its proxy holding the Service's host port on the only node. The
// controller's reaper scales that ReplicaSet to zero and deletes it, and
// the new Deployment's proxy takes the port and is published. Without the
// reaper the old ReplicaSet stays for good, as one did in the soak for
// forty minutes, and the Service is never published again.
func TestReplicaSetReaper(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 1, WithoutControllers: []string{"garbage-collector-controller"},
		WaitForMachine: 20 * time.Minute})
	ctx := t.Context()
	cs := c.Client
	if err := c.CreateNamespaces(ctx, systemNamespace, "shop"); err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, c, freeLoopbackPort(t))

	const name = "solo"
	selector := contract.LabelServiceNamespace + "=shop," + contract.LabelServiceName + "=" + name
	create := func() {
		t.Helper()
		if _, err := cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Annotations: map[string]string{contract.AnnotationDrainDelay: "1s"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Name: "http", Port: 8097, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	replicaSets := func() []appsv1.ReplicaSet {
		t.Helper()
		l, err := cs.AppsV1().ReplicaSets(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	nodeIP := c.NodeIPs()["node-1"]
	create()
	poll(ctx, t, 60*time.Second, "shop/solo published on node-1 by a ready proxy", func() bool {
		ctl.alive(t)
		return len(readyPods(ctx, t, cs, systemNamespace, selector)) == 1 && slices.Equal(ingressIPs(ctx, cs, "shop", name), []string{nodeIP})
	})
	old := replicaSets()
	if len(old) != 1 {
		t.Fatalf("%d ReplicaSets for shop/solo, want 1", len(old))
	}
	oldRS := old[0]

	if err := cs.CoreV1().Services("shop").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 30*time.Second, "shop/solo gone (its finalizer released)", func() bool {
		_, err := cs.CoreV1().Services("shop").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	recreated := time.Now()
	create()
	// The premise: no garbage collector, so the old ReplicaSet outlives
	// its Deployment.
	time.Sleep(5 * time.Second)
	if _, err := cs.AppsV1().ReplicaSets(systemNamespace).Get(ctx, oldRS.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the old ReplicaSet %s is gone 5 s after its Service was re-created (%v): is a garbage collector running?", oldRS.Name, err)
	}

	var gone time.Duration
	poll(ctx, t, 90*time.Second, "the old ReplicaSet "+oldRS.Name+" deleted", func() bool {
		ctl.alive(t)
		rs, err := cs.AppsV1().ReplicaSets(systemNamespace).Get(ctx, oldRS.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && rs.UID != oldRS.UID) {
			gone = time.Since(recreated)
			return true
		}
		return false
	})
	poll(ctx, t, 60*time.Second, "shop/solo published again on node-1 by the new Deployment's proxy", func() bool {
		ctl.alive(t)
		pods := readyPods(ctx, t, cs, systemNamespace, selector)
		if len(pods) != 1 {
			return false
		}
		ref := metav1.GetControllerOf(&pods[0])
		return ref != nil && ref.UID != oldRS.UID && slices.Equal(ingressIPs(ctx, cs, "shop", name), []string{nodeIP})
	})
	t.Logf("after the Service was re-created: old ReplicaSet deleted at +%s, Service published again at +%s",
		gone.Round(100*time.Millisecond), time.Since(recreated).Round(100*time.Millisecond))
	if t.Failed() {
		t.Logf("pods: %s; controller log: %s", describePods(context.WithoutCancel(ctx), cs, systemNamespace), ctl.LogPath)
	}
}
