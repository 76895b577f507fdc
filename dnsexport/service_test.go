package dnsexport

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFromService(t *testing.T) {
	base := func(ann map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "192.0.2.1"}, {IP: "2001:db8::1"}, {Hostname: "lb.example.com"}}}},
		}
	}
	tests := []struct {
		name      string
		ann       map[string]string
		hostnames []string
		ttl       uint32
		errKeys   []string
	}{
		{name: "defaults", ttl: 0},
		{name: "all three hostname annotations, comma-separated, de-duplicated",
			ann: map[string]string{
				AnnotationHostname:                 "a.example.com, B.example.com.",
				AnnotationExternalDNSHostname:      "b.example.com",
				AnnotationExternalDNSAlphaHostname: "c.example.com,",
			},
			hostnames: []string{"a.example.com", "b.example.com", "c.example.com"}},
		{name: "ttl", ann: map[string]string{AnnotationTTL: "30"}, ttl: 30},
		{name: "ttl with s suffix", ann: map[string]string{AnnotationTTL: "60s"}, ttl: 60},
		{name: "ttl not a number", ann: map[string]string{AnnotationTTL: "soon"}, ttl: 0, errKeys: []string{AnnotationTTL}},
		{name: "ttl zero", ann: map[string]string{AnnotationTTL: "0"}, ttl: 0, errKeys: []string{AnnotationTTL}},
		{name: "ttl too large", ann: map[string]string{AnnotationTTL: "999999"}, ttl: 0, errKeys: []string{AnnotationTTL}},
		{name: "bad hostname skipped, others kept", ann: map[string]string{AnnotationHostname: "ok.example.com,bad..name"},
			hostnames: []string{"ok.example.com"}, ttl: 0, errKeys: []string{AnnotationHostname}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := FromService(base(tc.ann))
			if got.Namespace != "shop" || got.Name != "web" {
				t.Errorf("name = %s/%s", got.Namespace, got.Name)
			}
			if want := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}; !slices.Equal(got.IPs, want) {
				t.Errorf("IPs = %v, want %v", got.IPs, want)
			}
			if want := []Port{{"http", 80, "TCP"}, {"dns", 53, "UDP"}}; !slices.Equal(got.Ports, want) {
				t.Errorf("Ports = %v, want %v", got.Ports, want)
			}
			if !slices.Equal(got.Hostnames, tc.hostnames) {
				t.Errorf("Hostnames = %q, want %q", got.Hostnames, tc.hostnames)
			}
			if got.TTL != tc.ttl {
				t.Errorf("TTL = %d, want %d", got.TTL, tc.ttl)
			}
			var keys []string
			for _, err := range errs {
				var ae *AnnotationError
				if !errors.As(err, &ae) || !errors.Is(err, ErrInvalidAnnotation) {
					t.Fatalf("error %v is not an AnnotationError", err)
				}
				if ae.Value != tc.ann[ae.Key] || ae.Reason == "" {
					t.Errorf("error %v does not name the value and why", err)
				}
				keys = append(keys, ae.Key)
			}
			if !slices.Equal(keys, tc.errKeys) {
				t.Errorf("errors for %q, want %q (%v)", keys, tc.errKeys, errs)
			}
		})
	}
}
