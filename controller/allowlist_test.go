package controller

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
)

// TestAllowListCondition: the Service says whether every proxy applies the
// allow-list its workload carries: a proxy that refused it (and so refuses
// every client) makes it False at once with a Warning naming the pod; one
// still on an older list only once it is late.
func TestAllowListCondition(t *testing.T) {
	ranges := []netip.Prefix{netip.MustParsePrefix("198.18.3.0/24")}
	want := contract.AllowListHash(ranges, nil)
	withList := func(p *corev1.Pod, st corev1.ConditionStatus, msg string) *corev1.Pod {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: contract.PodConditionAllowList, Status: st, Message: msg})
		return p
	}
	for _, tt := range []struct {
		name       string
		n1, n2     func(*corev1.Pod) *corev1.Pod
		after      time.Duration
		wantStatus metav1.ConditionStatus
		wantEvent  string // substring of the Warning; "" for none
	}{
		{"both apply it", func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, want) },
			func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, want) }, 0, metav1.ConditionTrue, ""},
		{"one refused it", func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, want) },
			func(p *corev1.Pod) *corev1.Pod {
				return withList(p, corev1.ConditionFalse, "annotation pulselb.io/source-ranges: \"x\" is not a CIDR")
			}, 0, metav1.ConditionFalse, "on node n2 refuses every client: annotation pulselb.io/source-ranges"},
		{"one on an older list, in time", func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, want) },
			func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, "0123456789abcdef") }, 0, metav1.ConditionTrue, ""},
		{"one on an older list, late", func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, want) },
			func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, "0123456789abcdef") },
			allowListGrace, metav1.ConditionFalse, "on node n2 applies allow-list 0123456789abcdef"},
		{"an older proxy that does not say, late", func(p *corev1.Pod) *corev1.Pod { return withList(p, corev1.ConditionTrue, want) },
			func(p *corev1.Pod) *corev1.Pod { return p }, allowListGrace, metav1.ConditionFalse, "does not report its allow-list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := published(newService("web", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.18.3.0/24"} }), "n1,n2")
			objs := []runtime.Object{svc, tt.n1(deploymentPod(svc, "n1")), tt.n2(deploymentPod(svc, "n2"))}
			for i, n := range []string{"n1", "n2", "n3", "n4"} {
				objs = append(objs, newNode(n, "10.0.0."+string(rune('1'+i))))
			}
			f := newFixture(t, objs...)
			c := f.controller(ctx)
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			if tt.after > 0 {
				later := testNow.Add(tt.after)
				c.now = func() time.Time { return later }
				if err := c.sync(ctx, key(svc)); err != nil {
					t.Fatal(err)
				}
			}
			got := f.service(ctx, "shop", "web")
			var cond *metav1.Condition
			for i := range got.Status.Conditions {
				if got.Status.Conditions[i].Type == status.ConditionAllowListApplied {
					cond = &got.Status.Conditions[i]
				}
			}
			if cond == nil || cond.Status != tt.wantStatus {
				t.Fatalf("condition %+v, want %s", cond, tt.wantStatus)
			}
			var warned []string
			for _, e := range f.events() {
				if strings.Contains(e, status.ReasonAllowListNotApplied) {
					warned = append(warned, e)
				}
			}
			switch {
			case tt.wantEvent == "" && len(warned) > 0:
				t.Errorf("unexpected warnings %q", warned)
			case tt.wantEvent != "" && (len(warned) != 1 || !strings.Contains(warned[0], tt.wantEvent)):
				t.Errorf("warnings %q, want one with %q", warned, tt.wantEvent)
			}
		})
	}
	// No ranges, no condition.
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("open"), "n1")
	f := newFixture(t, svc, deploymentPod(svc, "n1"), newNode("n1", "10.0.0.1"))
	c := f.controller(ctx)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	for _, cond := range f.service(ctx, "shop", "open").Status.Conditions {
		if cond.Type == status.ConditionAllowListApplied {
			t.Errorf("a Service without ranges has %+v", cond)
		}
	}
}
