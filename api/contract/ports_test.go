package contract

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServed(t *testing.T) {
	tests := []struct {
		port   corev1.ServicePort
		served bool
	}{
		{corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolTCP}, true},
		{corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP}, true},
		{corev1.ServicePort{Port: 8080}, true}, // no protocol is TCP
		{corev1.ServicePort{Port: 2905, Protocol: corev1.ProtocolSCTP}, false},
		{corev1.ServicePort{Port: 0, Protocol: corev1.ProtocolTCP}, false},
		{corev1.ServicePort{Port: 65536, Protocol: corev1.ProtocolUDP}, false},
	}
	for _, tt := range tests {
		reason := UnservedReason(tt.port)
		if got := Served(tt.port); got != tt.served || (reason == "") != tt.served {
			t.Errorf("%s/%d: Served %t, reason %q; want served %t", tt.port.Protocol, tt.port.Port, got, reason, tt.served)
		}
	}
}

// TestSCTPNotProbed: a Service's SCTP port gets no probe, not even the
// default tcp one, so the probers never judge it; a probe annotation for
// it is a Problem that says the port is not served.
func TestSCTPNotProbed(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			AnnotationProbe: "tcp", AnnotationProbePrefix + "sig": "dns name=example.org", AnnotationProbePrefix + "2906": "tcp"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP},
			{Port: 2906, Protocol: corev1.ProtocolSCTP},
		}},
	}
	s, problems := Parse(svc)
	var probed []PortKey
	for _, p := range s.Probes {
		probed = append(probed, p.Port)
	}
	if want := []PortKey{{corev1.ProtocolTCP, 80}}; !slices.Equal(probed, want) {
		t.Errorf("probed ports %v, want only %v", probed, want)
	}
	if _, ok := s.Probe(PortKey{corev1.ProtocolSCTP, 2905}); ok {
		t.Errorf("Probe(SCTP/2905) found a probe")
	}
	if got := ServedPorts(svc); len(got) != 1 || got[0].Port != 80 {
		t.Errorf("ServedPorts = %v, want port 80 only", got)
	}
	var keys []string
	for _, p := range problems {
		keys = append(keys, p.Key)
		if !strings.Contains(p.Reason, "SCTP port is neither forwarded nor probed") {
			t.Errorf("problem %q does not say that the SCTP port is not served", p)
		}
	}
	if want := []string{AnnotationProbePrefix + "2906", AnnotationProbePrefix + "sig"}; !slices.Equal(keys, want) {
		t.Errorf("problems %v, want keys %v", problems, want)
	}
}
