package placement

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

// homePod is a proxy pod of template hash, holding TCP ports, for Homes:
// on node, or gated when node is "gated", or pinned there but unscheduled
// when node is "pinned:NODE".
type homePod struct {
	name, hash, node string
	ports            []int32
	terminating      bool
	ready            bool
	age              time.Duration
}

var homeNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func (h homePod) pod() *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: h.name, Namespace: "pulselb-system",
			Labels:            map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: h.hash},
			CreationTimestamp: metav1.NewTime(homeNow.Add(-h.age))},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: contract.LabelUnhealthy, Operator: corev1.NodeSelectorOpDoesNotExist}}}}}}},
			Containers: []corev1.Container{{Name: ContainerProxy}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, port := range h.ports {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
	}
	switch {
	case h.node == "gated":
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: contract.SchedulingGateHome}}
		p.Status.Phase = corev1.PodPending
	case len(h.node) > len("pinned:") && h.node[:len("pinned:")] == "pinned:":
		p.Annotations = map[string]string{contract.AnnotationHome: h.node[len("pinned:"):]}
		p.Status.Phase = corev1.PodPending
	default:
		p.Spec.NodeName = h.node
	}
	if h.terminating {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(homeNow))
	}
	if h.ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

// TestHomes: a rollout or a restart puts each new proxy on the node of the
// proxy it replaces, starting next to it when the ports differ, after it
// when they are the same; a pod that replaces nothing is the scheduler's.
func TestHomes(t *testing.T) {
	three := []string{"a", "b", "c"}
	tests := []struct {
		name      string
		pods      []homePod
		others    []homePod
		published []string
		eligible  []string
		endpoints []string
		// replicas and maxUnavailable of the rollout (maxUnavailable 0:
		// no old proxy taken down first)
		replicas, maxUnavailable int
		// want: pod name → node, "wait", "delete", or "" (released)
		want   map[string]string
		reason map[string]string
	}{{
		name: "a port change surges next to each old proxy",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true},
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "gated", ports: []int32{81}},
		},
		published: []string{"a", "b"}, eligible: three,
		want: map[string]string{"new-1": "a"}, reason: map[string]string{"new-1": HomeReplaces},
	}, {
		name: "the second new pod goes to the other published node, not the spare one",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true, terminating: true},
			{name: "new-1", hash: "h2", node: "a", ports: []int32{81}},
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-2", hash: "h2", node: "gated", ports: []int32{81}},
		},
		published: []string{"a", "b"}, eligible: three, replicas: 2, maxUnavailable: 1,
		want: map[string]string{"new-2": "b"},
	}, {
		name: "two new pods at once each get their own node",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true, terminating: true},
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "gated", ports: []int32{81}, age: 2 * time.Second},
			{name: "new-2", hash: "h2", node: "gated", ports: []int32{81}, age: time.Second},
		},
		published: []string{"a", "b"}, eligible: three, replicas: 2, maxUnavailable: 1,
		want: map[string]string{"new-1": "a", "new-2": "b"},
	}, {
		name: "a new image follows the old proxy that goes first, and the next waits for the other",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true, terminating: true},
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "gated", ports: []int32{80}, age: 2 * time.Second},
			{name: "new-2", hash: "h2", node: "gated", ports: []int32{80}, age: time.Second},
		},
		published: []string{"b"}, eligible: three, replicas: 2, maxUnavailable: 1,
		want:   map[string]string{"new-1": "a", "new-2": "wait"},
		reason: map[string]string{"new-1": HomeReplaces, "new-2": HomeBusy},
	}, {
		name: "the wait for a busy home ends",
		pods: []homePod{
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "a", ports: []int32{80}, ready: true},
			{name: "new-2", hash: "h2", node: "gated", ports: []int32{80}, age: 30*time.Second + HomeWaitLimit},
		},
		published: []string{"a", "b"}, eligible: three, replicas: 2, maxUnavailable: 1,
		want: map[string]string{"new-2": ""}, reason: map[string]string{"new-2": HomeWaitOver},
	}, {
		// The soak's upgrade of churn (3 replicas, one node back from
		// maintenance): a new proxy on a, an old one on c, two gated. The
		// rollout keeps 2 available and has only those 2: it takes no old
		// proxy down while a gated pod is unavailable, so the first goes
		// to the scheduler (node b) at once, not after HomeWaitLimit; once
		// it has started, the rollout can free c, and the second waits for it.
		name: "a home the rollout cannot free: the pod goes to the scheduler at once",
		pods: []homePod{
			{name: "old-c", hash: "h1", node: "c", ports: []int32{80}, ready: true},
			{name: "new-a", hash: "h2", node: "a", ports: []int32{80}, ready: true},
			{name: "new-2", hash: "h2", node: "gated", ports: []int32{80}, age: 2 * time.Second},
			{name: "new-3", hash: "h2", node: "gated", ports: []int32{80}, age: time.Second},
		},
		published: []string{"a", "c"}, eligible: three, replicas: 3, maxUnavailable: 1,
		want:   map[string]string{"new-2": "", "new-3": "wait"},
		reason: map[string]string{"new-2": HomeRolloutBlocked, "new-3": HomeBusy},
	}, {
		name: "a Service's only proxy is not taken down first: its successor goes elsewhere",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "gated", ports: []int32{80}},
		},
		published: []string{"a"}, eligible: three,
		want: map[string]string{"new-1": ""}, reason: map[string]string{"new-1": HomeNone},
	}, {
		name: "a restarted proxy comes back on its node once the old one is gone",
		pods: []homePod{
			{name: "broken", hash: "h1", node: "a", ports: []int32{80}, terminating: true},
			{name: "other", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "again", hash: "h1", node: "gated", ports: []int32{80}},
		},
		published: []string{"b"}, eligible: three,
		want: map[string]string{"again": "a"},
	}, {
		name: "a failed node's proxy is replaced wherever the scheduler finds room",
		pods: []homePod{
			{name: "other", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "again", hash: "h1", node: "gated", ports: []int32{80}},
		},
		published: []string{"a", "b"}, eligible: []string{"b", "c"},
		want: map[string]string{"again": ""}, reason: map[string]string{"again": HomeNone},
	}, {
		name: "a new Service and a scale-up replace nothing",
		pods: []homePod{
			{name: "p1", hash: "h1", node: "a", ports: []int32{80}, ready: true},
			{name: "p2", hash: "h1", node: "gated", ports: []int32{80}},
			{name: "p3", hash: "h1", node: "gated", ports: []int32{80}},
		},
		published: []string{"a"}, eligible: three,
		want: map[string]string{"p2": "", "p3": ""},
	}, {
		name: "a pod pinned to a node that left is deleted, one still pending on an eligible node stays",
		pods: []homePod{
			{name: "stranded", hash: "h1", node: "pinned:a", ports: []int32{80}},
			{name: "waiting", hash: "h1", node: "pinned:b", ports: []int32{80}},
		},
		published: []string{"a", "b"}, eligible: []string{"b", "c"},
		want: map[string]string{"stranded": "delete"}, reason: map[string]string{"stranded": HomeGone},
	}, {
		name: "a node where another Service holds the new port is no home",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true},
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "gated", ports: []int32{81}},
		},
		others:    []homePod{{name: "other-service", hash: "x", node: "a", ports: []int32{81}, ready: true}},
		published: []string{"a", "b"}, eligible: three,
		want: map[string]string{"new-1": "b"},
	}, {
		name: "Local: a proxy moved off a node without endpoints goes next to one, not back",
		pods: []homePod{
			{name: "moved", hash: "h1", node: "a", ports: []int32{80}, ready: true, terminating: true},
			{name: "again", hash: "h1", node: "gated", ports: []int32{80}},
		},
		published: []string{"a"}, eligible: three, endpoints: []string{"c"},
		want: map[string]string{"again": "c"},
	}, {
		name: "Local: with every node with an endpoint taken, a proxy waits gated",
		pods: []homePod{
			{name: "there", hash: "h1", node: "c", ports: []int32{80}, ready: true},
			{name: "second", hash: "h1", node: "gated", ports: []int32{80}},
		},
		published: []string{"c"}, eligible: three, endpoints: []string{"c"},
		want: map[string]string{"second": "wait"}, reason: map[string]string{"second": HomeNoEndpoint},
	}, {
		name: "Local: before any endpoint, proxies go where the scheduler puts them",
		pods: []homePod{
			{name: "p1", hash: "h1", node: "gated", ports: []int32{80}},
		},
		eligible: three, endpoints: []string{},
		want: map[string]string{"p1": ""}, reason: map[string]string{"p1": HomeNone},
	}, {
		name: "a pinned pod still pending holds its node for its template",
		pods: []homePod{
			{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true},
			{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true},
			{name: "new-1", hash: "h2", node: "pinned:a", ports: []int32{81}},
			{name: "new-2", hash: "h2", node: "gated", ports: []int32{81}},
		},
		published: []string{"a", "b"}, eligible: three,
		want: map[string]string{"new-2": "b"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pods []*corev1.Pod
			for _, hp := range tt.pods {
				pods = append(pods, hp.pod())
			}
			others := slices.Clone(pods) // own pods are among the others, and skipped
			for _, hp := range tt.others {
				others = append(others, hp.pod())
			}
			got := map[string]string{}
			reasons := map[string]string{}
			var endpoints map[string]bool
			if tt.endpoints != nil {
				endpoints = map[string]bool{}
				for _, n := range tt.endpoints {
					endpoints[n] = true
				}
			}
			in := HomeInput{Pods: pods, Others: others, Published: tt.published, Eligible: tt.eligible, Endpoints: endpoints, Replicas: tt.replicas, MaxUnavailable: tt.maxUnavailable, Now: homeNow}
			for _, h := range Homes(in) {
				v := h.Node
				switch {
				case h.Delete:
					v = "delete"
				case h.Wait > 0:
					v = "wait"
				}
				got[h.Pod.Name] = v
				reasons[h.Pod.Name] = h.Reason
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("homes %v, want %v (reasons %v)", got, tt.want, reasons)
			}
			for name, want := range tt.reason {
				if reasons[name] != want {
					t.Errorf("%s: reason %q, want %q", name, reasons[name], want)
				}
			}
		})
	}
}

