package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestProbeSpec(t *testing.T) {
	tcp := corev1.ServicePort{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP}
	udp := corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}
	tests := []struct {
		name  string
		annot map[string]string
		port  corev1.ServicePort
		want  string
	}{
		{"default tcp", nil, tcp, "tcp"},
		{"default udp", nil, udp, "udp"},
		{"service-level", map[string]string{AnnotationProbe: "http path=/healthz"}, tcp, "http path=/healthz"},
		{"service-level cannot check udp", map[string]string{AnnotationProbe: "http"}, udp, "udp"},
		{"by name", map[string]string{AnnotationProbe: "http", AnnotationProbePrefix + "dns": "dns name=example.org"}, udp, "dns name=example.org"},
		{"by number", map[string]string{AnnotationProbePrefix + "80": "tls"}, tcp, "tls"},
		{"invalid falls back", map[string]string{AnnotationProbe: "htp"}, tcp, "tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annot},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{tcp, udp}}}
			s, _ := Parse(svc)
			if got := ProbeSpec(s, tt.port); got != tt.want {
				t.Errorf("ProbeSpec = %q, want %q", got, tt.want)
			}
		})
	}
}
