package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/status"
)

// fakeDNSEndpoints records the calls a Controller makes to its
// DNSEndpointWriter and returns err from each.
type fakeDNSEndpoints struct {
	mu    sync.Mutex
	err   error
	calls []string // "sync ns/name ip,ip" or "forget ns/name"
}

func (f *fakeDNSEndpoints) Sync(_ context.Context, svc *corev1.Service) (dnsexport.EndpointAction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("sync %s/%s %s", svc.Namespace, svc.Name, strings.Join(ingressIPs(svc), ",")))
	return dnsexport.EndpointNone, f.err
}

func (f *fakeDNSEndpoints) Forget(_ context.Context, namespace, name string) (dnsexport.EndpointAction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "forget "+namespace+"/"+name)
	return dnsexport.EndpointNone, f.err
}

func TestSyncDNSEndpoints(t *testing.T) {
	served := func(svc *corev1.Service) []runtime.Object {
		return []runtime.Object{svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2")}
	}
	deleting := func(s *corev1.Service) {
		s.Finalizers = []string{Finalizer}
		s.DeletionTimestamp = &metav1.Time{Time: testNow}
	}
	// Served by pulselb, then moved to another class (through another
	// type) before pulselb released it: its annotations are still there.
	otherClass := func(s *corev1.Service) {
		s.Finalizers = []string{Finalizer}
		s.Spec.LoadBalancerClass = ptr.To("example.com/other")
		s.Annotations = map[string]string{contract.AnnotationNodes: "n1"}
	}
	notOurs := func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") }
	apiErr := errors.New("connection refused")

	tests := []struct {
		name      string
		objects   []runtime.Object
		writerErr error
		calls     []string
		wantErr   error  // nil: sync succeeds
		event     string // reason of an expected Warning Event
		finalizer bool   // the Service keeps its finalizer
	}{
		{name: "served: synced with the status just written", objects: served(newService("web")),
			calls: []string{"sync shop/web 10.0.0.1,10.0.0.2"}, finalizer: true},
		{name: "deleted: forgotten", objects: []runtime.Object{newService("web", deleting)},
			calls: []string{"forget shop/web"}},
		{name: "class changed: forgotten", objects: []runtime.Object{newService("web", otherClass)},
			calls: []string{"forget shop/web"}},
		{name: "never served: not looked up", objects: []runtime.Object{newService("web", notOurs)}},
		{name: "someone else's DNSEndpoint: Warning, no retry", objects: served(newService("web")),
			writerErr: fmt.Errorf("shop/web: %w", dnsexport.ErrNotManaged),
			calls:     []string{"sync shop/web 10.0.0.1,10.0.0.2"}, event: ReasonDNSEndpointConflict, finalizer: true},
		{name: "API error on sync: retried", objects: served(newService("web")), writerErr: apiErr,
			calls: []string{"sync shop/web 10.0.0.1,10.0.0.2"}, wantErr: apiErr, finalizer: true},
		{name: "API error on forget: retried, finalizer kept", objects: []runtime.Object{newService("web", otherClass)}, writerErr: apiErr,
			calls: []string{"forget shop/web"}, wantErr: apiErr, finalizer: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			writer := &fakeDNSEndpoints{err: tt.writerErr}
			f := newFixture(t, tt.objects...)
			f.cfg.DNSEndpoints = writer
			c := f.controller(ctx)
			err := c.sync(ctx, key(newService("web")))
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("sync: %v", err)
			case !errors.Is(err, tt.wantErr):
				t.Fatalf("sync error %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(writer.calls, tt.calls) {
				t.Errorf("writer calls %q, want %q", writer.calls, tt.calls)
			}
			events := f.events()
			if got := hasEvent(events, ReasonDNSEndpointConflict); got != (tt.event != "") {
				t.Errorf("events %q: DNSEndpointConflict %t, want %t", events, got, tt.event != "")
			}
			for _, e := range events {
				if strings.Contains(e, ReasonDNSEndpointConflict) &&
					(!strings.HasPrefix(e, corev1.EventTypeWarning+" ") || !strings.Contains(e, "shop/web") || !strings.Contains(e, dnsexport.LabelManagedBy)) {
					t.Errorf("event %q: want a Warning naming the DNSEndpoint and the label", e)
				}
			}
			if tt.objects[0].(*corev1.Service).DeletionTimestamp != nil {
				return // the fake clientset keeps no deleting Services
			}
			if got := hasFinalizer(f.service(ctx, "shop", "web")); got != tt.finalizer {
				t.Errorf("finalizer %t, want %t", got, tt.finalizer)
			}
		})
	}

	// Status already equal: no Service writes, and the DNSEndpoint is
	// still synced from it (it may be missing or stale).
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, served(newService("web"))...)
	c := f.controller(ctx)
	if err := c.sync(ctx, key(newService("web"))); err != nil {
		t.Fatal(err)
	}
	writer := &fakeDNSEndpoints{}
	f2 := newFixture(t, f.stored(ctx)...)
	f2.cfg.DNSEndpoints = writer
	c2 := f2.controller(ctx)
	if err := c2.sync(ctx, key(newService("web"))); err != nil {
		t.Fatal(err)
	}
	if w := slices.DeleteFunc(f2.writes(), func(w string) bool { return !strings.Contains(w, " services") }); len(w) != 0 {
		t.Errorf("an unchanged Service caused writes %q", w)
	}
	if want := []string{"sync shop/web 10.0.0.1,10.0.0.2"}; !slices.Equal(writer.calls, want) {
		t.Errorf("writer calls %q, want %q", writer.calls, want)
	}
}

