package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

const systemNS = "pulselb-system"

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture holds the objects a test puts in the informer caches and the
// fake clientset, sample-controller style: sync is called directly and the
// clientset's recorded actions are checked.
type fixture struct {
	t        testing.TB
	client   *fake.Clientset
	recorder *record.FakeRecorder
	objects  []runtime.Object
	cfg      Config
	// system is the pulselb-system informer factory of the last
	// controller made.
	system, cluster informers.SharedInformerFactory
}

func newFixture(t testing.TB, objects ...runtime.Object) *fixture {
	return &fixture{t: t, objects: objects, recorder: record.NewFakeRecorder(100),
		cfg: Config{Placement: placement.Config{Namespace: systemNS, Image: "pulselb:test"}}}
}

// controller returns a Controller whose caches hold f.objects.
func (f *fixture) controller(ctx context.Context) *Controller {
	f.t.Helper()
	f.client = fake.NewClientset(f.objects...)
	cluster := informers.NewSharedInformerFactory(f.client, 0)
	system := informers.NewSharedInformerFactoryWithOptions(f.client, 0, informers.WithNamespace(systemNS))
	f.system, f.cluster = system, cluster
	c, err := New(ctx, f.client, cluster, system, f.recorder, f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	c.now = func() time.Time { return testNow }
	for _, o := range f.objects {
		var idx cache.Indexer
		switch o.(type) {
		case *corev1.Service:
			idx = cluster.Core().V1().Services().Informer().GetIndexer()
		case *corev1.Node:
			idx = cluster.Core().V1().Nodes().Informer().GetIndexer()
		case *corev1.Pod:
			idx = system.Core().V1().Pods().Informer().GetIndexer()
		case *appsv1.Deployment:
			idx = system.Apps().V1().Deployments().Informer().GetIndexer()
		case *appsv1.DaemonSet:
			idx = system.Apps().V1().DaemonSets().Informer().GetIndexer()
		case *policyv1.PodDisruptionBudget:
			idx = system.Policy().V1().PodDisruptionBudgets().Informer().GetIndexer()
		default:
			continue
		}
		if err := idx.Add(o); err != nil {
			f.t.Fatal(err)
		}
	}
	f.client.ClearActions()
	return c
}

// writes returns the clientset's write actions as "verb resource[/sub] name".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "list", "watch", "get":
			continue
		}
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		name := ""
		switch a := a.(type) {
		case core.CreateAction: // updates too: both carry the object
			name = a.GetObject().(metav1.Object).GetName()
		case core.DeleteAction:
			name = a.GetName()
		case core.PatchAction:
			name = a.GetName()
		}
		out = append(out, a.GetVerb()+" "+res+" "+name)
	}
	return out
}

// stored returns the current objects from the fake clientset, to seed the
// next controller as if its informers had caught up.
func (f *fixture) stored(ctx context.Context) []runtime.Object {
	f.t.Helper()
	var out []runtime.Object
	add := func(list runtime.Object, err error) {
		items, xerr := meta.ExtractList(list)
		if err = errors.Join(err, xerr); err != nil {
			f.t.Fatalf("reading back stored objects: %v", err)
		}
		out = append(out, items...)
	}
	all := metav1.ListOptions{}
	add(f.client.CoreV1().Services("").List(ctx, all))
	add(f.client.CoreV1().Nodes().List(ctx, all))
	add(f.client.CoreV1().Pods(systemNS).List(ctx, all))
	add(f.client.AppsV1().Deployments(systemNS).List(ctx, all))
	add(f.client.AppsV1().DaemonSets(systemNS).List(ctx, all))
	add(f.client.PolicyV1().PodDisruptionBudgets(systemNS).List(ctx, all))
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fixture) service(ctx context.Context, ns, name string) *corev1.Service {
	f.t.Helper()
	s, err := f.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func newService(name string, opts ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeLoadBalancer,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func newNode(name, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		},
	}
}

