package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/placement"
)

// optimisticServices makes the fake clientset behave like the API server
// for Service updates: an update must carry the stored resourceVersion or
// it fails with a conflict, and a successful one increments it.
func optimisticServices(t *testing.T, f *fixture) *int {
	t.Helper()
	conflicts := 0
	f.client.PrependReactor("update", "services", func(a core.Action) (bool, runtime.Object, error) {
		u := a.(core.UpdateAction)
		in := u.GetObject().(*corev1.Service).DeepCopy()
		obj, err := f.client.Tracker().Get(a.GetResource(), in.Namespace, in.Name)
		if err != nil {
			return true, nil, err
		}
		stored := obj.(*corev1.Service)
		if in.ResourceVersion != stored.ResourceVersion {
			conflicts++
			return true, nil, apierrors.NewConflict(corev1.Resource("services"), in.Name, nil)
		}
		rv, _ := strconv.Atoi(stored.ResourceVersion)
		out := stored.DeepCopy()
		if u.GetSubresource() == "status" {
			out.Status = in.Status
		} else {
			in.Status = stored.Status
			out = in
		}
		out.ResourceVersion = strconv.Itoa(rv + 1)
		if err := f.client.Tracker().Update(a.GetResource(), out, out.Namespace); err != nil {
			return true, nil, err
		}
		return true, out.DeepCopy(), nil
	})
	return &conflicts
}

func notReadyPod(svc *corev1.Service, node string) *corev1.Pod {
	p := readyPod(svc, node)
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	return p
}

// TestSyncReadsItsOwnWrites: the informer has not seen the controller's
// writes yet when the Service is synced again; the sync starts from what
// was written, so it neither repeats the writes nor runs into conflicts.
func TestSyncReadsItsOwnWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	c := f.controller(ctx)
	conflicts := optimisticServices(t, f)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if got := f.service(ctx, "shop", "web"); got.ResourceVersion != "4" || len(got.Status.LoadBalancer.Ingress) != 2 {
		t.Fatalf("after the first sync: resourceVersion %s, ingress %v; want 4 (finalizer, annotations, status) and 2 addresses",
			got.ResourceVersion, got.Status.LoadBalancer.Ingress)
	}
	// The Deployment's informer caught up (its event is what usually
	// triggers the next sync); the Service's did not.
	deps, err := f.client.AppsV1().Deployments(systemNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("deployments %v, %v", deps, err)
	}
	if err := f.system.Apps().V1().Deployments().Informer().GetIndexer().Add(&deps.Items[0]); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatalf("second sync with the cache still at resourceVersion 1: %v", err)
	}
	// The one write is the Deployment's budget, which waits for the
	// Deployment to exist so that it can be owned by it.
	if w := f.writes(); !slices.Equal(w, []string{"create poddisruptionbudgets " + placement.Name("shop", "web")}) || *conflicts != 0 {
		t.Errorf("second sync: writes %q, %d conflicts; want the budget's creation only", w, *conflicts)
	}
}

// TestStatusSettle: a change of conditions alone is written at most once
// per statusSettle; a change of addresses is written at once.
func TestStatusSettle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web", func(s *corev1.Service) { s.Finalizers = []string{Finalizer} })
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), notReadyPod(svc, "n1"))
	c := f.controller(ctx)
	optimisticServices(t, f)
	now := testNow
	c.now = func() time.Time { return now }
	statusWrites := func() int {
		n := 0
		for _, w := range f.writes() {
			if strings.HasPrefix(w, "update services/status ") {
				n++
			}
		}
		f.client.ClearActions()
		return n
	}
	sync := func(step string, want int) {
		t.Helper()
		if err := c.sync(ctx, key(svc)); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := statusWrites(); got != want {
			t.Errorf("%s: %d status writes, want %d", step, got, want)
		}
	}
	pods := c.podIndex
	sync("first sync, one proxy scheduled", 1)

	if err := pods.Add(notReadyPod(svc, "n2")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(statusSettle / 2)
	sync("second proxy scheduled right after", 0)
	if !strings.Contains(conditionMessage(t, f, ctx), "n1") || strings.Contains(conditionMessage(t, f, ctx), "n2") {
		t.Errorf("condition written while settling: %q", conditionMessage(t, f, ctx))
	}
	now = now.Add(statusSettle / 2)
	sync("settle time passed", 1)
	if !strings.Contains(conditionMessage(t, f, ctx), "n2") {
		t.Errorf("condition %q does not name n2", conditionMessage(t, f, ctx))
	}

	if err := pods.Update(readyPod(svc, "n1")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Millisecond)
	sync("a proxy became ready: new address", 1)
	if got := f.service(ctx, "shop", "web"); len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("ingress %v, want n1's address", got.Status.LoadBalancer.Ingress)
	}
}

func conditionMessage(t *testing.T, f *fixture, ctx context.Context) string {
	t.Helper()
	for _, c := range f.service(ctx, "shop", "web").Status.Conditions {
		if c.Type == "pulselb.io/ProxiesScheduled" {
			return c.Message
		}
	}
	return ""
}
