package controller

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/placement"
)

func TestRolloutsBegin(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &rollouts{max: 2}
	steps := []struct {
		name    string
		rolling map[string]bool
		at      time.Duration
		want    bool
	}{
		{"a", nil, 0, true},
		{"b", nil, time.Second, true},
		{"c", nil, 2 * time.Second, false},                                    // a and b began, not yet in the cache
		{"a", map[string]bool{"a": true}, 3 * time.Second, true},              // a changes again mid-rollout
		{"c", map[string]bool{"a": true, "b": true}, 20 * time.Second, false}, // the cache shows both rolling
		{"c", map[string]bool{"a": true}, 30 * time.Second, true},             // b is done
		{"d", map[string]bool{"a": true, "x": true}, 31 * time.Second, false}, // someone else's rollout counts
		{"d", nil, 60 * time.Second, true},                                    // everything done
		{"e", nil, 60 * time.Second, true},
		{"f", nil, 60 * time.Second, false},
	}
	for i, s := range steps {
		if got := r.begin(s.name, s.rolling, now.Add(s.at)); got != s.want {
			t.Errorf("step %d: begin(%s) = %t, want %t", i, s.name, got, s.want)
		}
	}
	if unlimited := (&rollouts{}); !unlimited.begin("a", map[string]bool{"x": true, "y": true}, now) {
		t.Error("no limit refused a rollout")
	}
}

// TestSyncWaitsForRollouts: a new proxy image changes every Service's pod
// template, and only MaxRollouts of them roll at once; a change of
// replicas alone is never held back.
func TestSyncWaitsForRollouts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var objs []runtime.Object
	names := []string{"a", "b", "c"}
	for _, n := range names {
		svc := newService(n)
		objs = append(objs, svc, readyPod(svc, "n1"))
	}
	objs = append(objs, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"))
	f := newFixture(t, objs...)
	c := f.controller(ctx)
	for _, n := range names {
		if err := c.sync(ctx, key(newService(n))); err != nil {
			t.Fatal(err)
		}
	}
	// The Deployments are in the cache, their rollouts done.
	stored := f.stored(ctx)
	for _, o := range stored {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.Generation, d.Status = 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}
		}
	}
	f2 := newFixture(t, stored...)
	f2.cfg.MaxRollouts = 2
	f2.cfg.Placement.Image = "pulselb:next"
	c2 := f2.controller(ctx)
	var updated []string
	for _, n := range names {
		if err := c2.sync(ctx, key(newService(n))); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range f2.writes() {
		if w == "update deployments "+placement.Name("shop", "a") || w == "update deployments "+placement.Name("shop", "b") ||
			w == "update deployments "+placement.Name("shop", "c") {
			updated = append(updated, w)
		}
	}
	if want := []string{"update deployments " + placement.Name("shop", "a"), "update deployments " + placement.Name("shop", "b")}; !slices.Equal(updated, want) {
		t.Errorf("updated %q, want the first two only", updated)
	}
	// The held Service is requeued after rolloutRetry, not at once.
	if c2.queue.Len() != 0 {
		t.Errorf("queue holds %d items at once, want the held Service requeued later", c2.queue.Len())
	}
}
