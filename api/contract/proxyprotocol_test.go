package contract

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/probespec"
)

func TestParseProxyProtocol(t *testing.T) {
	https := corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}
	http := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	dns := corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}
	sctp := corev1.ServicePort{Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP}
	tcp := func(n int32) PortKey { return PortKey{corev1.ProtocolTCP, n} }
	tests := []struct {
		name    string
		ports   []corev1.ServicePort
		kv      []string
		want    map[PortKey]probespec.ProxyProtocol
		probes  map[int32]string // probe text by port
		problem string           // key of the one expected problem
		reason  string
	}{
		{"none", []corev1.ServicePort{http}, nil, nil, map[int32]string{80: "tcp"}, "", ""},
		{"every TCP port, not the UDP one", []corev1.ServicePort{http, https, dns}, []string{AnnotationProxyProtocol, "v2"},
			map[PortKey]probespec.ProxyProtocol{tcp(80): probespec.ProxyV2, tcp(443): probespec.ProxyV2},
			map[int32]string{80: "tcp", 443: "tcp", 53: "udp"}, "", ""},
		{"one port by name", []corev1.ServicePort{http, https}, []string{AnnotationProxyProtocolPrefix + "https", "v1"},
			map[PortKey]probespec.ProxyProtocol{tcp(443): probespec.ProxyV1}, map[int32]string{80: "tcp", 443: "tcp"}, "", ""},
		{"one port exempt by number", []corev1.ServicePort{http, https}, []string{AnnotationProxyProtocol, "v1", AnnotationProxyProtocolPrefix + "80", "none"},
			map[PortKey]probespec.ProxyProtocol{tcp(443): probespec.ProxyV1}, map[int32]string{80: "tcp"}, "", ""},
		{"per port wins", []corev1.ServicePort{http, https}, []string{AnnotationProxyProtocol, "v1", AnnotationProxyProtocolPrefix + "https", "v2"},
			map[PortKey]probespec.ProxyProtocol{tcp(80): probespec.ProxyV1, tcp(443): probespec.ProxyV2}, nil, "", ""},
		// The probes pass through the proxies, which write the header.
		{"the port's probe sends no header of its own", []corev1.ServicePort{https}, []string{AnnotationProxyProtocol, "v2", AnnotationProbe, "http path=/healthz"},
			map[PortKey]probespec.ProxyProtocol{tcp(443): probespec.ProxyV2}, map[int32]string{443: "http path=/healthz"}, "", ""},
		{"a probe's own header would be a second one", []corev1.ServicePort{http, https}, []string{AnnotationProxyProtocolPrefix + "https", "v2", AnnotationProbePrefix + "https", "tcp proxy-protocol=v1"},
			map[PortKey]probespec.ProxyProtocol{tcp(443): probespec.ProxyV2}, map[int32]string{443: "tcp", 80: "tcp"},
			AnnotationProbePrefix + "https", "the probe's own proxy-protocol= would reach the backend as a second header"},
		{"a port without the header keeps a probe's own", []corev1.ServicePort{http}, []string{AnnotationProbe, "tcp proxy-protocol=v1"},
			nil, map[int32]string{80: "tcp proxy-protocol=v1"}, "", ""},
		{"bad value", []corev1.ServicePort{http}, []string{AnnotationProxyProtocol, "2"}, nil, map[int32]string{80: "tcp"},
			AnnotationProxyProtocol, "want v1 or v2"},
		{"bad per-port value", []corev1.ServicePort{http}, []string{AnnotationProxyProtocolPrefix + "http", "yes"}, nil, nil,
			AnnotationProxyProtocolPrefix + "http", "want v1, v2 or none"},
		{"a UDP port", []corev1.ServicePort{http, dns}, []string{AnnotationProxyProtocolPrefix + "dns", "v2"}, nil, nil,
			AnnotationProxyProtocolPrefix + "dns", "the PROXY protocol is for TCP ports only"},
		{"a UDP-only Service", []corev1.ServicePort{dns}, []string{AnnotationProxyProtocol, "v2"}, nil, nil,
			AnnotationProxyProtocol, "the Service has no TCP port"},
		{"an unknown port", []corev1.ServicePort{http}, []string{AnnotationProxyProtocolPrefix + "8443", "v2"}, nil, nil,
			AnnotationProxyProtocolPrefix + "8443", "no port named or numbered"},
		{"an SCTP port", []corev1.ServicePort{http, sctp}, []string{AnnotationProxyProtocolPrefix + "sig", "v2"}, nil, nil,
			AnnotationProxyProtocolPrefix + "sig", "neither forwarded nor probed"},
		{"a dns probe of a header port", []corev1.ServicePort{{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}},
			[]string{AnnotationProxyProtocol, "v2", AnnotationProbe, "dns name=example.org"},
			map[PortKey]probespec.ProxyProtocol{tcp(53): probespec.ProxyV2}, map[int32]string{53: "dns name=example.org"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := service(annotate(tt.kv...))
			svc.Spec.Ports = tt.ports
			s, problems := Parse(svc)
			if !maps.Equal(s.ProxyProtocol, tt.want) {
				t.Errorf("ProxyProtocol %v, want %v", s.ProxyProtocol, tt.want)
			}
			for port, text := range tt.probes {
				if got := probeText(s, port); got != text {
					t.Errorf("probe of port %d %q, want %q", port, got, text)
				}
			}
			if tt.problem == "" {
				if len(problems) > 0 {
					t.Errorf("problems %q, want none", problems)
				}
				return
			}
			if len(problems) != 1 || problems[0].Key != tt.problem || !strings.Contains(problems[0].Reason, tt.reason) || !problems[0].IsAnnotation() {
				t.Fatalf("problems %q, want one for %s with reason containing %q", problems, tt.problem, tt.reason)
			}
		})
	}
}

func TestDataPaths(t *testing.T) {
	svc := service(annotate(AnnotationProxyProtocolPrefix+"http", "v2"))
	s, _ := Parse(svc)
	want := "the userspace relay carries TCP:80 with a PROXY protocol v2 header; iptables rules carry UDP:53 (the relay, when a proxy runs in userspace mode)"
	if got := s.DataPaths(svc); got != want {
		t.Errorf("DataPaths %q, want %q", got, want)
	}
	plain := service()
	s, _ = Parse(plain)
	if got := s.DataPaths(plain); got != "" {
		t.Errorf("DataPaths without the annotation %q, want none", got)
	}
}
