package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/placement"
)

// endpoint is one endpoint of a test EndpointSlice.
type endpoint struct {
	node               string
	ready, terminating bool
	// serving: still serving while terminating (Ready is false then).
	serving bool
}

func endpointSlice(svc *corev1.Service, eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{"10.244.0." + string(rune('1'+i))},
			NodeName:  ptr.To(ep.node),
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(ep.ready), Serving: ptr.To(ep.ready || ep.serving), Terminating: ptr.To(ep.terminating)},
		})
	}
	return s
}

// TestSyncLocalTrafficPolicy: an externalTrafficPolicy Local Service is
// published only on proxy nodes with a ready local endpoint, and a
// Deployment proxy left on a node whose backends went away is deleted so
// that its replacement is scheduled next to a backend.
func TestSyncLocalTrafficPolicy(t *testing.T) {
	local := func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.Selector = map[string]string{"app": "web"}
		s.Finalizers = []string{Finalizer}
	}
	tests := []struct {
		name        string
		opts        []func(*corev1.Service)
		endpoints   []endpoint
		wantDeleted []string // proxy pods deleted, by node
		wantIngress []string
	}{
		{name: "backend on n2: proxy on n1 moves", opts: []func(*corev1.Service){local},
			endpoints:   []endpoint{{node: "n2", ready: true}},
			wantDeleted: []string{"n1"}, wantIngress: []string{"10.0.0.2"}},
		{name: "backends on both", opts: []func(*corev1.Service){local},
			endpoints:   []endpoint{{node: "n1", ready: true}, {node: "n2", ready: true}},
			wantIngress: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "starting backend keeps its proxy, not published", opts: []func(*corev1.Service){local},
			endpoints:   []endpoint{{node: "n1", ready: false}, {node: "n2", ready: true}},
			wantIngress: []string{"10.0.0.2"}},
		{name: "terminating backend does not hold its proxy", opts: []func(*corev1.Service){local},
			endpoints:   []endpoint{{node: "n1", terminating: true}, {node: "n2", ready: false}},
			wantDeleted: []string{"n1"}},
		{name: "terminating backend still serving keeps its proxy and its address, as kube-proxy serves through it",
			opts:        []func(*corev1.Service){local},
			endpoints:   []endpoint{{node: "n1", terminating: true, serving: true}, {node: "n2", ready: true}},
			wantIngress: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "no endpoint anywhere: nothing moves", opts: []func(*corev1.Service){local}},
		{name: "Cluster policy: endpoints do not matter",
			opts:        []func(*corev1.Service){func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }},
			endpoints:   []endpoint{{node: "n2", ready: true}},
			wantIngress: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "Local without a selector: proxies stay", opts: []func(*corev1.Service){local, func(s *corev1.Service) { s.Spec.Selector = nil }},
			endpoints:   []endpoint{{node: "n2", ready: true}},
			wantIngress: []string{"10.0.0.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := newService("web", tt.opts...)
			p1, p2 := readyPod(svc, "n1"), readyPod(svc, "n2")
			p1.UID, p2.UID = types.UID("uid-p1"), types.UID("uid-p2")
			f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), p1, p2)
			c := f.controller(ctx)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := idx.Add(endpointSlice(svc, tt.endpoints...)); err != nil {
				t.Fatal(err)
			}
			c.slices = discoverylisters.NewEndpointSliceLister(idx)

			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			deleted := deletedProxyPods(f, svc)
			if !slices.Equal(deleted, tt.wantDeleted) {
				t.Errorf("deleted proxy pods on %q, want %q (writes %q)", deleted, tt.wantDeleted, f.writes())
			}
			var ingress []string
			for _, in := range f.service(ctx, "shop", "web").Status.LoadBalancer.Ingress {
				ingress = append(ingress, in.IP)
			}
			if tt.wantIngress != nil && !slices.Equal(ingress, tt.wantIngress) {
				t.Errorf("ingress %q, want %q", ingress, tt.wantIngress)
			}
		})
	}
}

