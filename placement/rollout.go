package placement

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// RollsOut reports whether a, an action of a workload plan, rolls the
// proxies out again: an update that changes the pod template, not only the
// replica count or the rollout strategy. A workload written before
// template hashes were recorded counts as changed.
func RollsOut(a WorkloadAction) bool {
	if a.Verb != WorkloadUpdate || a.Current == nil {
		return false
	}
	switch a.Object.(type) {
	case *appsv1.Deployment, *appsv1.DaemonSet:
	default:
		return false
	}
	was := a.Current.GetAnnotations()[contract.AnnotationTemplateHash]
	return was == "" || was != a.Object.GetAnnotations()[contract.AnnotationTemplateHash]
}

// Rolling reports whether a proxy workload's rollout is under way: its
// controller has not seen its latest spec yet, or not every pod runs the
// latest template and is available.
func Rolling(o WorkloadObject) bool {
	switch w := o.(type) {
	case *appsv1.Deployment:
		want := int32(1)
		if w.Spec.Replicas != nil {
			want = *w.Spec.Replicas
		}
		st := w.Status
		return st.ObservedGeneration < w.Generation || st.UpdatedReplicas < want ||
			st.Replicas > st.UpdatedReplicas || st.AvailableReplicas < st.UpdatedReplicas
	case *appsv1.DaemonSet:
		st := w.Status
		return st.ObservedGeneration < w.Generation || st.UpdatedNumberScheduled < st.DesiredNumberScheduled ||
			st.NumberUnavailable > 0
	}
	return false
}
