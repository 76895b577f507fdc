package contract

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestParseCache: the cache answers as Parse does, parses again exactly
// when the annotations or ports change, and Prune forgets the Services a
// pass did not read.
func TestParseCache(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: "1",
		Annotations: map[string]string{AnnotationProbe: `http path=/healthz body="ok|ready"`, AnnotationHostname: "www.example.test", AnnotationRise: "x"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	var c ParseCache
	first, problems := c.Parse(svc)
	wantSettings, wantProblems := Parse(svc)
	if first.Probes[0].Spec.String() != wantSettings.Probes[0].Spec.String() || !reflect.DeepEqual(first.Hostnames, wantSettings.Hostnames) ||
		first.Rise != wantSettings.Rise || !reflect.DeepEqual(problems, wantProblems) {
		t.Fatalf("cached parse %+v, %v differs from Parse's %+v, %v", first, problems, wantSettings, wantProblems)
	}
	reparsed := func(s Settings) bool { return &s.Probes[0] != &first.Probes[0] }

	// What Parse does not read: the status and the annotations written
	// beside it, the resourceVersion, a copy of the object.
	same := svc.DeepCopy()
	same.ResourceVersion = "2"
	same.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	same.Annotations[AnnotationNodes] = "n1"
	same.Annotations[AnnotationExternalIPs] = "192.0.2.1"
	if s, _ := c.Parse(same); reparsed(s) {
		t.Error("a change of the status and the written annotations parsed the Service again")
	}
	// An append to a shared answer copies: the next caller sees none of it.
	s, p := c.Parse(svc)
	_ = append(s.Hostnames, "evil.example.test")
	_ = append(p, Problem{Key: "evil"})
	if s, p := c.Parse(svc); len(s.Hostnames) != 1 || len(p) != 1 || cap(s.Hostnames) != 1 {
		t.Errorf("an append changed the shared answer: %v %v", s.Hostnames, p)
	}

	annotated := svc.DeepCopy()
	annotated.Annotations[AnnotationProbe] = "tcp"
	if s, _ := c.Parse(annotated); !reparsed(s) || s.Probes[0].Spec.Protocol != "tcp" {
		t.Errorf("an annotation change was not parsed: %+v", s.Probes)
	}
	ported := annotated.DeepCopy()
	ported.Spec.Ports = append(ported.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP})
	if s, _ := c.Parse(ported); len(s.Probes) != 2 {
		t.Errorf("a port change was not parsed: %+v", s.Probes)
	}

	other := svc.DeepCopy()
	other.Name = "other"
	c.Parse(other)
	c.Prune()
	if c.Len() != 2 {
		t.Fatalf("after a pass over both Services the cache holds %d, want 2", c.Len())
	}
	c.Parse(other)
	c.Prune()
	if c.Len() != 1 {
		t.Errorf("a Service the last pass did not read is kept: %d Services held, want 1", c.Len())
	}
}
