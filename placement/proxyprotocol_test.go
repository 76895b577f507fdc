package placement

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// TestDesiredProxyProtocol checks that the proxy pod is told which ports
// send a PROXY protocol header, in the form its --proxy-protocol reads.
func TestDesiredProxyProtocol(t *testing.T) {
	three := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	mixed := func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		}
	}
	for _, tt := range []struct {
		name string
		svc  *corev1.Service
		want string // the variable's value; "" for none
	}{
		{"none", service(mixed), ""},
		{"every TCP port", service(mixed, annotate(contract.AnnotationProxyProtocol, "v2")), "TCP:80=v2,TCP:443=v2"},
		{"one port", service(mixed, annotate(contract.AnnotationProxyProtocolPrefix+"https", "v1")), "TCP:443=v1"},
		{"invalid", service(mixed, annotate(contract.AnnotationProxyProtocol, "v3")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := Desired(tt.svc, three, testCfg)
			var got []string
			for _, e := range w.Deployment.Spec.Template.Spec.Containers[0].Env {
				if e.Name == EnvProxyProtocol {
					got = append(got, e.Value)
				}
			}
			want := []string{tt.want}
			if tt.want == "" {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s = %q, want %q", EnvProxyProtocol, got, want)
			}
		})
	}
}

// TestDesiredClientIPAffinity checks that sessionAffinity ClientIP, which
// the proxies cannot honour per client, is reported rather than ignored.
func TestDesiredClientIPAffinity(t *testing.T) {
	three := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	_, problems := Desired(service(), three, testCfg)
	if len(problems) != 0 {
		t.Fatalf("problems without affinity: %q", problems)
	}
	w, problems := Desired(service(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }), three, testCfg)
	if w.Empty() {
		t.Fatal("no workload: affinity must not stop the Service from being served")
	}
	if len(problems) != 1 || problems[0].Key != "spec.sessionAffinity" || problems[0].IsAnnotation() ||
		!strings.Contains(problems[0].String(), `spec.sessionAffinity="ClientIP": pulselb's proxies connect to the ClusterIP from their own pod address`) {
		t.Fatalf("problems %q, want one for spec.sessionAffinity", problems)
	}
}
