package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/placement"
)

// replicaSetOf returns a ReplicaSet of d's template, controlled by the
// Deployment d names with uid, made at created, with n pods.
func replicaSetOf(d *appsv1.Deployment, suffix string, uid types.UID, created time.Time, n int32) *appsv1.ReplicaSet {
	l := map[string]string{"pod-template-hash": suffix}
	for k, v := range d.Spec.Template.Labels {
		l[k] = v
	}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: systemNS, Name: d.Name + "-" + suffix, UID: types.UID("rs-" + suffix), Labels: l,
			CreationTimestamp: metav1.NewTime(created),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: uid,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr.To(n), Template: d.Spec.Template},
		Status: appsv1.ReplicaSetStatus{Replicas: n},
	}
}

// TestReaper: a proxy ReplicaSet whose Deployment is gone is scaled to
// zero once reapGrace has passed, and deleted once it has no pod; the
// ReplicaSets of Deployments that exist (in the cache, or only on the API
// server so far) are left alone.
func TestReaper(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := placement.Config{Namespace: systemNS, Image: "x"}
	web, _ := placement.Desired(newService("web"), nil, cfg)
	api, _ := placement.Desired(newService("api"), nil, cfg)
	fresh, _ := placement.Desired(newService("fresh"), nil, cfg)
	// web was deleted and re-created: its Deployment now has uid-new, and
	// the old one's ReplicaSet is still there.
	current := web.Deployment.DeepCopy()
	current.UID = "uid-new"
	apiDep := api.Deployment.DeepCopy()
	apiDep.UID = "uid-api"
	freshDep := fresh.Deployment.DeepCopy()
	freshDep.UID = "uid-fresh"
	old := replicaSetOf(web.Deployment, "old", "uid-old", testNow.Add(-time.Minute), 2)
	objects := []runtime.Object{current, apiDep, old,
		replicaSetOf(current, "new", "uid-new", testNow.Add(-time.Minute), 2),
		replicaSetOf(apiDep, "api", "uid-api", testNow.Add(-time.Minute), 1),
		// Made a moment ago by a Deployment the cache has not seen yet.
		replicaSetOf(freshDep, "fresh", "uid-fresh", testNow, 1),
	}
	f := newFixture(t, objects...)
	c := f.controller(ctx)
	// The API server has the fresh Deployment; the cache does not.
	if _, err := f.client.AppsV1().Deployments(systemNS).Create(ctx, freshDep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()

	if err := c.findGhosts(ctx); err != nil {
		t.Fatal(err)
	}
	sweep := func(want ...string) {
		t.Helper()
		f.client.ClearActions()
		if err := c.sweepGhosts(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.writes(); !slices.Equal(got, want) {
			t.Errorf("at +%s: writes %q, want %q", c.now().Sub(testNow), got, want)
		}
	}
	// The old ReplicaSet is a minute old: due at once. The fresh one's
	// Deployment is not, until reapGrace has passed.
	sweep("patch replicasets " + old.Name)
	rs, err := f.client.AppsV1().ReplicaSets(systemNS).Get(ctx, old.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *rs.Spec.Replicas != 0 {
		t.Errorf("old ReplicaSet scaled to %d, want 0", *rs.Spec.Replicas)
	}
	// Its pods are still stopping: nothing more to do.
	sweep()
	// The ReplicaSet controller has stopped them.
	rs.Status.Replicas = 0
	if _, err := f.client.AppsV1().ReplicaSets(systemNS).UpdateStatus(ctx, rs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sweep("delete replicasets " + old.Name)
	sweep()
	// After the grace, the fresh Deployment is found on the API server and
	// its ghost forgotten, its ReplicaSet untouched.
	c.now = func() time.Time { return testNow.Add(reapGrace) }
	sweep()
	if due := c.reaper.due(c.now().Add(time.Hour)); len(due) != 0 {
		t.Errorf("ghosts left: %v", due)
	}
	left, err := f.client.AppsV1().ReplicaSets(systemNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rs := range left.Items {
		names = append(names, rs.Name)
	}
	want := []string{api.Name + "-api", fresh.Name + "-fresh", web.Name + "-new"}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("ReplicaSets left %q, want %q", names, want)
	}
}

// TestReaperMournsDeletedDeployments: a proxy Deployment pulselb deletes is
// watched for reapGrace before its ReplicaSets are looked at.
func TestReaperMournsDeletedDeployments(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, _ := placement.Desired(newService("web"), nil, placement.Config{Namespace: systemNS, Image: "x"})
	dep := w.Deployment.DeepCopy()
	dep.UID = "uid-web"
	rs := replicaSetOf(dep, "a", "uid-web", testNow.Add(-time.Hour), 1)
	f := newFixture(t, dep, rs)
	c := f.controller(ctx)
	if err := c.sync(ctx, key(newService("web"))); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); !slices.Equal(got, []string{"delete deployments " + w.Name}) {
		t.Fatalf("writes %q", got)
	}
	// The fake API server has no garbage collector: the ReplicaSet stays.
	for _, at := range []struct {
		after time.Duration
		want  []string
	}{
		{0, nil},
		{reapGrace - time.Second, nil},
		{reapGrace, []string{"patch replicasets " + rs.Name}},
	} {
		c.now = func() time.Time { return testNow.Add(at.after) }
		f.client.ClearActions()
		if err := c.sweepGhosts(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.writes(); !slices.Equal(got, at.want) {
			t.Errorf("+%s: writes %q, want %q", at.after, got, at.want)
		}
	}
}
