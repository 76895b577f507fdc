package controller

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
)

// homeProxy is a proxy pod of svc named name on node (none when gated, as
// created behind the home gate), of template hash, holding port.
func homeProxy(svc *corev1.Service, name, node, hash string, port int32, gated, terminating bool) *corev1.Pod {
	p := readyPod(svc, node)
	p.Name, p.UID = name, types.UID("uid-"+name)
	p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP}}
	if gated {
		p.Spec.NodeName = ""
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: contract.SchedulingGateHome}}
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
	if terminating {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	}
	return p
}

// TestSyncPortChangeKeepsAddresses: a Service published on n1 and n2 whose
// port changed from 80 to 81 (its Deployment rolling) keeps both
// addresses, its first new proxy is pinned to n1, next to the old one, and
// n1 stays published while its old proxy, terminating, drains.
func TestSyncPortChangeKeepsAddresses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) {
		s.Spec.Ports[0].Port = 81
		s.Finalizers = []string{Finalizer}
		s.Annotations = map[string]string{contract.AnnotationNodes: "n1,n2"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "10.0.0.1", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
			{IP: "10.0.0.2", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
		}
	})
	proxy := func(name, node, hash string, port int32, gated, terminating bool) *corev1.Pod {
		return homeProxy(svc, name, node, hash, port, gated, terminating)
	}
	nodes := []*corev1.Node{newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), newNode("n3", "10.0.0.3")}
	for _, tt := range []struct {
		name          string
		oldTerminates bool
	}{{"the new proxy surges next to the old one", false}, {"the old proxy drains first", true}} {
		t.Run(tt.name, func(t *testing.T) {
			objs := []*corev1.Pod{
				proxy("old-1", "n1", "h80", 80, false, tt.oldTerminates),
				proxy("old-2", "n2", "h80", 80, false, false),
				proxy("new-1", "", "h81", 81, true, false),
			}
			f := newFixture(t, svc, nodes[0], nodes[1], nodes[2], objs[0], objs[1], objs[2])
			c := f.controller(ctx)
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); !slices.Contains(w, "patch pods new-1") {
				t.Errorf("writes %q: want new-1 placed", w)
			}
			got := f.service(ctx, "shop", "web")
			var ips []string
			for _, in := range got.Status.LoadBalancer.Ingress {
				ips = append(ips, in.IP)
			}
			if strings.Join(ips, ",") != "10.0.0.1,10.0.0.2" || got.Annotations[contract.AnnotationNodes] != "n1,n2" {
				t.Errorf("ingress %v, nodes %q; want n1 and n2 still published", ips, got.Annotations[contract.AnnotationNodes])
			}
			p, err := f.client.CoreV1().Pods(systemNS).Get(ctx, "new-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if placement.Gated(p) || contract.PinnedNode(p) != "n1" {
				t.Errorf("new-1: gated %v, pinned to %q; want released to n1", placement.Gated(p), contract.PinnedNode(p))
			}
			// Synced again before the cache shows the patch: not placed twice.
			f.client.ClearActions()
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); slices.Contains(w, "patch pods new-1") {
				t.Errorf("writes %q: new-1 placed again", w)
			}
		})
	}
}

// TestSyncPlacedPodStillGatedInCache: a sync that runs before the cache
// shows the pod the last sync placed takes that pod's home as taken, so a
// second gated pod of the same template does not go there too. The fault
// soak found both new proxies of a rollout pinned to one node: the second
// sync, seeing both gated, gave the first home to the pod that sorts
// first, the one not yet placed, while the other was already pinned there.
func TestSyncPlacedPodStillGatedInCache(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) {
		s.Finalizers = []string{Finalizer}
		s.Annotations = map[string]string{contract.AnnotationNodes: "n1,n2"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "10.0.0.1", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
			{IP: "10.0.0.2", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
		}
	})
	proxy := func(name, node, hash string, gated, terminating bool) *corev1.Pod {
		return homeProxy(svc, name, node, hash, 80, gated, terminating)
	}
	nodes := []*corev1.Node{newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), newNode("n3", "10.0.0.3")}
	// n1's old proxy serves; n2's, terminating, frees its home.
	old1, old2 := proxy("old-1", "n1", "old", false, false), proxy("old-2", "n2", "old", false, true)
	newB, newA := proxy("new-b", "", "new", true, false), proxy("new-a", "", "new", true, false)
	f := newFixture(t, svc, nodes[0], nodes[1], nodes[2], old1, old2, newB)
	c := f.controller(ctx)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	pinned := func(name string) string {
		p, err := f.client.CoreV1().Pods(systemNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if placement.Gated(p) {
			return "gated"
		}
		return contract.PinnedNode(p)
	}
	if got := pinned("new-b"); got != "n2" {
		t.Fatalf("new-b pinned to %q, want n2 (its home, being freed)", got)
	}
	// new-a appears; the cache still shows new-b gated.
	if _, err := f.client.CoreV1().Pods(systemNS).Create(ctx, newA, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.system.Core().V1().Pods().Informer().GetIndexer().Add(newA); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); slices.Contains(w, "patch pods new-b") {
		t.Errorf("writes %q: new-b placed again", w)
	}
	if got := pinned("new-a"); got == "n2" {
		t.Errorf("new-a pinned to n2, where new-b already is; want another home or none")
	}
}