func readyPod(svc *corev1.Service, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: placement.Name(svc.Namespace, svc.Name) + "-" + node, Labels: contract.ProxySelector(svc)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "proxy"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func key(s *corev1.Service) cache.ObjectName { return cache.MetaObjectToName(s) }

func TestSyncCreatesWorkloadAndStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	c := f.controller(ctx)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	name := placement.Name("shop", "web")
	// The finalizer comes with the annotations, in one update.
	want := []string{"create deployments " + name, "update services web", "update services/status web"}
	if got := f.writes(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes\n got %q\nwant %q", got, want)
	}
	got := f.service(ctx, "shop", "web")
	if !slices.Equal(got.Finalizers, []string{standardFinalizer}) {
		t.Errorf("finalizers %q, want the standard %q", got.Finalizers, standardFinalizer)
	}
	var ips []string
	for _, in := range got.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	if strings.Join(ips, ",") != "10.0.0.1,10.0.0.2" || got.Annotations[contract.AnnotationNodes] != "n1,n2" {
		t.Errorf("ingress %v, annotations %v", ips, got.Annotations)
	}
	d, err := f.client.AppsV1().Deployments(systemNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 2 {
		t.Fatalf("deployment %v, %v", d, err)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonProxyApplied) {
		t.Errorf("events %q, want one ProxyApplied", ev)
	}

	// Synced again with caches that caught up: the Deployment's budget,
	// owned by it; then nothing to write.
	f2 := newFixture(t, f.stored(ctx)...)
	c2 := f2.controller(ctx)
	if err := c2.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if w := f2.writes(); !slices.Equal(w, []string{"create poddisruptionbudgets " + name}) {
		t.Errorf("writes once the Deployment is cached %q, want its budget created", w)
	}
	b, err := f2.client.PolicyV1().PodDisruptionBudgets(systemNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil || len(b.OwnerReferences) != 1 || b.OwnerReferences[0].UID != d.UID || b.Spec.MaxUnavailable.IntVal != 1 {
		t.Fatalf("budget %v, %v; want maxUnavailable 1, owned by the Deployment", b, err)
	}
	fUnchanged := newFixture(t, f2.stored(ctx)...)
	if err := fUnchanged.controller(ctx).sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if w := fUnchanged.writes(); len(w) != 0 {
		t.Errorf("an unchanged Service caused writes %q", w)
	}
	if ev := fUnchanged.events(); len(ev) != 0 {
		t.Errorf("an unchanged Service caused events %q", ev)
	}

	// A port change updates the Deployment, in place.
	objs := f.stored(ctx)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Spec.Ports[0].Port = 8080
		}
	}
	f3 := newFixture(t, objs...)
	c3 := f3.controller(ctx)
	if err := c3.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if w := f3.writes(); len(w) == 0 || w[0] != "update deployments "+name {
		t.Errorf("writes after a port change %q, want the deployment updated first", w)
	}
}

