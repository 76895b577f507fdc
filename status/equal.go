package status

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// Differs reports whether svc's status differs from r's, so the
// caller writes status only when something changed.
func Differs(svc *corev1.Service, r Result) bool {
	return !equality.Semantic.DeepEqual(svc.Status.LoadBalancer, r.LoadBalancer) ||
		!equality.Semantic.DeepEqual(svc.Status.Conditions, r.Conditions)
}

// AnnotationsDiffer reports whether svc's pulselb-written annotations
// differ from r's.
func AnnotationsDiffer(svc *corev1.Service, r Result) bool {
	for k, want := range r.Annotations {
		if got, ok := svc.Annotations[k]; got != want || (want == "" && ok) {
			return true
		}
	}
	return false
}

// ApplyStatus sets r's status on svc, a copy the caller owns.
func ApplyStatus(svc *corev1.Service, r Result) {
	svc.Status.LoadBalancer = *r.LoadBalancer.DeepCopy()
	svc.Status.Conditions = append(svc.Status.Conditions[:0:0], r.Conditions...)
}

// ApplyAnnotations sets r's annotations on svc, a copy the caller owns;
// an empty value removes the annotation.
func ApplyAnnotations(svc *corev1.Service, r Result) {
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	} else {
		svc.Annotations = maps.Clone(svc.Annotations)
	}
	for k, v := range r.Annotations {
		if v == "" {
			delete(svc.Annotations, k)
		} else {
			svc.Annotations[k] = v
		}
	}
}

// writtenAnnotations are the annotations pulselb writes on a Service.
var writtenAnnotations = contract.WrittenAnnotations()

// Cleared returns the Result of a Service pulselb no longer serves: no
// ingress, no pulselb annotations or conditions, others' conditions kept.
func Cleared(svc *corev1.Service) Result {
	r := Result{Annotations: make(map[string]string, len(writtenAnnotations))}
	for _, k := range writtenAnnotations {
		r.Annotations[k] = ""
	}
	for _, c := range svc.Status.Conditions {
		if !ownCondition(c.Type) {
			r.Conditions = append(r.Conditions, c)
		}
	}
	return r
}

// Marked reports whether svc carries an annotation or a condition that
// pulselb writes: pulselb served it and has not released it yet. The
// load-balancer address alone says nothing, since every implementation
// writes one.
func Marked(svc *corev1.Service) bool {
	for _, k := range writtenAnnotations {
		if _, ok := svc.Annotations[k]; ok {
			return true
		}
	}
	for _, c := range svc.Status.Conditions {
		if ownCondition(c.Type) {
			return true
		}
	}
	return false
}

// ownCondition reports whether conditions of type t are pulselb's.
func ownCondition(t string) bool {
	switch t {
	case ConditionProxiesScheduled, ConditionHealthy, ConditionConfigValid, ConditionExternallyReachable, ConditionAllowListApplied,
		ConditionBackendsReachable:
		return true
	}
	return false
}

// Progressing reports whether conds, pulselb's conditions as Decide
// computes them, say only that a Service is on its way to being served:
// every condition True, or False because proxies are still pending or not
// ready yet. A port conflict, no eligible node, an invalid setting or every
// proxy down is a problem, not progress.
func Progressing(conds []metav1.Condition) bool {
	for _, c := range conds {
		if c.Status == metav1.ConditionTrue {
			continue
		}
		switch {
		case c.Type == ConditionProxiesScheduled && c.Reason == ReasonPending:
		case c.Type == ConditionHealthy && c.Reason == ReasonNoProxyReady:
		case !ownCondition(c.Type):
			// Another controller's condition: not ours to judge.
		default:
			return false
		}
	}
	return true
}
