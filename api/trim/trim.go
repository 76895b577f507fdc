// Package trim owns what pulselb's informer caches keep of the objects they
// watch: every field some part of pulselb reads, and nothing else. Its
// Object is the transform of every informer factory pulselb starts, so the
// controller, the prober and the DNS feed share one rule.
//
// At a thousand nodes most of a Node object is its list of container
// images, and most of the EndpointSlices of a cluster belong to Services
// pulselb never looks at; pulselb reads neither their images nor their
// endpoints' addresses, nor most of its own pods' specs. Objects pulselb
// updates from its cache (Services, proxy workloads) lose only their
// managedFields, which the API server keeps when an update does not send
// them.
package trim

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// Object is a cache.TransformFunc: it drops from obj, in place, what
// pulselb never reads. Informers hand it objects fresh from the decoder,
// not yet shared, so changing them in place is safe.
func Object(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Node:
		node(o)
	case *discoveryv1.EndpointSlice:
		endpointSlice(o)
	case *corev1.Pod:
		pod(o)
	}
	return obj, nil
}

// node keeps a Node's labels, taints, addresses and conditions: what
// eligibility, publishing and node health read. The controller changes
// Nodes by patches only, never by updating a cached copy.
func node(n *corev1.Node) {
	n.Status.Images = nil
	n.Status.VolumesInUse = nil
	n.Status.VolumesAttached = nil
	n.Status.NodeInfo = corev1.NodeSystemInfo{}
	n.Status.Capacity = nil
	n.Status.Allocatable = nil
	n.Status.Config = nil
	n.Status.Features = nil
	n.Status.DeclaredFeatures = nil
	n.Status.RuntimeHandlers = nil
}

// pod keeps a pod's node, containers' names and ports (host-port
// conflicts), readiness and scheduling gates, termination grace period
// (how long a new proxy waits for its home), phase, reason (a proxy the
// kubelet refused for its sysctls), conditions and addresses (a
// prober's are let through its Services' source ranges): what placement,
// status, the readiness gate and vantage assignment read. The pods pulselb
// caches are its own (proxies and probers, in its namespace); their
// affinity, volumes, environment and the like are most of their size and
// read by nothing. Pods are changed by patches and deletes only.
func pod(p *corev1.Pod) {
	containers := make([]corev1.Container, len(p.Spec.Containers))
	for i, c := range p.Spec.Containers {
		containers[i] = corev1.Container{Name: c.Name, Ports: c.Ports}
	}
	p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName, Containers: containers, ReadinessGates: p.Spec.ReadinessGates,
		SchedulingGates: p.Spec.SchedulingGates, TerminationGracePeriodSeconds: p.Spec.TerminationGracePeriodSeconds}
	p.Status = corev1.PodStatus{Phase: p.Status.Phase, Reason: p.Status.Reason, Conditions: p.Status.Conditions,
		PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs, HostIP: p.Status.HostIP, HostIPs: p.Status.HostIPs}
}

// endpointSlice keeps, of each endpoint, its node and conditions (which
// nodes have a ready or starting backend, for externalTrafficPolicy Local,
// or one on a failed node) and the kind and name of its target (the pod a
// condition names when it is cut off), not its addresses.
func endpointSlice(s *discoveryv1.EndpointSlice) {
	for i, ep := range s.Endpoints {
		out := discoveryv1.Endpoint{NodeName: ep.NodeName, Conditions: ep.Conditions}
		if r := ep.TargetRef; r != nil {
			out.TargetRef = &corev1.ObjectReference{Kind: r.Kind, Name: r.Name}
		}
		s.Endpoints[i] = out
	}
	s.Ports = nil
}
