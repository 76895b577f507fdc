package placement

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

func TestRollsOut(t *testing.T) {
	nodes := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	cur, _ := Desired(service(), nodes, testCfg)
	more, _ := Desired(service(annotate(contract.AnnotationReplicas, "3")), nodes, testCfg)
	newImage := testCfg
	newImage.Image = "pulselb:next"
	next, _ := Desired(service(), nodes, newImage)
	old := cur.Deployment.DeepCopy()
	delete(old.Annotations, contract.AnnotationTemplateHash)
	tests := []struct {
		name   string
		action WorkloadAction
		want   bool
	}{
		{"a new image", WorkloadAction{Verb: WorkloadUpdate, Object: next.Deployment, Current: cur.Deployment}, true},
		{"more replicas", WorkloadAction{Verb: WorkloadUpdate, Object: more.Deployment, Current: cur.Deployment}, false},
		{"written before template hashes", WorkloadAction{Verb: WorkloadUpdate, Object: cur.Deployment, Current: old}, true},
		{"a create", WorkloadAction{Verb: WorkloadCreate, Object: next.Deployment}, false},
		{"a budget", WorkloadAction{Verb: WorkloadUpdate, Object: next.Budget, Current: cur.Budget}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RollsOut(tt.action); got != tt.want {
				t.Errorf("RollsOut = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestRolling(t *testing.T) {
	dep := func(gen, observed int64, replicas, updated, total, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, Replicas: total, AvailableReplicas: available}}
	}
	ds := func(gen, observed int64, desired, updated, unavailable int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated, NumberUnavailable: unavailable}}
	}
	tests := []struct {
		name string
		o    WorkloadObject
		want bool
	}{
		{"done", dep(2, 2, 2, 2, 2, 2), false},
		{"not observed yet", dep(3, 2, 2, 2, 2, 2), true},
		{"new pods starting", dep(2, 2, 2, 1, 3, 2), true},
		{"old pods left", dep(2, 2, 2, 2, 3, 2), true},
		{"new pods not available", dep(2, 2, 2, 2, 2, 1), true},
		{"daemonset done", ds(4, 4, 3, 3, 0), false},
		{"daemonset updating", ds(4, 4, 3, 2, 0), true},
		{"daemonset unavailable", ds(4, 4, 3, 3, 1), true},
		{"daemonset not observed", ds(5, 4, 3, 3, 0), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Rolling(tt.o); got != tt.want {
				t.Errorf("Rolling = %t, want %t", got, tt.want)
			}
		})
	}
}
