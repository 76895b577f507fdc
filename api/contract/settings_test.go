package contract

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		kv      []string
		check   func(s Settings) bool
		problem string // key of the one expected problem; "" for none
		reason  string // part of its reason
	}{
		{"defaults", nil, func(s Settings) bool {
			return s.Mode == ModeDeployment && s.Replicas == 2 && s.AddressType == AddressAuto && s.ProbeInterval == time.Second &&
				s.ProbeTimeout == 0 && s.Rise == 2 && s.Fall == 2 && s.PublishWhen == PublishAllPorts && s.AllDown == AllDownPublishAll && s.DNSTTL == 0 &&
				s.ExternalVantages == ExternalAdvisory
		}, "", ""},
		{"proxy-mode", []string{AnnotationProxyMode, "daemonset"}, func(s Settings) bool { return s.Mode == ModeDaemonSet }, "", ""},
		{"bad proxy-mode", []string{AnnotationProxyMode, "DaemonSet"}, func(s Settings) bool { return s.Mode == ModeDeployment }, AnnotationProxyMode, "deployment or daemonset"},
		{"replicas", []string{AnnotationReplicas, "3"}, func(s Settings) bool { return s.Replicas == 3 }, "", ""},
		{"zero replicas", []string{AnnotationReplicas, "0"}, func(s Settings) bool { return s.Replicas == 2 }, AnnotationReplicas, "1 to 1000"},
		{"node-selector", []string{AnnotationNodeSelector, "edge"}, func(s Settings) bool { return len(s.NodeSelector) == 1 }, "", ""},
		{"empty node-selector", []string{AnnotationNodeSelector, " "}, func(s Settings) bool { return s.NodeSelector == nil }, AnnotationNodeSelector, "empty"},
		{"address-type", []string{AnnotationAddressType, "both"}, func(s Settings) bool { return s.AddressType == AddressBoth }, "", ""},
		{"bad address-type", []string{AnnotationAddressType, "public"}, func(s Settings) bool { return s.AddressType == AddressAuto }, AnnotationAddressType, "auto, external, internal, both"},
		{"probe", []string{AnnotationProbe, "http path=/healthz"}, func(s Settings) bool { return probeText(s, 80) == "http path=/healthz" && probeText(s, 53) == "udp" }, "", ""},
		{"bad probe", []string{AnnotationProbe, "smtp"}, func(s Settings) bool { return probeText(s, 80) == "tcp" }, AnnotationProbe, ""},
		{"probe by port name", []string{AnnotationProbePrefix + "dns", "dns name=example.org"}, func(s Settings) bool { return probeText(s, 53) == "dns name=example.org" }, "", ""},
		{"probe by port number", []string{AnnotationProbePrefix + "80", "http interval=3s"}, func(s Settings) bool {
			p, _ := s.Probe(PortKey{corev1.ProtocolTCP, 80})
			return p.Text == "http interval=3s" && p.Interval == 3*time.Second && p.Rise == 2
		}, "", ""},
		{"probe of unknown port", []string{AnnotationProbePrefix + "443", "tls"}, func(s Settings) bool { return probeText(s, 80) == "tcp" }, AnnotationProbePrefix + "443", "no port"},
		{"tcp probe on a udp port", []string{AnnotationProbePrefix + "dns", "http"}, func(s Settings) bool { return probeText(s, 53) == "udp" }, AnnotationProbePrefix + "dns", "UDP port"},
		{"probe-interval", []string{AnnotationProbeInterval, "500ms"}, func(s Settings) bool { return s.ProbeInterval == 500*time.Millisecond }, "", ""},
		{"bad probe-interval", []string{AnnotationProbeInterval, "1"}, func(s Settings) bool { return s.ProbeInterval == time.Second }, AnnotationProbeInterval, "duration"},
		{"probe-timeout too long", []string{AnnotationProbeTimeout, "2h"}, func(s Settings) bool { return s.ProbeTimeout == 0 }, AnnotationProbeTimeout, "100ms to 1m"},
		{"rise and fall", []string{AnnotationRise, "3", AnnotationFall, "4"}, func(s Settings) bool { return s.Rise == 3 && s.Fall == 4 }, "", ""},
		{"bad fall", []string{AnnotationFall, "-1"}, func(s Settings) bool { return s.Fall == 2 }, AnnotationFall, "1 to 100"},
		{"publish-when", []string{AnnotationPublishWhen, "any-port"}, func(s Settings) bool { return s.PublishWhen == PublishAnyPort }, "", ""},
		{"bad publish-when", []string{AnnotationPublishWhen, "some"}, func(s Settings) bool { return s.PublishWhen == PublishAllPorts }, AnnotationPublishWhen, "all-ports"},
		{"all-down", []string{AnnotationAllDown, "publish-none"}, func(s Settings) bool { return s.AllDown == AllDownPublishNone }, "", ""},
		{"bad all-down", []string{AnnotationAllDown, "none"}, func(s Settings) bool { return s.AllDown == AllDownPublishAll }, AnnotationAllDown, "publish-all"},
		{"external-vantages required", []string{AnnotationExternalVantages, "required"}, func(s Settings) bool { return s.ExternalVantages == ExternalRequired }, "", ""},
		{"external-vantages off", []string{AnnotationExternalVantages, "off"}, func(s Settings) bool { return s.ExternalVantages == ExternalOff }, "", ""},
		{"bad external-vantages", []string{AnnotationExternalVantages, "Required"}, func(s Settings) bool { return s.ExternalVantages == ExternalAdvisory }, AnnotationExternalVantages, "off, advisory, required"},
		{"hostnames from three annotations", []string{AnnotationHostname, "b.example.org, a.example.org.", AnnotationExternalDNSHostname, "a.example.org", AnnotationExternalDNSAlphaHostname, "c.example.org"},
			func(s Settings) bool {
				return slices.Equal(s.Hostnames, []string{"a.example.org", "b.example.org", "c.example.org"})
			}, "", ""},
		{"bad hostname", []string{AnnotationHostname, "ok.example.org,bad_name!"}, func(s Settings) bool { return slices.Equal(s.Hostnames, []string{"ok.example.org"}) }, AnnotationHostname, "not a hostname"},
		{"underscore hostname", []string{AnnotationHostname, "foo_bar.example.org"}, func(s Settings) bool { return s.Hostnames == nil }, AnnotationHostname, "letters, digits and hyphens"},
		{"wildcard hostname", []string{AnnotationExternalDNSHostname, "*.Example.org."}, func(s Settings) bool { return slices.Equal(s.Hostnames, []string{"*.example.org"}) }, "", ""},
		{"dns-ttl", []string{AnnotationDNSTTL, "30"}, func(s Settings) bool { return s.DNSTTL == 30 }, "", ""},
		{"dns-ttl with unit", []string{AnnotationDNSTTL, "30s"}, func(s Settings) bool { return s.DNSTTL == 30 }, "", ""},
		{"dns-ttl of a day", []string{AnnotationDNSTTL, "86400"}, func(s Settings) bool { return s.DNSTTL == 86400 }, "", ""},
		{"zero dns-ttl", []string{AnnotationDNSTTL, "0"}, func(s Settings) bool { return s.DNSTTL == 0 }, AnnotationDNSTTL, "1 to 86400"},
		{"dns-ttl over a day", []string{AnnotationDNSTTL, "86401"}, func(s Settings) bool { return s.DNSTTL == 0 }, AnnotationDNSTTL, "1 to 86400"},
		{"bad dns-ttl", []string{AnnotationDNSTTL, "5m"}, func(s Settings) bool { return s.DNSTTL == 0 }, AnnotationDNSTTL, "seconds"},
		{"drain-delay", []string{AnnotationDrainDelay, "45s"}, func(s Settings) bool { return s.DrainDelay(5) == 45*time.Second }, "", ""},
		{"drain-delay zero", []string{AnnotationDrainDelay, "0s"}, func(s Settings) bool { return s.DrainDelay(5) == 0 }, "", ""},
		{"drain-delay from the TTL", []string{AnnotationDNSTTL, "30"}, func(s Settings) bool { return s.DrainDelay(5) == 40*time.Second }, "", ""},
		{"drain-delay from the default TTL", nil, func(s Settings) bool { return s.DrainDelay(7) == 17*time.Second }, "", ""},
		{"bad drain-delay", []string{AnnotationDrainDelay, "15"}, func(s Settings) bool { return s.DrainDelay(5) == 15*time.Second }, AnnotationDrainDelay, "duration"},
		{"negative drain-delay", []string{AnnotationDrainDelay, "-1s"}, func(s Settings) bool { return s.DrainDelay(5) == 15*time.Second }, AnnotationDrainDelay, "0s to 1h"},
		{"drain-delay over an hour", []string{AnnotationDrainDelay, "2h"}, func(s Settings) bool { return s.DrainDelay(5) == 15*time.Second }, AnnotationDrainDelay, "0s to 1h"},
		{"written annotations are not settings", []string{AnnotationNodes, "n1", AnnotationExternalIPs, "x"}, func(s Settings) bool { return true }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, problems := Parse(service(annotate(tt.kv...)))
			if !tt.check(s) {
				t.Errorf("settings %+v", s)
			}
			if tt.problem == "" {
				if len(problems) > 0 {
					t.Errorf("problems %q, want none", problems)
				}
				return
			}
			if len(problems) != 1 || problems[0].Key != tt.problem || !strings.Contains(problems[0].Reason, tt.reason) {
				t.Fatalf("problems %q, want one for %s with reason containing %q", problems, tt.problem, tt.reason)
			}
			msg := problems[0].String()
			value := ""
			for i := 0; i+1 < len(tt.kv); i += 2 {
				if tt.kv[i] == tt.problem {
					value = tt.kv[i+1]
				}
			}
			if !strings.Contains(msg, tt.problem) || !strings.Contains(msg, value) || !strings.Contains(msg, "using ") {
				t.Errorf("message %q does not name the key, the value %q and the default", msg, value)
			}
		})
	}
}