// TestSyncLocalEndpointGap: a backend replaced on its node (a DaemonSet's
// rolling update deletes the old pod, then creates the new one) leaves the
// node without an endpoint for a few seconds. The node's proxy, and the
// address clients hold, stay through such a gap (LocalEndpointGrace); a node
// whose endpoint does not come back loses its proxy once the grace is over,
// and a node that never had an endpoint loses it at once.
func TestSyncLocalEndpointGap(t *testing.T) {
	local := func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.Selector = map[string]string{"app": "web"}
		s.Finalizers = []string{Finalizer}
	}
	both := []endpoint{{node: "n1", ready: true}, {node: "n2", ready: true}}
	// step is one sync at testNow+at with these endpoints.
	type step struct {
		at          time.Duration
		endpoints   []endpoint
		wantDeleted []string // proxy pods deleted by this sync, by node
	}
	tests := []struct {
		name      string
		published string // the Service's published nodes before the first sync
		steps     []step
	}{
		{name: "the replacement comes within the grace: the proxy stays", steps: []step{
			{at: 0, endpoints: both},
			{at: time.Second, endpoints: []endpoint{{node: "n2", ready: true}, {node: "n3", ready: true}}},
			{at: 3 * time.Second, endpoints: []endpoint{{node: "n1"}, {node: "n2", ready: true}, {node: "n3", ready: true}}},
			{at: 5 * time.Second, endpoints: []endpoint{{node: "n1", ready: true}, {node: "n2", ready: true}, {node: "n3", ready: true}}},
			{at: time.Second + LocalEndpointGrace + time.Minute, endpoints: []endpoint{{node: "n1", ready: true}, {node: "n2", ready: true}}},
		}},
		{name: "no endpoint comes back: the proxy moves once the grace is over", steps: []step{
			{at: 0, endpoints: both},
			{at: time.Second, endpoints: []endpoint{{node: "n2", ready: true}, {node: "n3", ready: true}}},
			{at: time.Second + LocalEndpointGrace - time.Millisecond, endpoints: []endpoint{{node: "n2", ready: true}, {node: "n3", ready: true}}},
			{at: time.Second + LocalEndpointGrace, endpoints: []endpoint{{node: "n2", ready: true}, {node: "n3", ready: true}}, wantDeleted: []string{"n1"}},
		}},
		{name: "the grace starts again with each gap", steps: []step{
			{at: 0, endpoints: both},
			{at: time.Second, endpoints: []endpoint{{node: "n2", ready: true}}},
			{at: 2 * time.Second, endpoints: both},
			{at: LocalEndpointGrace, endpoints: []endpoint{{node: "n2", ready: true}}},
			{at: 2*LocalEndpointGrace - time.Millisecond, endpoints: []endpoint{{node: "n2", ready: true}}},
			{at: 2 * LocalEndpointGrace, endpoints: []endpoint{{node: "n2", ready: true}}, wantDeleted: []string{"n1"}},
		}},
		{name: "a terminating backend that no longer serves starts the grace", steps: []step{
			{at: 0, endpoints: both},
			{at: time.Second, endpoints: []endpoint{{node: "n1", terminating: true}, {node: "n2", ready: true}}},
			{at: time.Second + LocalEndpointGrace, endpoints: []endpoint{{node: "n1", terminating: true}, {node: "n2", ready: true}}, wantDeleted: []string{"n1"}},
		}},
		{name: "a node that never had an endpoint loses its proxy at once", steps: []step{
			{at: 0, endpoints: []endpoint{{node: "n2", ready: true}}, wantDeleted: []string{"n1"}},
		}},
		{name: "a node published before the controller started had an endpoint then", published: "n1,n2", steps: []step{
			{at: 0, endpoints: []endpoint{{node: "n2", ready: true}}},
			{at: LocalEndpointGrace, endpoints: []endpoint{{node: "n2", ready: true}}, wantDeleted: []string{"n1"}},
		}},
		{name: "no endpoint anywhere: nothing moves, even past the grace", steps: []step{
			{at: 0, endpoints: both},
			{at: time.Second},
			{at: time.Hour},
			{at: time.Hour + time.Second, endpoints: []endpoint{{node: "n2", ready: true}}, wantDeleted: []string{"n1"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := newService("web", local)
			if tt.published != "" {
				svc = published(svc, tt.published)
			}
			p1, p2 := readyPod(svc, "n1"), readyPod(svc, "n2")
			p1.UID, p2.UID = types.UID("uid-p1"), types.UID("uid-p2")
			f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), newNode("n3", "10.0.0.3"), p1, p2)
			c := f.controller(ctx)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			c.slices = discoverylisters.NewEndpointSliceLister(idx)
			for i, s := range tt.steps {
				if err := idx.Update(endpointSlice(svc, s.endpoints...)); err != nil {
					t.Fatal(err)
				}
				now := testNow.Add(s.at)
				c.now = func() time.Time { return now }
				f.client.ClearActions()
				if err := c.sync(ctx, key(svc)); err != nil {
					t.Fatal(err)
				}
				deleted := deletedProxyPods(f, svc)
				if !slices.Equal(deleted, s.wantDeleted) {
					t.Errorf("step %d (+%s): deleted proxy pods on %q, want %q", i, s.at, deleted, s.wantDeleted)
				}
			}
		})
	}
}

// deletedProxyPods returns the proxy pods of svc that f's client deleted,
// each without the workload's name prefix.
func deletedProxyPods(f *fixture, svc *corev1.Service) []string {
	var deleted []string
	for _, w := range f.writes() {
		if name, ok := strings.CutPrefix(w, "delete pods "); ok {
			deleted = append(deleted, strings.TrimPrefix(name, placement.Name(svc.Namespace, svc.Name)+"-"))
		}
	}
	return deleted
}
