package dnsexport

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
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
	}{
		{name: "defaults", ttl: 0},
		{name: "all three hostname annotations, comma-separated, de-duplicated",
			ann: map[string]string{
				contract.AnnotationHostname:                 "a.example.com, B.example.com.",
				contract.AnnotationExternalDNSHostname:      "b.example.com",
				contract.AnnotationExternalDNSAlphaHostname: "c.example.com,",
			},
			hostnames: []string{"a.example.com", "b.example.com", "c.example.com"}},
		{name: "ttl", ann: map[string]string{contract.AnnotationDNSTTL: "30"}, ttl: 30},
		{name: "ttl with s suffix", ann: map[string]string{contract.AnnotationDNSTTL: "60s"}, ttl: 60},
		{name: "ttl not a number", ann: map[string]string{contract.AnnotationDNSTTL: "soon"}, ttl: 0},
		{name: "ttl zero", ann: map[string]string{contract.AnnotationDNSTTL: "0"}, ttl: 0},
		{name: "ttl too large", ann: map[string]string{contract.AnnotationDNSTTL: "999999"}, ttl: 0},
		{name: "bad hostname skipped, others kept", ann: map[string]string{contract.AnnotationHostname: "ok.example.com,bad..name"},
			hostnames: []string{"ok.example.com"}, ttl: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := FromService(base(tc.ann))
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
		})
	}
}

// TestHostnameReportedUnusedIsNotServed: a hostname the controller reports
// as unused (ConfigValid=False, an InvalidAnnotation Event saying the name
// is not used) must not be served either. Names with an underscore or a
// label that starts or ends with a hyphen were once reported unused by the
// annotation parser and served by the zone all the same.
func TestHostnameReportedUnusedIsNotServed(t *testing.T) {
	origin := "lb.example.test."
	cfg := ZoneConfig{Origin: origin, NameServers: []NameServer{{Name: "ns1.example.net"}}}
	for _, h := range []string{"foo_bar.lb.example.test", "-lead.lb.example.test", "trail-.lb.example.test", "ok.lb.example.test"} {
		t.Run(h, func(t *testing.T) {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{contract.AnnotationHostname: h}},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
				Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.0.1"}}}},
			}
			_, problems := contract.Parse(svc)
			unused := len(problems) > 0
			// The zone serves what FromService hands it, and refuses a bad
			// name handed to it directly (standalone mode builds Services
			// itself).
			for _, s := range []Service{FromService(svc), {Namespace: "shop", Name: "web", Hostnames: []string{h},
				IPs: []netip.Addr{netip.MustParseAddr("198.18.0.1")}}} {
				z, zoneProblems, err := Build(cfg, []Service{s})
				if err != nil {
					t.Fatal(err)
				}
				served := z.lookup(dns.Fqdn(h), dns.TypeA, 0, MaxAnswerAddrs).rcode == dns.RcodeSuccess && len(z.lookup(dns.Fqdn(h), dns.TypeA, 0, MaxAnswerAddrs).answer) > 0
				if served == unused {
					t.Errorf("reported unused: %t (%v); served: %t (zone problems %v)", unused, problems, served, zoneProblems)
				}
			}
		})
	}
}

// TestNoSRVForUnservedPorts: a Service's SCTP port, which no proxy
// forwards (contract.Served), gets no SRV record: the record would send
// clients to an address where nothing answers on that port.
func TestNoSRVForUnservedPorts(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.0.1"}}}},
	}
	z, problems, err := Build(ZoneConfig{Origin: "lb.example.test.", NameServers: []NameServer{{Name: "ns1.example.net"}}}, []Service{FromService(svc)})
	if err != nil || len(problems) > 0 {
		t.Fatalf("Build: %v, problems %v", err, problems)
	}
	for name, want := range map[string]int{"_http._tcp.web.shop.lb.example.test.": 1, "_sig._sctp.web.shop.lb.example.test.": 0} {
		r := z.lookup(name, dns.TypeSRV, 0, MaxAnswerAddrs)
		if len(r.answer) != want || (want == 0 && r.rcode != dns.RcodeNameError) {
			t.Errorf("SRV %s: rcode %s, %d answers; want %d", name, dns.RcodeToString[r.rcode], len(r.answer), want)
		}
	}
}