func probeText(s Settings, port int32) string {
	for _, p := range s.Probes {
		if p.Port.Port == port {
			return p.Text
		}
	}
	return ""
}

func TestProbes(t *testing.T) {
	tcp := corev1.ServicePort{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP}
	udp := corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}
	bare := corev1.ServicePort{Port: 8080}
	tests := []struct {
		name  string
		annot map[string]string
		port  corev1.ServicePort
		want  string
	}{
		{"default tcp", nil, tcp, "tcp"},
		{"default udp", nil, udp, "udp"},
		{"no protocol is tcp", nil, bare, "tcp"},
		{"service-level", map[string]string{AnnotationProbe: "http path=/healthz"}, tcp, "http path=/healthz"},
		{"service-level cannot check udp", map[string]string{AnnotationProbe: "http"}, udp, "udp"},
		{"by name", map[string]string{AnnotationProbe: "http", AnnotationProbePrefix + "dns": "dns name=example.org"}, udp, "dns name=example.org"},
		{"by number", map[string]string{AnnotationProbePrefix + "80": "tls"}, tcp, "tls"},
		{"invalid falls back", map[string]string{AnnotationProbe: "htp"}, tcp, "tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annot},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{tcp, udp, bare}}}
			s, _ := Parse(svc)
			p, ok := s.Probe(PortKeyOf(tt.port))
			if !ok || p.Text != tt.want {
				t.Fatalf("Probe = %q (%t), want %q", p.Text, ok, tt.want)
			}
			if want, _ := probespec.Parse(tt.want); p.Spec.String() != want.String() {
				t.Errorf("spec %q, want %q", p.Spec.String(), want.String())
			}
		})
	}
}