// TestPinPatch: the gate goes and the pod may run only on its node; the
// API server lets a gated pod gain a node selector, and its other gates and
// its affinity stay.
func TestPinPatch(t *testing.T) {
	gated := homePod{name: "p", hash: "h", node: "gated", ports: []int32{80}}.pod()
	gated.Spec.SchedulingGates = append(gated.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "example.com/other"})
	apply := func(node, hostname string) *corev1.Pod {
		t.Helper()
		patch, err := PinPatch(node, hostname)
		if err != nil {
			t.Fatal(err)
		}
		orig, err := json.Marshal(gated)
		if err != nil {
			t.Fatal(err)
		}
		b, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		var out corev1.Pod
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	p := apply("node-2", "host-2")
	if Gated(p) || len(p.Spec.SchedulingGates) != 1 || p.Spec.SchedulingGates[0].Name != "example.com/other" {
		t.Errorf("gates %v, want only the other one left", p.Spec.SchedulingGates)
	}
	if got := contract.PinnedNode(p); got != "node-2" {
		t.Errorf("PinnedNode = %q, want node-2", got)
	}
	if !maps.Equal(p.Spec.NodeSelector, map[string]string{corev1.LabelHostname: "host-2"}) {
		t.Errorf("node selector %v, want the hostname label", p.Spec.NodeSelector)
	}
	if fmt.Sprint(p.Spec.Affinity) != fmt.Sprint(gated.Spec.Affinity) || len(p.Spec.Containers[0].Ports) != 1 {
		t.Errorf("affinity %v, containers %v changed", p.Spec.Affinity, p.Spec.Containers)
	}
	if released := apply("", ""); Gated(released) || contract.PinnedNode(released) != "" || len(released.Spec.NodeSelector) != 0 {
		t.Errorf("released without a node: gated %v, pinned to %q, node selector %v", Gated(released), contract.PinnedNode(released), released.Spec.NodeSelector)
	}
}

