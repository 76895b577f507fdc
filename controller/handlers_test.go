package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWorkloadStatusOnly: a proxy workload's status updates do not requeue
// its Service; any change sync reads does.
func TestWorkloadStatusOnly(t *testing.T) {
	base := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 1,
		Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"h": "x"}}}
	tests := []struct {
		name   string
		change func(*appsv1.Deployment)
		want   bool
	}{
		{"status only", func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 2; d.ResourceVersion = "9" }, true},
		{"spec changed", func(d *appsv1.Deployment) { d.Generation = 2 }, false},
		{"labels changed", func(d *appsv1.Deployment) { d.Labels["a"] = "2" }, false},
		{"spec hash changed", func(d *appsv1.Deployment) { d.Annotations["h"] = "y" }, false},
		{"being deleted", func(d *appsv1.Deployment) { d.DeletionTimestamp = &metav1.Time{Time: testNow} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.DeepCopy()
			tt.change(n)
			if got := workloadStatusOnly(base, n); got != tt.want {
				t.Errorf("workloadStatusOnly = %v, want %v", got, tt.want)
			}
		})
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	ds2 := ds.DeepCopy()
	ds2.Status.NumberReady = 3
	if !workloadStatusOnly(ds, ds2) {
		t.Error("a DaemonSet status update requeues its Service")
	}
	pod := &corev1.Pod{}
	if workloadStatusOnly(pod, pod.DeepCopy()) {
		t.Error("a pod update is ignored; pods' status is what status reads")
	}
}
