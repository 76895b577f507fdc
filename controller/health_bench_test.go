package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/v1alpha1"
)

// scaleCluster returns a controller at the size of bench/scale: nodes
// nodes with a prober each, services Services with one port and a proxy on
// nodes i and i+nodes/2, and every prober's report, fresh, saying Up about
// every beacon and port assigned to it.
func scaleCluster(ctx context.Context, tb testing.TB, nodes, services int) (*Controller, *fixture) {
	tb.Helper()
	var objs []runtime.Object
	for i := range nodes {
		n := fmt.Sprintf("node-%04d", i)
		objs = append(objs, newNode(n, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)), proberPod(n))
	}
	for i := range services {
		svc := newService(fmt.Sprintf("svc-%04d", i), func(s *corev1.Service) {
			s.Spec.Ports[0].Port = int32(10000 + i)
		})
		objs = append(objs, published(svc, ""), readyPod(svc, fmt.Sprintf("node-%04d", i%nodes)),
			readyPod(svc, fmt.Sprintf("node-%04d", (i+nodes/2)%nodes)))
	}
	f := newFixture(tb, objs...)
	c := f.healthController(ctx)
	targets, err := c.healthTargets()
	if err != nil {
		tb.Fatal(err)
	}
	byVantage := map[string]*v1alpha1.ProbeReport{}
	for i := range nodes {
		n := fmt.Sprintf("node-%04d", i)
		byVantage[n] = report(n, 0)
	}
	for _, t := range targets {
		for _, v := range t.Vantages {
			r := byVantage[v]
			if t.Beacon {
				withBeacon(r, t.Node, v1alpha1.StateUp)
				continue
			}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: t.service.Namespace, Name: t.service.Name}}
			withResult(r, svc, t.port.Port, t.Node, v1alpha1.StateUp)
		}
	}
	for _, r := range byVantage {
		if err := c.cfg.Health.Reports.GetStore().Add(r); err != nil {
			tb.Fatal(err)
		}
	}
	return c, f
}

// BenchmarkEvaluate is one round of verdicts at 1,000 nodes and 2,000
// Services, the size of bench/scale: "steady" with nothing changed since
// the previous round (the periodic resync every second), "oneReport" after
// one prober's report changed (one port it probes going Down there, or Up
// again: a vote, not yet a verdict).
func BenchmarkEvaluate(b *testing.B) {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	c, _ := scaleCluster(ctx, b, 1000, 2000)
	if err := c.evaluate(ctx, healthKey); err != nil {
		b.Fatal(err)
	}
	b.Run("steady", func(b *testing.B) {
		for b.Loop() {
			if err := c.evaluate(ctx, healthKey); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("oneReport", func(b *testing.B) {
		store := c.cfg.Health.Reports.GetStore()
		obj, _, _ := store.GetByKey(systemNS + "/node-0007")
		r := obj.(*v1alpha1.ProbeReport)
		states := []v1alpha1.State{v1alpha1.StateDown, v1alpha1.StateUp}
		i := 0
		for b.Loop() {
			r = r.DeepCopy()
			r.Status.Results[0].State = states[i%2]
			i++
			if err := store.Update(r); err != nil {
				b.Fatal(err)
			}
			if err := c.evaluate(ctx, healthKey); err != nil {
				b.Fatal(err)
			}
		}
	})
}
