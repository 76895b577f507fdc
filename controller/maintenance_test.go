package controller

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
)

func TestPlanLeaving(t *testing.T) {
	svc := newService("web")
	fromRS := func(p *corev1.Pod) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}
		return p
	}
	fromDS := func(p *corev1.Pod) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds"}}
		return p
	}
	terminating := func(p *corev1.Pod) *corev1.Pod { p.DeletionTimestamp = &metav1.Time{}; return p }
	finished := func(p *corev1.Pod) *corev1.Pod { p.Status.Phase = corev1.PodSucceeded; return p }
	renamed := func(p *corev1.Pod, name string) *corev1.Pod { p.Name = name; return p }
	labelled := func(k string) *corev1.Node {
		n := newNode("n1", "10.0.0.1")
		n.Labels[k] = ""
		return n
	}
	tests := []struct {
		name       string
		node       *corev1.Node
		pods       []*corev1.Pod
		label      string
		evict      []string
		remaining  []string
		condStatus corev1.ConditionStatus // "" for no condition
	}{
		{"not leaving", newNode("n1", "10.0.0.1"), []*corev1.Pod{fromRS(readyPod(svc, "n1"))}, "", nil, nil, ""},
		{"maintenance", labelled(contract.LabelMaintenance),
			[]*corev1.Pod{fromRS(readyPod(svc, "n1")), fromRS(readyPod(svc, "n2")), fromDS(renamed(readyPod(svc, "n1"), "ds-n1"))},
			contract.LabelMaintenance, []string{"pulselb-web-97375646b1-n1"}, []string{"pulselb-web-97375646b1-n1", "ds-n1"}, corev1.ConditionFalse},
		{"excluded after the fact", labelled(contract.LabelExcludeFromLB), []*corev1.Pod{fromRS(readyPod(svc, "n1"))},
			contract.LabelExcludeFromLB, []string{"pulselb-web-97375646b1-n1"}, []string{"pulselb-web-97375646b1-n1"}, corev1.ConditionFalse},
		{"evicted, still draining", labelled(contract.LabelMaintenance), []*corev1.Pod{terminating(fromRS(readyPod(svc, "n1")))},
			contract.LabelMaintenance, nil, []string{"pulselb-web-97375646b1-n1"}, corev1.ConditionFalse},
		{"drained", labelled(contract.LabelExclude), []*corev1.Pod{finished(fromRS(readyPod(svc, "n1"))), fromRS(readyPod(svc, "n2"))},
			contract.LabelExclude, nil, nil, corev1.ConditionTrue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := planLeaving(tt.node, tt.pods)
			names := func(ps []*corev1.Pod) []string {
				var out []string
				for _, p := range ps {
					out = append(out, p.Name)
				}
				return out
			}
			if l.label != tt.label || !slices.Equal(names(l.evict), tt.evict) || !slices.Equal(names(l.remaining), tt.remaining) {
				t.Errorf("planLeaving = label %q, evict %q, remaining %q; want %q, %q, %q",
					l.label, names(l.evict), names(l.remaining), tt.label, tt.evict, tt.remaining)
			}
			c := l.condition()
			switch {
			case tt.condStatus == "" && c != nil:
				t.Errorf("condition %+v, want none", c)
			case tt.condStatus != "" && (c == nil || c.Status != tt.condStatus || !strings.Contains(c.Message, tt.label)):
				t.Errorf("condition %+v, want status %s naming %s", c, tt.condStatus, tt.label)
			}
		})
	}
}

