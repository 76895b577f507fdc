package placement

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var testCfg = Config{Namespace: "pulselb-system", Image: "ghcr.io/pulselb/pulselb:test", PriorityClassName: DefaultPriorityClassName}

type svcOpt func(*corev1.Service)

func service(opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeLoadBalancer,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Selector:   map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
			},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func annotate(kv ...string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

type nodeOpt func(*corev1.Node)

func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func label(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }

func taint(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect}) }
}
