package scenario

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ListPods returns the pods of namespace ns matching selector; nil when
// the list fails (the callers poll).
func ListPods(ctx context.Context, cs kubernetes.Interface, ns, selector string) []corev1.Pod {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	return l.Items
}

// ReadyPods returns the pods of ListPods that run with an IP, are Ready
// and are not being deleted.
func ReadyPods(ctx context.Context, cs kubernetes.Interface, ns, selector string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range ListPods(ctx, cs, ns, selector) {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && PodReady(&p) {
			out = append(out, p)
		}
	}
	return out
}

// PodReady reports whether pod has the condition Ready=True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