func TestHostname(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"www.example.org", "www.example.org", ""},
		{" WWW.Example.ORG. ", "www.example.org", ""},
		{"*.example.org", "*.example.org", ""},
		{"localhost", "localhost", ""},
		{"a-b.c0.example", "a-b.c0.example", ""},
		{"foo_bar.example.org", "", "letters, digits and hyphens"},
		{"-lead.example.org", "", "hyphen"},
		{"trail-.example.org", "", "hyphen"},
		{"a..b", "", "empty label"},
		{"*.", "", "letters, digits and hyphens"},
		{"", "", "empty"},
		{"a.*.b", "", "letters, digits and hyphens"},
		{"bad name", "", "letters, digits and hyphens"},
		{strings.Repeat("a", 64) + ".org", "", "longer than 63"},
		{strings.Repeat("abcdefg.", 32) + "org", "", "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Hostname(tt.in)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Hostname = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Hostname = %q, %v; want an error with %q", got, err, tt.err)
			}
		})
	}
}

func TestServes(t *testing.T) {
	other := "example.com/lb"
	class := Class
	tests := []struct {
		name      string
		typ       corev1.ServiceType
		class     *string
		classOnly bool
		want      bool
	}{
		{"no class", corev1.ServiceTypeLoadBalancer, nil, false, true},
		{"no class, class-only", corev1.ServiceTypeLoadBalancer, nil, true, false},
		{"ours", corev1.ServiceTypeLoadBalancer, &class, true, true},
		{"another class", corev1.ServiceTypeLoadBalancer, &other, false, false},
		{"not a load balancer", corev1.ServiceTypeClusterIP, nil, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: tt.typ, LoadBalancerClass: tt.class}}
			sel := Selection{ClassOnly: tt.classOnly}
			if got := sel.Serves(svc); got != tt.want {
				t.Errorf("Serves = %t, want %t", got, tt.want)
			}
			if got := sel.Active(svc); got != tt.want {
				t.Errorf("Active = %t, want %t", got, tt.want)
			}
			svc.DeletionTimestamp = &metav1.Time{}
			if !sel.Serves(svc) && tt.want {
				t.Error("a Service being deleted is no longer served: its proxies would stay")
			}
			if sel.Active(svc) {
				t.Error("a Service being deleted is active")
			}
		})
	}
}

