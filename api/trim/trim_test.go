package trim_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/trim"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// fullNode is a Node as a kubelet of a busy cluster reports it: fifty
// images, volumes, capacity, system info.
func fullNode(name, ip, externalIP string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:        map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: "z1"},
			Annotations:   map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectPreferNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("31Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeExternalIP, Address: externalIP},
				{Type: corev1.NodeHostName, Address: name}},
			NodeInfo:     corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", OSImage: "Debian GNU/Linux 12", ContainerRuntimeVersion: "containerd://2.4.2"},
			VolumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/driver^vol-1"},
		},
	}
	for i := range 50 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names: []string{
				fmt.Sprintf("registry.example.test/team/app-%d@sha256:%064d", i, i),
				fmt.Sprintf("registry.example.test/team/app-%d:v1.%d.0", i, i),
			},
			SizeBytes: 100 << 20,
		})
	}
	return n
}

func jsonSize(t *testing.T, obj any) int {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestNodeKeepsWhatPulselbReads: a trimmed Node gives the same placement
// and the same status as the full one, and is a small part of its size.
func TestNodeKeepsWhatPulselbReads(t *testing.T) {
	full := []*corev1.Node{fullNode("n1", "198.18.0.1", "198.18.200.1"), fullNode("n2", "198.18.0.2", "198.18.200.2")}
	trimmed := make([]*corev1.Node, len(full))
	for i, n := range full {
		out, err := trim.Object(n.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		trimmed[i] = out.(*corev1.Node)
	}
	before, after := jsonSize(t, full[0]), jsonSize(t, trimmed[0])
	t.Logf("node: %d bytes as JSON, %d trimmed", before, after)
	if after*5 > before {
		t.Errorf("trimmed node is %d of %d bytes; want under a fifth", after, before)
	}
	if trimmed[0].ManagedFields != nil || trimmed[0].Status.Images != nil {
		t.Errorf("trimmed node keeps managedFields %v or images", trimmed[0].ManagedFields)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1",
			Annotations: map[string]string{contract.AnnotationAddressType: contract.AddressBoth}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "198.19.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	cfg := placement.Config{Namespace: "pulselb-system", Image: "pulselb:test"}
	wantFull, _ := placement.Desired(svc, full, cfg)
	wantTrimmed, _ := placement.Desired(svc, trimmed, cfg)
	if !equality.Semantic.DeepEqual(wantFull.Deployment, wantTrimmed.Deployment) ||
		!equality.Semantic.DeepEqual(wantFull.EligibleNodes, wantTrimmed.EligibleNodes) {
		t.Errorf("placement differs on trimmed nodes:\n full %+v\n trimmed %+v", wantFull.EligibleNodes, wantTrimmed.EligibleNodes)
	}

	decide := func(nodes []*corev1.Node) status.Result {
		in := status.Input{Service: svc, Nodes: map[string]*corev1.Node{}, AddressType: contract.AddressBoth,
			AllDown: contract.AllDownPublishAll, Servable: true, EligibleNodes: len(nodes), Now: metav1.Unix(1, 0)}
		for _, n := range nodes {
			in.Nodes[n.Name] = n
			in.Pods = append(in.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: "p-" + n.Name},
				Spec:       corev1.PodSpec{NodeName: n.Name},
				Status: corev1.PodStatus{Phase: corev1.PodRunning,
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			})
		}
		return status.Decide(in)
	}
	if a, b := decide(full), decide(trimmed); !equality.Semantic.DeepEqual(a.LoadBalancer, b.LoadBalancer) ||
		!equality.Semantic.DeepEqual(a.Annotations, b.Annotations) || len(a.LoadBalancer.Ingress) != 4 {
		t.Errorf("status differs on trimmed nodes:\n full %+v %v\n trimmed %+v %v", a.LoadBalancer, a.Annotations, b.LoadBalancer, b.Annotations)
	}
}

// TestEndpointSliceKeepsNodesAndConditions: of a slice, the nodes of its
// endpoints, their conditions and their pods' names are what the
// controller reads.
func TestEndpointSliceKeepsNodesAndConditions(t *testing.T) {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To("n1"),
			Zone:       ptr.To("z1"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-1"},
		}},
	}
	out, err := trim.Object(s)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*discoveryv1.EndpointSlice)
	want := []discoveryv1.Endpoint{{NodeName: ptr.To("n1"),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Terminating: ptr.To(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}}}
	if !equality.Semantic.DeepEqual(got.Endpoints, want) || got.Labels[discoveryv1.LabelServiceName] != "web" {
		t.Errorf("trimmed slice %+v", got)
	}
}

// TestUpdatedObjectsLoseOnlyManagedFields: Services and proxy workloads are
// updated from cached copies, so every field but managedFields stays.
func TestUpdatedObjectsLoseOnlyManagedFields(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ManagedFields: mf, Annotations: map[string]string{"a": "b"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "web"}},
	}
	want := svc.DeepCopy()
	want.ManagedFields = nil
	out, err := trim.Object(svc)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(out, want) {
		t.Errorf("trimmed Service %+v, want %+v", out, want)
	}
	if _, err := trim.Object(cache.DeletedFinalStateUnknown{Key: "shop/web"}); err != nil {
		t.Errorf("a tombstone: %v", err)
	}
}