// TestSyncDNSEndpointObject runs the real dnsexport.EndpointWriter against
// a fake dynamic client: what external-dns reads follows the status.
func TestSyncDNSEndpointObject(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationHostname: "web.example.com"}
	})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{dnsexport.DNSEndpointResource: "DNSEndpointList"})
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	f.cfg.DNSEndpoints = dnsexport.NewEndpointWriter(dyn, 30)
	c := f.controller(ctx)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	ep, err := dyn.Resource(dnsexport.DNSEndpointResource).Namespace("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no DNSEndpoint after sync: %v", err)
	}
	eps, _, _ := unstructured.NestedSlice(ep.Object, "spec", "endpoints")
	want := []any{map[string]any{"dnsName": "web.example.com", "recordType": "A", "targets": []any{"10.0.0.1", "10.0.0.2"}, "recordTTL": int64(30)}}
	if !reflect.DeepEqual(eps, want) {
		t.Errorf("endpoints %v, want %v", eps, want)
	}

	// Deleted: the DNSEndpoint goes before the finalizer.
	objs := f.stored(ctx)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.DeletionTimestamp = &metav1.Time{Time: testNow}
		}
	}
	f2 := newFixture(t, objs...)
	f2.cfg.DNSEndpoints = f.cfg.DNSEndpoints
	c2 := f2.controller(ctx)
	if err := c2.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(dnsexport.DNSEndpointResource).Namespace("shop").Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Error("DNSEndpoint still exists after the Service was released")
	}
}

// TestSyncInvalidDNSTTL: a TTL dnsexport will not use is reported by the
// leader like every other annotation.
func TestSyncInvalidDNSTTL(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationDNSTTL: "0"}
	})
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"))
	c := f.controller(ctx)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatalf("an invalid annotation must not be an error: %v", err)
	}
	var found bool
	for _, e := range f.events() {
		found = found || strings.HasPrefix(e, "Warning "+status.ReasonInvalidAnnotation) && strings.Contains(e, contract.AnnotationDNSTTL)
	}
	if !found {
		t.Errorf("no InvalidAnnotation Warning naming %s", contract.AnnotationDNSTTL)
	}
}
