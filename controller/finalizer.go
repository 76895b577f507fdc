package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/status"
)

// Finalizer stays on a served Service until its proxy workload is gone and
// pulselb's status is cleared. It is the standard name, the one the
// cloud-provider service controller puts on the Services it serves and
// Kubernetes' LoadBalancer e2e specs wait for, so it is not pulselb's
// alone: ownsFinalizer decides whose it is.
const Finalizer = "service.kubernetes.io/load-balancer-cleanup"

// LegacyFinalizer is the finalizer pulselb used before it took the standard
// name. Only pulselb ever set it, so a Service that carries it is
// pulselb's: sync replaces it with Finalizer in one update, and release
// removes it, so that no Service served before an upgrade is left
// Terminating.
const LegacyFinalizer = "pulselb.io/load-balancer-cleanup"

// hasFinalizer reports whether svc carries Finalizer, whoever put it there.
func hasFinalizer(svc *corev1.Service) bool {
	return slices.Contains(svc.Finalizers, Finalizer)
}

func hasLegacyFinalizer(svc *corev1.Service) bool {
	return slices.Contains(svc.Finalizers, LegacyFinalizer)
}

// holdsFinalizer reports whether svc carries a finalizer of pulselb's, so
// that release has something to undo.
func (c *Controller) holdsFinalizer(svc *corev1.Service) bool {
	return hasLegacyFinalizer(svc) || c.ownsFinalizer(svc)
}

// ownsFinalizer reports whether svc carries Finalizer and pulselb put it
// there. Other implementations hold the same name on their own Services,
// and stripping it would let such a Service go before its load balancer is
// cleaned up, so pulselb claims it only on a Service it serves or has
// served:
//   - a Service it serves, deletion aside: of pulselb's class, or without a
//     class unless --class-only. The class cannot change while the type
//     stays LoadBalancer, and the cloud-provider service controller serves
//     no Service that has a class.
//   - any other Service only while it carries pulselb's annotations or
//     conditions (status.Marked), which pulselb writes only on a Service
//     that holds the finalizer and clears when it releases it: a Service
//     whose type changed (which clears the class; a change back to
//     LoadBalancer may set another one before pulselb has released it), or
//     that --class-only now excludes.
//
// A Service of another class, or without a class under --class-only,
// that pulselb never wrote to keeps its finalizer: it is its own
// controller's.
func (c *Controller) ownsFinalizer(svc *corev1.Service) bool {
	if !hasFinalizer(svc) {
		return false
	}
	return c.wants(svc) || status.Marked(svc)
}

// withFinalizer returns finalizers with Finalizer and without
// LegacyFinalizer, in a new slice: a Service pulselb writes carries the
// standard name only.
func withFinalizer(finalizers []string) []string {
	out := slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool { return f == LegacyFinalizer })
	if !slices.Contains(out, Finalizer) {
		out = append(out, Finalizer)
	}
	return out
}