// proxyPod is a pod of svc's proxy Deployment as the API server returns it:
// the template placement builds (affinity, init container, probes,
// security context), bound to node, with container statuses.
func proxyPod(t *testing.T, svc *corev1.Service, nodes []*corev1.Node, name, node string, ready bool) *corev1.Pod {
	t.Helper()
	w, problems := placement.Desired(svc, nodes, placement.Config{Namespace: "pulselb-system", Image: "pulselb:test"})
	if len(problems) > 0 || w.Deployment == nil {
		t.Fatalf("placement: %v", problems)
	}
	tpl := w.Deployment.Spec.Template
	p := &corev1.Pod{ObjectMeta: *tpl.ObjectMeta.DeepCopy(), Spec: *tpl.Spec.DeepCopy()}
	p.Namespace, p.Name, p.UID = "pulselb-system", name, "uid-"+types.UID(name)
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}}
	p.Spec.NodeName = node
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "198.18.1.1", PodIP: "10.244.0.5",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", Ready: ready, Image: "pulselb:test", ImageID: "sha256:0123"}}}
	if node == "" {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."}}}
	}
	return p
}

// TestPodKeepsWhatPulselbReads: trimmed proxy pods give the same status
// and the same port conflicts as full ones, and are a fraction of their
// size.
func TestPodKeepsWhatPulselbReads(t *testing.T) {
	nodes := []*corev1.Node{fullNode("n1", "198.18.0.1", "198.18.200.1"), fullNode("n2", "198.18.0.2", "198.18.200.2")}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "198.19.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	other := svc.DeepCopy()
	other.Name, other.UID = "shop2", "u2"
	full := []*corev1.Pod{
		proxyPod(t, svc, nodes, "web-1", "n1", true),
		proxyPod(t, svc, nodes, "web-2", "n2", false),
		proxyPod(t, svc, nodes, "web-3", "", false),
	}
	others := []*corev1.Pod{proxyPod(t, other, nodes, "shop2-1", "n1", true), proxyPod(t, other, nodes, "shop2-2", "n2", true)}
	trimAll := func(pods []*corev1.Pod) []*corev1.Pod {
		out := make([]*corev1.Pod, len(pods))
		for i, p := range pods {
			o, err := trim.Object(p.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			out[i] = o.(*corev1.Pod)
		}
		return out
	}
	trimmed, trimmedOthers := trimAll(full), trimAll(others)
	before, after := jsonSize(t, full[0]), jsonSize(t, trimmed[0])
	t.Logf("proxy pod: %d bytes as JSON, %d trimmed", before, after)
	if after*2 > before {
		t.Errorf("trimmed pod is %d of %d bytes; want under half", after, before)
	}

	a := placement.PortConflicts(svc, full, append(slices.Clone(full), others...))
	b := placement.PortConflicts(svc, trimmed, append(slices.Clone(trimmed), trimmedOthers...))
	if len(a) == 0 || !equality.Semantic.DeepEqual(a, b) {
		t.Errorf("port conflicts differ on trimmed pods (want some):\n full %v\n trimmed %v", a, b)
	}

	decide := func(pods []*corev1.Pod) status.Result {
		in := status.Input{Service: svc, Nodes: map[string]*corev1.Node{}, Pods: pods, AddressType: contract.AddressBoth,
			AllDown: contract.AllDownPublishAll, Servable: true, EligibleNodes: 2, Now: metav1.Unix(1, 0)}
		for _, n := range nodes {
			in.Nodes[n.Name] = n
		}
		return status.Decide(in)
	}
	if x, y := decide(full), decide(trimmed); !equality.Semantic.DeepEqual(x.LoadBalancer, y.LoadBalancer) ||
		!equality.Semantic.DeepEqual(x.Conditions, y.Conditions) || len(x.LoadBalancer.Ingress) != 2 {
		t.Errorf("status differs on trimmed pods:\n full %+v\n trimmed %+v", x, y)
	}
	if !equality.Semantic.DeepEqual(trimmed[0].Labels, full[0].Labels) || trimmed[0].ManagedFields != nil {
		t.Errorf("trimmed pod metadata %+v", trimmed[0].ObjectMeta)
	}

	// A proxy pod the kubelet refused for its sysctls is still one.
	refused := proxyPod(t, svc, nodes, "web-4", "n2", false)
	refused.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: placement.ReasonSysctlForbidden,
		Message: `Pod was rejected: forbidden sysctl: "net.ipv4.ip_forward" not allowlisted`}
	if got := placement.SysctlForbidden(nil, trimAll([]*corev1.Pod{refused})); !slices.Equal(got, []string{"n2"}) {
		t.Errorf("nodes refusing sysctls from a trimmed pod: %v, want n2", got)
	}
}