// standardFinalizer is the name Kubernetes' own LoadBalancer e2e spec
// waits for, spelled out so that the tests pin it.
const standardFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// TestSyncRelease: a Service pulselb no longer serves loses its workload,
// and, when pulselb put the finalizer on it, pulselb's status and the
// finalizer. The standard finalizer is shared with other implementations:
// on a Service pulselb never wrote to it stays, and so does its status.
func TestSyncRelease(t *testing.T) {
	with := func(opts ...func(*corev1.Service)) func(*corev1.Service) {
		return func(s *corev1.Service) {
			for _, o := range opts {
				o(s)
			}
		}
	}
	finalizers := func(f ...string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Finalizers = f }
	}
	deleting := func(s *corev1.Service) { s.DeletionTimestamp = &metav1.Time{Time: testNow} }
	class := func(c string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(c) }
	}
	clusterIP := func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }
	// An address, which any implementation writes.
	addressed := func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
	}
	// What pulselb writes besides the address.
	marked := func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationNodes: "n1"}
		s.Status.Conditions = []metav1.Condition{{Type: status.ConditionHealthy, Status: metav1.ConditionTrue}}
	}
	released := []string{"delete deployments", "update services web"}
	clearedAndReleased := []string{"delete deployments", "update services/status web", "update services web"}
	untouched := []string{"delete deployments"}
	tests := []struct {
		name      string
		svc       *corev1.Service
		classOnly bool
		want      []string
		// finalizers the Service keeps; release clears status and
		// annotations exactly when it removes a finalizer.
		keeps []string
	}{
		{"deleted", newService("web", with(finalizers(standardFinalizer), deleting)), false, released, nil},
		{"deleted with the finalizer of an earlier version", newService("web", with(finalizers("example.com/keep", LegacyFinalizer), deleting)), false,
			released, []string{"example.com/keep"}},
		{"deleted, of pulselb's class, never published", newService("web", with(finalizers(standardFinalizer), class(contract.Class), deleting)), true,
			released, nil},
		{"class changed before pulselb released it", newService("web", with(finalizers(standardFinalizer), class("example.com/other"), addressed, marked)), false,
			clearedAndReleased, nil},
		{"class changed under the finalizer of an earlier version", newService("web", with(finalizers(LegacyFinalizer), class("example.com/other"), addressed, marked)), false,
			clearedAndReleased, nil},
		{"type changed", newService("web", with(finalizers(standardFinalizer), clusterIP, addressed, marked)), false, clearedAndReleased, nil},
		{"type changed under the finalizer of an earlier version", newService("web", with(finalizers(LegacyFinalizer), clusterIP)), false, released, nil},
		{"no class under --class-only", newService("web", with(finalizers(standardFinalizer), addressed, marked)), true, clearedAndReleased, nil},
		{"other class never served", newService("web", class("example.com/other")), false, untouched, nil},
		// The standard finalizer of another implementation.
		{"other class with its own finalizer", newService("web", with(finalizers(standardFinalizer), class("example.com/other"), addressed)), false,
			untouched, []string{standardFinalizer}},
		{"other class with its own finalizer, deleted", newService("web", with(finalizers(standardFinalizer), class("example.com/other"), addressed, deleting)), false,
			untouched, []string{standardFinalizer}},
		{"no class under --class-only, the default implementation's", newService("web", with(finalizers(standardFinalizer), addressed)), true,
			untouched, []string{standardFinalizer}},
		{"no class under --class-only, the default implementation's, deleted", newService("web", with(finalizers(standardFinalizer), addressed, deleting)), true,
			untouched, []string{standardFinalizer}},
		{"type changed from another class", newService("web", with(finalizers(standardFinalizer), clusterIP, addressed)), false,
			untouched, []string{standardFinalizer}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w, _ := placement.Desired(newService("web"), nil, placement.Config{Namespace: systemNS, Image: "x"})
			f := newFixture(t, tt.svc, w.Deployment)
			f.cfg.Services.ClassOnly = tt.classOnly
			c := f.controller(ctx)
			if err := c.sync(ctx, key(tt.svc)); err != nil {
				t.Fatal(err)
			}
			got := f.writes()
			for i := range got {
				got[i] = strings.TrimSuffix(got[i], " "+w.Name)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("writes\n got %q\nwant %q", got, tt.want)
			}
			s := f.service(ctx, "shop", "web")
			if !slices.Equal(s.Finalizers, tt.keeps) {
				t.Errorf("finalizers %q, want %q", s.Finalizers, tt.keeps)
			}
			if slices.Equal(tt.want, untouched) {
				if !equality.Semantic.DeepEqual(s, tt.svc) {
					t.Errorf("a Service that is not pulselb's was changed:\n got %+v\nwant %+v", s, tt.svc)
				}
				return
			}
			if tt.svc.DeletionTimestamp == nil && (len(s.Status.LoadBalancer.Ingress) != 0 || len(s.Status.Conditions) != 0) {
				t.Errorf("released Service keeps its status %+v", s.Status)
			}
			if _, ok := s.Annotations[contract.AnnotationNodes]; ok {
				t.Errorf("released Service keeps pulselb's annotations %v", s.Annotations)
			}
		})
	}
}

func TestSyncDeletedServiceRemovesWorkload(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, _ := placement.Desired(newService("web"), nil, placement.Config{Namespace: systemNS, Image: "x"})
	f := newFixture(t, w.Deployment)
	c := f.controller(ctx)
	if err := c.sync(ctx, cache.NewObjectName("shop", "web")); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); len(got) != 1 || got[0] != "delete deployments "+w.Name {
		t.Errorf("writes %q", got)
	}
}

func TestSyncInvalidAnnotation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationReplicas: "two"}
	})
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), newNode("n3", "10.0.0.3"))
	c := f.controller(ctx)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatalf("an invalid annotation must not be an error: %v", err)
	}
	var warning string
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning "+status.ReasonInvalidAnnotation) {
			warning = e
		}
	}
	if !strings.Contains(warning, contract.AnnotationReplicas) || !strings.Contains(warning, `"two"`) || !strings.Contains(warning, "using 2") {
		t.Errorf("warning %q does not name key, value and default", warning)
	}
	s := f.service(ctx, "shop", "web")
	var valid *metav1.Condition
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == status.ConditionConfigValid {
			valid = &s.Status.Conditions[i]
		}
	}
	if valid == nil || valid.Status != metav1.ConditionFalse {
		t.Errorf("ConfigValid %+v, want False", valid)
	}
	d, err := f.client.AppsV1().Deployments(systemNS).Get(ctx, placement.Name("shop", "web"), metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 2 {
		t.Errorf("deployment %v, %v: want the default 2 replicas", d, err)
	}
}

func TestSyncPortConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	web, api := newService("web"), newService("api")
	pending := readyPod(web, "")
	pending.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: corev1.ProtocolTCP}}
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."}}}
	holder := readyPod(api, "n1")
	holder.Spec.Containers[0].Ports = pending.Spec.Containers[0].Ports
	f := newFixture(t, web, newNode("n1", "10.0.0.1"), pending, holder)
	c := f.controller(ctx)
	if err := c.sync(ctx, key(web)); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning PortConflict") && strings.Contains(e, "TCP:80") && strings.Contains(e, "n1") && strings.Contains(e, "shop/api") {
			found = true
		}
	}
	if !found {
		t.Errorf("no PortConflict warning naming TCP:80, n1 and shop/api")
	}
}

func TestCollectOrphans(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := placement.Config{Namespace: systemNS, Image: "x"}
	kept, _ := placement.Desired(newService("kept"), nil, cfg)
	gone, _ := placement.Desired(newService("gone"), nil, cfg)
	moved, _ := placement.Desired(newService("moved", func(s *corev1.Service) { s.Annotations = map[string]string{contract.AnnotationProxyMode: "daemonset"} }), nil, cfg)
	foreign := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: "pulselb-controller", Labels: map[string]string{"app": "pulselb"}}}
	f := newFixture(t, newService("kept"), newService("moved", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }),
		kept.Deployment, gone.Deployment, moved.DaemonSet, foreign)
	c := f.controller(ctx)
	if err := c.collectOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.writes(), "\n")
	want := "delete deployments " + gone.Name + "\ndelete daemonsets " + moved.Name
	if got != want {
		t.Errorf("writes\n got %q\nwant %q", got, want)
	}
}

func TestSyncNodeLabel(t *testing.T) {
	external := newNode("ext", "10.0.0.1")
	external.Status.Addresses = append(external.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.1"})
	labelled := newNode("lost", "10.0.0.2")
	labelled.Labels[contract.LabelExternalIP] = "true"
	steady := external.DeepCopy()
	steady.Name = "steady"
	steady.Labels[contract.LabelExternalIP] = "true"
	tests := []struct {
		node *corev1.Node
		want string // "" for no write
	}{
		{external, `{"metadata":{"labels":{"pulselb.io/external-ip":"true"}}}`},
		{labelled, `{"metadata":{"labels":{"pulselb.io/external-ip":null}}}`},
		{steady, ""},
		{newNode("internal", "10.0.0.3"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.node.Name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t, tt.node)
			c := f.controller(ctx)
			if err := c.syncNode(ctx, tt.node.Name); err != nil {
				t.Fatal(err)
			}
			var got string
			for _, a := range f.client.Actions() {
				if p, ok := a.(core.PatchAction); ok {
					got = string(p.GetPatch())
				}
			}
			if got != tt.want {
				t.Errorf("patch %s, want %s", got, tt.want)
			}
		})
	}
}

// The controller's own label on a failed node queues no Service at once (the
// beacon verdict queued those served there); any other label change does.
func TestOwnNodeLabelQueuesLater(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	old := newNode("n1", "10.0.0.1")
	f := newFixture(t, svc, old)
	c := f.controller(ctx)
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Done(k)
		c.queue.Forget(k)
	}
	labelled := old.DeepCopy()
	labelled.Labels[contract.LabelUnhealthy] = "true"
	c.nodeChanged(old, labelled)
	if n := c.queue.Len(); n != 0 {
		t.Errorf("%d Services queued at once for the controller's own label, want 0 (later)", n)
	}
	zoned := old.DeepCopy()
	zoned.Labels["topology.kubernetes.io/zone"] = "b"
	c.nodeChanged(old, zoned)
	if n := c.queue.Len(); n != 1 {
		t.Errorf("%d Services queued for a zone label, want 1", n)
	}
}
