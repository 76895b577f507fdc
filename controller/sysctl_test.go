package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// refusedPod is a proxy pod the kubelet of node refused for its sysctls,
// as the kubelet reports it.
func refusedPod(svc *corev1.Service, node string, created time.Time) *corev1.Pod {
	p := readyPod(svc, node)
	p.Name += "-refused"
	p.CreationTimestamp = metav1.NewTime(created)
	p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: placement.ReasonSysctlForbidden,
		Message: `Pod was rejected: forbidden sysctl: "net.ipv4.ip_forward" not allowlisted`}
	return p
}

// gatedPod is a new proxy pod waiting for its home.
func gatedPod(svc *corev1.Service, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name, Labels: contract.ProxySelector(svc),
			CreationTimestamp: metav1.NewTime(testNow)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy"}},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: contract.SchedulingGateHome}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// TestSyncSysctlForbidden: with forwarding by pod sysctls, a proxy pod the
// kubelet refused (SysctlForbidden) gives the Service a Warning Event and a
// ConfigValid condition naming the kubelet flag, and holds the Service's
// next proxy pod gated for a while instead of having it refused at once;
// the proxies that run still serve. A newer pod running on the node clears
// it; without the option, such a pod says nothing.
func TestSyncSysctlForbidden(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// Published on n1 already: its first address is not held back for
	// the proxies starting.
	svc := newService("web", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
	})
	refused := refusedPod(svc, "n2", testNow.Add(-10*time.Second))
	gated := gatedPod(svc, "web-gated")
	older := refusedPod(svc, "n2", testNow.Add(-time.Hour))
	older.Name = "web-refused-before"
	objects := func(extra ...*corev1.Pod) []runtime.Object {
		out := []runtime.Object{svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), refused}
		for _, p := range extra {
			out = append(out, p)
		}
		return out
	}
	validCondition := func(f *fixture) *metav1.Condition {
		return meta.FindStatusCondition(f.service(ctx, "shop", "web").Status.Conditions, status.ConditionConfigValid)
	}

	for _, tc := range []struct {
		name        string
		sysctls     bool
		pods        []*corev1.Pod
		wantProblem bool
		wantGated   bool
		wantDeleted bool
	}{
		{name: "refused", sysctls: true, pods: []*corev1.Pod{gated, older}, wantProblem: true, wantGated: true, wantDeleted: true},
		{name: "refused, then a newer pod runs there", sysctls: true, pods: []*corev1.Pod{func() *corev1.Pod {
			p := readyPod(svc, "n2")
			p.CreationTimestamp = metav1.NewTime(testNow)
			return p
		}()}},
		{name: "without the option", pods: []*corev1.Pod{gated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objects(tc.pods...)...)
			f.cfg.Placement.ForwardingSysctls = tc.sysctls
			c := f.controller(ctx)
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			got := f.service(ctx, "shop", "web")
			if !slices.ContainsFunc(got.Status.LoadBalancer.Ingress, func(i corev1.LoadBalancerIngress) bool { return i.IP == "10.0.0.1" }) {
				t.Errorf("ingress %v: the running proxy on n1 is not published", got.Status.LoadBalancer.Ingress)
			}
			cond := validCondition(f)
			events := f.events()
			warned := slices.ContainsFunc(events, func(e string) bool {
				return strings.HasPrefix(e, "Warning "+placement.ReasonSysctlForbidden) && strings.Contains(e, placement.KubeletSysctlFlag) && strings.Contains(e, "n2")
			})
			if tc.wantProblem {
				if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "--allowed-unsafe-sysctls=net.ipv4.ip_forward") {
					t.Errorf("ConfigValid %+v, want False naming the kubelet flag", cond)
				}
				if !warned {
					t.Errorf("events %q, want a SysctlForbidden Warning naming n2 and the kubelet flag", events)
				}
			} else {
				if cond == nil || cond.Status != metav1.ConditionTrue {
					t.Errorf("ConfigValid %+v, want True", cond)
				}
				if warned {
					t.Errorf("events %q: a SysctlForbidden Warning", events)
				}
			}
			// Of the refused pods, only the newest stays.
			if deleted := slices.Contains(f.writes(), "delete pods "+older.Name); deleted != tc.wantDeleted {
				t.Errorf("writes %q: older refused pod deleted = %v, want %v", f.writes(), deleted, tc.wantDeleted)
			}
			if slices.Contains(f.writes(), "delete pods "+refused.Name) {
				t.Errorf("writes %q: the newest refused pod deleted", f.writes())
			}
			if !slices.Contains(tc.pods, gated) {
				return
			}
			if patched := slices.Contains(f.writes(), "patch pods web-gated"); tc.wantGated == patched {
				t.Errorf("writes %q: gated pod placed = %v, want %v", f.writes(), patched, !tc.wantGated)
			}
		})
	}
}

// TestSyncSysctlForbiddenRemembered: a DaemonSet deletes the pod a kubelet
// refused at once, often before the Service's sync reads it; the refusal
// seen by the pod handler is reported all the same, until a newer pod runs
// on the node.
func TestSyncSysctlForbiddenRemembered(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}}
	})
	nodes := []runtime.Object{svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1")}
	f := newFixture(t, nodes...)
	f.cfg.Placement.ForwardingSysctls = true
	c := f.controller(ctx)
	c.enqueueOwner(cache.DeletedFinalStateUnknown{Obj: refusedPod(svc, "n2", testNow.Add(-time.Second))})
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(f.service(ctx, "shop", "web").Status.Conditions, status.ConditionConfigValid)
	if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, placement.KubeletSysctlFlag) {
		t.Fatalf("ConfigValid %+v, want False naming the kubelet flag", cond)
	}

	// A pod that runs on n2, created after the refusal: n2 is forgotten.
	running := readyPod(svc, "n2")
	running.CreationTimestamp = metav1.NewTime(testNow)
	if err := f.system.Core().V1().Pods().Informer().GetIndexer().Add(running); err != nil {
		t.Fatal(err)
	}
	if got := c.refusals.forbidden(key(svc), []*corev1.Pod{running}, []*corev1.Node{newNode("n2", "10.0.0.2")}); len(got) != 0 {
		t.Errorf("forbidden %v once a newer pod runs on n2, want none", got)
	}
	if len(c.refusals.m) != 0 {
		t.Errorf("refusals %v still remembered", c.refusals.m)
	}
}