// TestReplacedInPlace: a published node whose Ready proxy serves none of the
// Service's new ports is kept while it is replaced next to it; a node whose
// proxy shares a port (a new image), or that is not published or eligible,
// is not.
func TestReplacedInPlace(t *testing.T) {
	pods := []*corev1.Pod{
		homePod{name: "old-a", hash: "h1", node: "a", ports: []int32{80}, ready: true, terminating: true}.pod(),
		homePod{name: "new-a", hash: "h2", node: "a", ports: []int32{81}}.pod(),
		homePod{name: "old-b", hash: "h1", node: "b", ports: []int32{80}, ready: true}.pod(),
		homePod{name: "old-c", hash: "h1", node: "c", ports: []int32{80}, ready: true}.pod(),
		homePod{name: "old-d", hash: "h1", node: "d", ports: []int32{80}, ready: true}.pod(),
		homePod{name: "new-e", hash: "h2", node: "e", ports: []int32{81}, ready: true}.pod(),
		homePod{name: "old-f", hash: "h1", node: "f", ports: []int32{80}}.pod(),
	}
	got := ReplacedInPlace(pods, []string{"a", "b", "d", "e", "f"}, []string{"a", "b", "c", "e", "f"}, []contract.PortKey{{Protocol: corev1.ProtocolTCP, Port: 81}})
	if want := map[string]bool{"a": true, "b": true}; !maps.Equal(got, want) {
		t.Errorf("ReplacedInPlace = %v, want %v", got, want)
	}
	if got := ReplacedInPlace(pods, []string{"a", "b"}, []string{"a", "b"}, []contract.PortKey{{Protocol: corev1.ProtocolTCP, Port: 80}}); len(got) != 0 {
		t.Errorf("same ports: ReplacedInPlace = %v, want none", got)
	}
}
