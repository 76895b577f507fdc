package controller

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
)

// TestWorkloadUnchanged: a proxy workload's status updates, and the
// Deployment controller's revision annotation, do not requeue its Service;
// any change sync reads does.
func TestWorkloadUnchanged(t *testing.T) {
	base := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 1,
		Labels: map[string]string{"a": "1"}, Annotations: map[string]string{contract.AnnotationSpecHash: "x"}}}
	tests := []struct {
		name   string
		change func(*appsv1.Deployment)
		want   bool
	}{
		{"status only", func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 2; d.ResourceVersion = "9" }, true},
		{"spec changed", func(d *appsv1.Deployment) { d.Generation = 2 }, false},
		{"labels changed", func(d *appsv1.Deployment) { d.Labels["a"] = "2" }, false},
		{"spec hash changed", func(d *appsv1.Deployment) { d.Annotations[contract.AnnotationSpecHash] = "y" }, false},
		{"template hash added", func(d *appsv1.Deployment) { d.Annotations[contract.AnnotationTemplateHash] = "t" }, false},
		{"revision annotation added", func(d *appsv1.Deployment) { d.Annotations["deployment.kubernetes.io/revision"] = "1" }, true},
		{"being deleted", func(d *appsv1.Deployment) { d.DeletionTimestamp = &metav1.Time{Time: testNow} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.DeepCopy()
			tt.change(n)
			if got := workloadUnchanged(base, n); got != tt.want {
				t.Errorf("workloadUnchanged = %v, want %v", got, tt.want)
			}
		})
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	ds2 := ds.DeepCopy()
	ds2.Status.NumberReady = 3
	if !workloadUnchanged(ds, ds2) {
		t.Error("a DaemonSet status update requeues its Service")
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	pdb2 := pdb.DeepCopy()
	pdb2.Status.CurrentHealthy, pdb2.Status.DisruptionsAllowed = 2, 1
	if !workloadUnchanged(pdb, pdb2) {
		t.Error("a PodDisruptionBudget status update requeues its Service")
	}
	pdb2.Generation = 2
	if workloadUnchanged(pdb, pdb2) {
		t.Error("a PodDisruptionBudget spec change is ignored")
	}
	pod := &corev1.Pod{}
	if workloadUnchanged(pod, pod.DeepCopy()) {
		t.Error("a pod update is ignored; pods' status is what status reads")
	}
}

// webWorkloads returns the desired proxy workloads of shop/web in
// deployment and in daemonset mode, with the placement configuration and
// nodes they were made for.
func webWorkloads() (web, daemon placement.Workload, cfg placement.Config, nodes []*corev1.Node) {
	cfg = placement.Config{Namespace: systemNS, Image: "x"}
	nodes = []*corev1.Node{newNode("n1", "10.0.0.1")}
	web, _ = placement.Desired(newService("web"), nodes, cfg)
	daemon, _ = placement.Desired(newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationProxyMode: "daemonset"}
	}), nodes, cfg)
	return web, daemon, cfg, nodes
}

// TestWorkloadsOf: a Service's proxy workloads are found by its index
// among other Services' and other namespaces' workloads.
func TestWorkloadsOf(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	web, daemon, cfg, nodes := webWorkloads()
	shop, _ := placement.Desired(newService("shop"), nodes, cfg)
	elsewhere := web.Deployment.DeepCopy()
	elsewhere.Namespace = "default"
	notProxy := web.Deployment.DeepCopy()
	notProxy.Name = "not-a-proxy"
	notProxy.Labels = maps.Clone(notProxy.Labels)
	notProxy.Labels[contract.LabelAppName] = "other"
	f := newFixture(t, web.Deployment, web.Budget, daemon.DaemonSet, shop.Deployment, shop.Budget, notProxy)
	c := f.controller(ctx)
	if err := f.system.Apps().V1().Deployments().Informer().GetIndexer().Add(elsewhere); err != nil {
		t.Fatal(err)
	}
	got, err := c.workloadsOf(cache.NewObjectName("shop", "web"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range got {
		names = append(names, fmt.Sprintf("%T %s/%s", w, w.GetNamespace(), w.GetName()))
	}
	slices.Sort(names)
	want := []string{
		"*v1.DaemonSet " + systemNS + "/" + daemon.Name,
		"*v1.Deployment " + systemNS + "/" + web.Name,
		"*v1.PodDisruptionBudget " + systemNS + "/" + web.Name,
	}
	if !slices.Equal(names, want) {
		t.Errorf("workloadsOf(shop/web) = %q, want %q", names, want)
	}
}

// TestEnqueueOwner: an event on any of a Service's proxy objects (pod,
// Deployment, DaemonSet, PodDisruptionBudget), a deletion seen late
// included, requeues that Service, so that one deleted by hand is put back.
func TestEnqueueOwner(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	web, daemon, _, _ := webWorkloads()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: "p", Labels: web.Deployment.Spec.Template.Labels}}
	want := cache.NewObjectName("shop", "web")
	for _, tt := range []struct {
		name string
		obj  any
	}{
		{"pod", pod},
		{"Deployment", web.Deployment},
		{"DaemonSet", daemon.DaemonSet},
		{"PodDisruptionBudget", web.Budget},
		{"PodDisruptionBudget deleted, seen late", cache.DeletedFinalStateUnknown{Key: systemNS + "/" + web.Name, Obj: web.Budget}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFixture(t).controller(ctx)
			c.enqueueOwner(tt.obj)
			if n := c.queue.Len(); n != 1 {
				t.Fatalf("queue holds %d keys, want 1 (%v)", n, want)
			}
			if got, _ := c.queue.Get(); got != want {
				t.Errorf("enqueued %v, want %v", got, want)
			}
		})
	}
	c := newFixture(t).controller(ctx)
	c.enqueueOwner(&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: "not-ours"}})
	if n := c.queue.Len(); n != 0 {
		t.Errorf("a budget without a Service's labels enqueued %d keys", n)
	}
}
