package cluster

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// EchoImage is the image tests give their backends: its name does not
// contain "pulselb", so the harness runs the echo backend (pulselb-echo) on
// the container's ports.
const EchoImage = "registry.example/echo:1"

// EchoDeployment returns Deployment ns/name of replicas echo pods labelled
// app=name, with one container "echo" serving ports. Callers set what
// else their scenario needs (a node selector, say) before creating it.
func EchoDeployment(ns, name string, replicas int32, ports ...corev1.ContainerPort) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: EchoImage, Ports: ports}}},
			},
		},
	}
}
