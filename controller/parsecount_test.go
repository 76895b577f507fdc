package controller

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/dashboard"
)

// TestParsesPerServiceChange counts the contract.Parse calls of what a
// replica does after one Service's settings changed: the Service's sync,
// the round of verdicts, and the dashboard's rebuild, while every
// Service's proxies are starting (a rollout, or a cluster taken on: the
// targets read each port's rise and interval then). Each parses the
// changed Service once at most, however many other Services there are
// (issue 33; docs/architecture.md), and a round without a Service change
// parses none.
func TestParsesPerServiceChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const services = 50
	objs := []runtime.Object{}
	var first *corev1.Service
	for i := range services {
		svc := published(newService(fmt.Sprintf("web%02d", i), func(s *corev1.Service) {
			s.Spec.Ports[0].Port = int32(8000 + i)
			s.Annotations = map[string]string{contract.Prefix + "probe": `http body="ok|fine"`}
		}), "n1,n2")
		if first == nil {
			first = svc
		}
		objs = append(objs, svc, startingPod(svc, "n1", testNow, testNow), startingPod(svc, "n2", testNow, testNow))
	}
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		objs = append(objs, newNode(n, "10.0.0."+string(rune('1'+i))), proberPod(n))
	}
	f := newFixture(t, objs...)
	c := f.healthController(ctx)
	feed, err := NewDashboardFeed(c, informers.NewSharedInformerFactory(f.client, 0), informers.NewSharedInformerFactory(f.client, 0),
		dashboard.New(dashboard.Options{}), DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := testNow
	c.now = func() time.Time { return now }
	feed.now = func() time.Time { return now }
	round := func() map[string]uint64 {
		t.Helper()
		now = now.Add(time.Second)
		counts := map[string]uint64{}
		count := func(what string, do func() error) {
			t.Helper()
			before := contract.ParseCount()
			if err := do(); err != nil {
				t.Fatal(err)
			}
			counts[what] = contract.ParseCount() - before
		}
		count("sync", func() error { return c.sync(ctx, key(first)) })
		count("verdicts", func() error { return c.evaluate(ctx, healthKey) })
		count("dashboard", func() error { _, err := feed.build(); return err })
		return counts
	}
	round() // the first pass parses every Service

	changed := first.DeepCopy()
	changed.Annotations[contract.Prefix+"probe"] = `http body="ok|good"`
	if err := f.cluster.Core().V1().Services().Informer().GetIndexer().Update(changed); err != nil {
		t.Fatal(err)
	}
	got := round()
	t.Logf("contract.Parse calls after one of %d Services changed: %v", services, got)
	for what, n := range got {
		if n > 1 {
			t.Errorf("%s parsed %d times after one Service changed, want at most once", what, n)
		}
	}
	if got = round(); got["verdicts"]+got["dashboard"] != 0 {
		t.Errorf("a round without a Service change parsed %v, want nothing but the sync's own", got)
	}
}
