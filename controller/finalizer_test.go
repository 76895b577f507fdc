package controller

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
)

// TestLegacyFinalizerReplaced: a Service published by an earlier version
// carries pulselb.io/load-balancer-cleanup. The first sync after the
// upgrade replaces it with the standard finalizer in one update, keeping
// the other finalizers, and writes nothing else; the next sync writes
// nothing.
func TestLegacyFinalizerReplaced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	// Publish, then sync once more with caches that caught up: the
	// workload is complete and nothing is left to write.
	for range 2 {
		if err := f.controller(ctx).sync(ctx, key(svc)); err != nil {
			t.Fatal(err)
		}
		f = newFixture(t, f.stored(ctx)...)
	}
	var published []runtime.Object
	for _, o := range f.objects {
		if s, ok := o.(*corev1.Service); ok {
			if !slices.Equal(s.Finalizers, []string{standardFinalizer}) {
				t.Fatalf("published with finalizers %q", s.Finalizers)
			}
			s = s.DeepCopy()
			s.Finalizers = []string{"example.com/keep", "pulselb.io/load-balancer-cleanup"}
			o = s
		}
		published = append(published, o)
	}

	upgraded := newFixture(t, published...)
	if err := upgraded.controller(ctx).sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if w := upgraded.writes(); !slices.Equal(w, []string{"update services web"}) {
		t.Errorf("writes after the upgrade %q, want the one Service update", w)
	}
	got := upgraded.service(ctx, "shop", "web")
	if want := []string{"example.com/keep", standardFinalizer}; !slices.Equal(got.Finalizers, want) {
		t.Errorf("finalizers after the upgrade %q, want %q", got.Finalizers, want)
	}
	if len(got.Status.LoadBalancer.Ingress) != 2 {
		t.Errorf("ingress after the upgrade %v, want both addresses kept", got.Status.LoadBalancer.Ingress)
	}

	again := newFixture(t, upgraded.stored(ctx)...)
	if err := again.controller(ctx).sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if w := again.writes(); len(w) != 0 {
		t.Errorf("writes once replaced %q, want none", w)
	}
}