// TestMaintenance: a node labelled pulselb.io/maintenance leaves every
// status at once, its Deployment proxy is evicted (so that the budget
// holds), its condition says it is draining and then that it is safe to
// drain, and it comes back when the label goes.
func TestMaintenance(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	n1, n2 := newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2")
	n1.Labels[contract.LabelMaintenance] = "true"
	p1, p2 := readyPod(svc, "n1"), readyPod(svc, "n2")
	for _, p := range []*corev1.Pod{p1, p2} {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}
	}
	f := newFixture(t, svc, n1, n2, p1, p2)
	c := f.controller(ctx)
	budgetSays := true // the budget allows the eviction
	f.client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" || budgetSays {
			return false, nil, nil
		}
		return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	})

	// The status leaves n1 at once, before any pod moved.
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if got := f.service(ctx, "shop", "web").Annotations[contract.AnnotationNodes]; got != "n2" {
		t.Errorf("published nodes %q, want n2 only", got)
	}
	f.events()

	budgetSays = false
	f.client.ClearActions()
	again, err := c.syncLeaving(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); !slices.Equal(w, []string{"create pods/eviction " + p1.Name, "patch nodes/status n1"}) {
		t.Errorf("writes with the budget exhausted %q, want an eviction tried and the condition", w)
	}
	if !again {
		t.Error("a node whose eviction waits for its budget is not looked at again")
	}
	cond := nodeCondition(t, f, "n1")
	if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != reasonDraining || !strings.Contains(cond.Message, p1.Name) {
		t.Errorf("condition %+v, want Draining naming %s", cond, p1.Name)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonNodeLeaving) {
		t.Errorf("events %q, want one NodeLeaving", ev)
	}

	budgetSays = true
	f.client.ClearActions()
	refreshNode(t, f, "n1")
	if err := c.syncNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); !slices.Equal(w, []string{"create pods/eviction " + p1.Name}) {
		t.Errorf("writes %q, want the eviction, and no condition write for the same state", w)
	}

	// The evicted pod is gone: the node is safe to drain.
	if err := f.system.Core().V1().Pods().Informer().GetIndexer().Delete(p1); err != nil {
		t.Fatal(err)
	}
	refreshNode(t, f, "n1")
	if err := c.syncNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	cond = nodeCondition(t, f, "n1")
	if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != reasonDrained {
		t.Errorf("condition %+v, want Drained", cond)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonNodeDrained) || !strings.Contains(ev[0], "safe to drain") {
		t.Errorf("events %q, want one NodeDrained saying it is safe to drain", ev)
	}

	// The label goes: the condition goes with it.
	n, err := f.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, contract.LabelMaintenance)
	if err := f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
	refreshNode(t, f, "n1")
	if err := c.syncNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if cond := nodeCondition(t, f, "n1"); cond != nil {
		t.Errorf("condition %+v after the label went, want none", cond)
	}
}

// nodeCondition returns node's ProxiesDrained condition as the API server
// holds it.
func nodeCondition(t *testing.T, f *fixture, node string) *corev1.NodeCondition {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ConditionProxiesDrained {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// refreshNode puts the API server's node into the cache, as its informer
// would.
func refreshNode(t *testing.T, f *fixture, node string) {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cluster.Core().V1().Nodes().Informer().GetIndexer().Update(n); err != nil {
		t.Fatal(err)
	}
}

// TestLeavingNodesAreDown: a node leaving, or out of service, is down for
// every Service at once, whatever the probes say.
func TestLeavingNodesAreDown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	nodes := []*corev1.Node{newNode("ok", "10.0.0.1"), newNode("maint", "10.0.0.2"), newNode("excl", "10.0.0.3"), newNode("oos", "10.0.0.4")}
	nodes[1].Labels[contract.LabelMaintenance] = "true"
	nodes[2].Labels[contract.LabelExclude] = ""
	nodes[3].Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	var pods []*corev1.Pod
	objs := []runtime.Object{svc}
	for _, n := range nodes {
		pods = append(pods, readyPod(svc, n.Name))
		objs = append(objs, n, pods[len(pods)-1])
	}
	c := newFixture(t, objs...).controller(ctx)
	h := c.health(svc, nodes, pods, contract.PublishAllPorts, nil)
	for _, n := range nodes {
		if want := n.Name != "ok"; h[n.Name].Down != want {
			t.Errorf("node %s down %t, want %t", n.Name, h[n.Name].Down, want)
		}
	}
}
