package dnsexport

import (
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pulselb/pulselb/api/contract"
)

func endpointService(ann map[string]string, ips ...string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-1", Annotations: ann},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

func TestDesiredEndpoint(t *testing.T) {
	svc := endpointService(map[string]string{contract.AnnotationHostname: "web.example.com,www.example.com", contract.AnnotationDNSTTL: "30"},
		"192.0.2.2", "192.0.2.1", "2001:db8::1")
	u := DesiredEndpoint(svc, 0)
	if u == nil {
		t.Fatal("no DNSEndpoint")
	}
	want := []any{
		map[string]any{"dnsName": "web.example.com", "recordType": "A", "targets": []any{"192.0.2.1", "192.0.2.2"}, "recordTTL": int64(30)},
		map[string]any{"dnsName": "web.example.com", "recordType": "AAAA", "targets": []any{"2001:db8::1"}, "recordTTL": int64(30)},
		map[string]any{"dnsName": "www.example.com", "recordType": "A", "targets": []any{"192.0.2.1", "192.0.2.2"}, "recordTTL": int64(30)},
		map[string]any{"dnsName": "www.example.com", "recordType": "AAAA", "targets": []any{"2001:db8::1"}, "recordTTL": int64(30)},
	}
	got, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("endpoints =\n%v\nwant\n%v", got, want)
	}
	refs := u.GetOwnerReferences()
	if len(refs) != 1 || refs[0].Kind != "Service" || refs[0].UID != "uid-1" || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references %v, want the Service as controller", refs)
	}
	if u.GetNamespace() != "shop" || u.GetName() != "web" || u.GetKind() != "DNSEndpoint" || u.GetAPIVersion() != "externaldns.k8s.io/v1alpha1" {
		t.Errorf("object %s %s/%s", u.GetAPIVersion(), u.GetNamespace(), u.GetName())
	}
	// The object must survive a JSON round trip unchanged, as the API
	// server stores it.
	if _, err := runtime.DefaultUnstructuredConverter.ToUnstructured(u); err != nil {
		t.Errorf("not convertible: %v", err)
	}
	dflt := DesiredEndpoint(endpointService(map[string]string{contract.AnnotationHostname: "a.example.com"}, "192.0.2.1"), 60)
	if eps, _, _ := unstructured.NestedSlice(dflt.Object, "spec", "endpoints"); eps[0].(map[string]any)["recordTTL"] != int64(60) {
		t.Errorf("recordTTL without annotation = %v, want the default 60", eps[0].(map[string]any)["recordTTL"])
	}
	if DesiredEndpoint(endpointService(nil, "192.0.2.1"), 0) != nil {
		t.Error("DNSEndpoint without hostnames")
	}
	if DesiredEndpoint(endpointService(map[string]string{contract.AnnotationHostname: "a.example.com"}), 0) != nil {
		t.Error("DNSEndpoint without IPs")
	}
}

func TestEndpointWriterSync(t *testing.T) {
	ann := map[string]string{contract.AnnotationHostname: "web.example.com"}
	current := func(mut func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := DesiredEndpoint(endpointService(ann, "192.0.2.1"), 0)
		u.SetResourceVersion("7")
		u.SetUID("ep-uid")
		if mut != nil {
			mut(u)
		}
		return u
	}
	tests := []struct {
		name     string
		existing *unstructured.Unstructured
		svc      *corev1.Service
		action   EndpointAction
		writes   []string
		err      error
		targets  []any
	}{
		{name: "create", svc: endpointService(ann, "192.0.2.1"), action: EndpointCreate, writes: []string{"create"}, targets: []any{"192.0.2.1"}},
		{name: "unchanged: no write", existing: current(nil), svc: endpointService(ann, "192.0.2.1"), action: EndpointNone, targets: []any{"192.0.2.1"}},
		{name: "new healthy set: update", existing: current(nil), svc: endpointService(ann, "192.0.2.1", "192.0.2.3"),
			action: EndpointUpdate, writes: []string{"update"}, targets: []any{"192.0.2.1", "192.0.2.3"}},
		{name: "other labels are kept on update", existing: current(func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{LabelManagedBy: managedBy, "team": "a"})
		}), svc: endpointService(ann, "192.0.2.9"), action: EndpointUpdate, writes: []string{"update"}, targets: []any{"192.0.2.9"}},
		{name: "hostnames removed: delete", existing: current(nil), svc: endpointService(nil, "192.0.2.1"), action: EndpointDelete, writes: []string{"delete"}},
		{name: "no healthy IPs: delete", existing: current(nil), svc: endpointService(ann), action: EndpointDelete, writes: []string{"delete"}},
		{name: "nothing wanted, nothing there", svc: endpointService(nil), action: EndpointNone},
		{name: "someone else's object is left alone", existing: current(func(u *unstructured.Unstructured) { u.SetLabels(nil) }),
			svc: endpointService(ann, "192.0.2.5"), action: EndpointNone, err: ErrNotManaged, targets: []any{"192.0.2.1"}},
		{name: "someone else's object is not deleted", existing: current(func(u *unstructured.Unstructured) { u.SetLabels(nil) }),
			svc: endpointService(nil), action: EndpointNone, targets: []any{"192.0.2.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{DNSEndpointResource: "DNSEndpointList"}, objs...)
			w := NewEndpointWriter(client, 0)
			action, err := w.Sync(t.Context(), tc.svc)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Sync error %v, want %v", err, tc.err)
			}
			if action != tc.action {
				t.Errorf("action %s, want %s", action, tc.action)
			}
			var writes []string
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					writes = append(writes, a.GetVerb())
				}
			}
			if !reflect.DeepEqual(writes, tc.writes) {
				t.Errorf("writes %v, want %v", writes, tc.writes)
			}
			got, err := client.Resource(DNSEndpointResource).Namespace("shop").Get(t.Context(), "web", metav1.GetOptions{})
			if tc.targets == nil {
				if err == nil {
					t.Errorf("DNSEndpoint still exists: %v", got.Object)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eps, _, _ := unstructured.NestedSlice(got.Object, "spec", "endpoints")
			if len(eps) != 1 || !reflect.DeepEqual(eps[0].(map[string]any)["targets"], tc.targets) {
				t.Errorf("endpoints %v, want targets %v", eps, tc.targets)
			}
			if tc.name == "other labels are kept on update" && got.GetLabels()["team"] != "a" {
				t.Errorf("labels %v lost team=a", got.GetLabels())
			}
			// A second Sync is a no-op: only the difference is written.
			before := len(client.Actions())
			if tc.err == nil {
				if a, err := w.Sync(t.Context(), tc.svc); err != nil || a != EndpointNone {
					t.Errorf("second Sync: %s, %v", a, err)
				}
				for _, a := range client.Actions()[before:] {
					if _, ok := a.(k8stesting.GetAction); !ok {
						t.Errorf("second Sync wrote: %v", a)
					}
				}
			}
		})
	}
}
