package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDrainable(t *testing.T) {
	owned := func(kind string) metav1.ObjectMeta {
		return metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "x", Controller: ptr.To(true)}}}
	}
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"a ReplicaSet's pod", corev1.Pod{ObjectMeta: owned("ReplicaSet")}, true},
		{"a bare pod", corev1.Pod{}, true},
		{"a DaemonSet's pod is ignored", corev1.Pod{ObjectMeta: owned("DaemonSet")}, false},
		{"a mirror pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}, false},
		{"a finished pod", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := drainable(&tt.pod); got != tt.want {
				t.Errorf("drainable = %v, want %v", got, tt.want)
			}
		})
	}
}
