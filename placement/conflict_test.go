package placement

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
)

func proxyPod(svc *corev1.Service, name, nodeName string, ports ...int32) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: name, Labels: contract.ProxySelector(svc)},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: ContainerProxy}}},
	}
	for _, port := range ports {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
	}
	if nodeName == "" {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports."}}
	} else {
		p.Status.Phase = corev1.PodRunning
	}
	return p
}

func terminating(p *corev1.Pod) *corev1.Pod {
	p.DeletionTimestamp = &metav1.Time{}
	return p
}

func TestPortConflicts(t *testing.T) {
	web := service()
	api := service(func(s *corev1.Service) { s.Name = "api" })
	db := service(func(s *corev1.Service) { s.Name = "db" })
	pending := proxyPod(web, "web-x", "", 80, 443)
	tests := []struct {
		name   string
		own    []*corev1.Pod
		others []*corev1.Pod
		want   []string
	}{
		{"nothing pending", []*corev1.Pod{proxyPod(web, "web-a", "n1", 80)}, nil, nil},
		{"other Services hold the port",
			[]*corev1.Pod{pending},
			[]*corev1.Pod{proxyPod(api, "api-a", "n2", 80), proxyPod(db, "db-a", "n1", 80), proxyPod(db, "db-b", "n3", 5432), pending},
			[]string{"port TCP:80 is held on node n1, n2 by service shop/api, service shop/db"}},
		{"a rollout waiting for its own pod is no conflict",
			[]*corev1.Pod{pending, proxyPod(web, "web-a", "n1", 80, 443)},
			[]*corev1.Pod{proxyPod(web, "web-a", "n1", 80, 443)},
			nil},
		{"a rollout waiting for its own terminating pod is no conflict",
			[]*corev1.Pod{pending, terminating(proxyPod(web, "web-a", "n1", 80, 443))},
			[]*corev1.Pod{terminating(proxyPod(web, "web-a", "n1", 80, 443))},
			nil},
		{"holders out of view",
			[]*corev1.Pod{pending}, nil,
			[]string{"port TCP:80 is taken on every eligible node by pods outside pulselb's view",
				"port TCP:443 is taken on every eligible node by pods outside pulselb's view"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range PortConflicts(web, tt.own, tt.others) {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("conflicts\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