type svcOpt func(*corev1.Service)

func service(opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func annotate(kv ...string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// TestSettingAnnotationsEqual: the annotations pulselb writes are no
// settings; any other difference, an added or removed key included, is.
func TestSettingAnnotationsEqual(t *testing.T) {
	base := map[string]string{AnnotationProbe: "tcp", "other.example/x": "1", AnnotationNodes: "n1"}
	for _, tc := range []struct {
		what  string
		other map[string]string
		equal bool
	}{
		{"the same", map[string]string{AnnotationProbe: "tcp", "other.example/x": "1", AnnotationNodes: "n1"}, true},
		{"written ones changed", map[string]string{AnnotationProbe: "tcp", "other.example/x": "1", AnnotationNodes: "n2",
			AnnotationExternalIPs: "192.0.2.1", AnnotationInternalIPs: "10.0.0.1", AnnotationExternalUnreachable: "192.0.2.2"}, true},
		{"written ones gone", map[string]string{AnnotationProbe: "tcp", "other.example/x": "1"}, true},
		{"a setting changed", map[string]string{AnnotationProbe: "http", "other.example/x": "1", AnnotationNodes: "n1"}, false},
		{"a setting added", map[string]string{AnnotationProbe: "tcp", "other.example/x": "1", AnnotationRise: "3", AnnotationNodes: "n1"}, false},
		{"a setting removed", map[string]string{"other.example/x": "1", AnnotationNodes: "n1"}, false},
		{"an empty value added", map[string]string{AnnotationProbe: "tcp", "other.example/x": "1", "y": "", AnnotationNodes: "n1"}, false},
		{"nil", nil, false},
	} {
		if got := SettingAnnotationsEqual(base, tc.other); got != tc.equal {
			t.Errorf("%s: equal %v, want %v", tc.what, got, tc.equal)
		}
		if got := SettingAnnotationsEqual(tc.other, base); got != tc.equal {
			t.Errorf("%s, reversed: equal %v, want %v", tc.what, got, tc.equal)
		}
	}
	if !SettingAnnotationsEqual(nil, map[string]string{AnnotationNodes: "n1"}) {
		t.Error("nil and only written annotations differ")
	}
	for _, k := range WrittenAnnotations() {
		if !IsWrittenAnnotation(k) {
			t.Errorf("%s is written but IsWrittenAnnotation says not", k)
		}
	}
	if IsWrittenAnnotation(AnnotationProbe) {
		t.Errorf("%s is a setting, IsWrittenAnnotation says written", AnnotationProbe)
	}
}
