package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// TestWorkloadUnchanged: a proxy workload's status updates, and the
// Deployment controller's revision annotation, do not requeue its Service;
// any change sync reads does.
func TestWorkloadUnchanged(t *testing.T) {
	base := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 1,
		Labels: map[string]string{"a": "1"}, Annotations: map[string]string{contract.AnnotationSpecHash: "x"}}}
	tests := []struct {
		name   string
		change func(*appsv1.Deployment)
		want   bool
	}{
		{"status only", func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 2; d.ResourceVersion = "9" }, true},
		{"spec changed", func(d *appsv1.Deployment) { d.Generation = 2 }, false},
		{"labels changed", func(d *appsv1.Deployment) { d.Labels["a"] = "2" }, false},
		{"spec hash changed", func(d *appsv1.Deployment) { d.Annotations[contract.AnnotationSpecHash] = "y" }, false},
		{"template hash added", func(d *appsv1.Deployment) { d.Annotations[contract.AnnotationTemplateHash] = "t" }, false},
		{"revision annotation added", func(d *appsv1.Deployment) { d.Annotations["deployment.kubernetes.io/revision"] = "1" }, true},
		{"being deleted", func(d *appsv1.Deployment) { d.DeletionTimestamp = &metav1.Time{Time: testNow} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.DeepCopy()
			tt.change(n)
			if got := workloadUnchanged(base, n); got != tt.want {
				t.Errorf("workloadUnchanged = %v, want %v", got, tt.want)
			}
		})
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	ds2 := ds.DeepCopy()
	ds2.Status.NumberReady = 3
	if !workloadUnchanged(ds, ds2) {
		t.Error("a DaemonSet status update requeues its Service")
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	pdb2 := pdb.DeepCopy()
	pdb2.Status.CurrentHealthy, pdb2.Status.DisruptionsAllowed = 2, 1
	if !workloadUnchanged(pdb, pdb2) {
		t.Error("a PodDisruptionBudget status update requeues its Service")
	}
	pdb2.Generation = 2
	if workloadUnchanged(pdb, pdb2) {
		t.Error("a PodDisruptionBudget spec change is ignored")
	}
	pod := &corev1.Pod{}
	if workloadUnchanged(pod, pod.DeepCopy()) {
		t.Error("a pod update is ignored; pods' status is what status reads")
	}
}
