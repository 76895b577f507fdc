package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
)

// TestSyncAppliesWorkloadPlan: sync writes what placement.PlanWorkload
// plans, deletes only the object it planned on (UID precondition), and
// says so in Events.
func TestSyncAppliesWorkloadPlan(t *testing.T) {
	cfg := placement.Config{Namespace: systemNS, Image: "pulselb:test"}
	daemonset := func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationProxyMode: "daemonset"}
	}
	deploy, _ := placement.Desired(newService("web"), nil, cfg)
	daemon, _ := placement.Desired(newService("web", daemonset), nil, cfg)
	api, _ := placement.Desired(newService("api"), nil, cfg)
	name := deploy.Name
	withUID := func(o placement.WorkloadObject) runtime.Object {
		o = o.DeepCopyObject().(placement.WorkloadObject)
		o.SetUID(types.UID("uid-" + o.GetName()))
		return o
	}
	taken := deploy.Deployment.DeepCopy()
	taken.Labels = api.Deployment.Labels

	tests := []struct {
		name     string
		svc      *corev1.Service
		existing []runtime.Object
		// deleteConflict makes workload deletes fail their UID
		// precondition, as when the workload was re-created meanwhile.
		deleteConflict bool
		writes         []string // to deployments and daemonsets
		event          string   // prefix of one Event
	}{
		{"deployment to daemonset", newService("web", daemonset), []runtime.Object{withUID(deploy.Deployment)}, false,
			[]string{"delete deployments " + name, "create daemonsets " + name}, "Normal ProxyApplied created daemonsets"},
		{"daemonset to deployment", newService("web"), []runtime.Object{withUID(daemon.DaemonSet)}, false,
			[]string{"delete daemonsets " + name, "create deployments " + name}, "Normal ProxyApplied created deployments"},
		{"re-created before the delete", newService("web"), []runtime.Object{withUID(daemon.DaemonSet)}, true,
			[]string{"delete daemonsets " + name, "create deployments " + name}, "Normal ProxyApplied created deployments"},
		{"name taken", newService("web"), []runtime.Object{withUID(taken)}, false,
			nil, "Warning NameTaken"},
		{"not servable", newService("web", func(s *corev1.Service) { s.Spec.Ports = nil }), []runtime.Object{withUID(deploy.Deployment), withUID(api.Deployment)}, false,
			[]string{"delete deployments " + name}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t, append([]runtime.Object{tt.svc, newNode("n1", "10.0.0.1")}, tt.existing...)...)
			c := f.controller(ctx)
			if tt.deleteConflict {
				for _, res := range []string{"deployments", "daemonsets"} {
					f.client.PrependReactor("delete", res, func(a core.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), a.(core.DeleteAction).GetName(), nil)
					})
				}
			}
			if err := c.sync(ctx, key(tt.svc)); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range f.writes() {
				if strings.Contains(w, " deployments ") || strings.Contains(w, " daemonsets ") {
					got = append(got, w)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.writes, "\n") {
				t.Errorf("workload writes\n got %q\nwant %q", got, tt.writes)
			}
			for _, a := range f.client.Actions() {
				if d, ok := a.(core.DeleteAction); ok && a.GetResource().Group == "apps" {
					if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || *p.UID != types.UID("uid-"+name) {
						t.Errorf("delete %s %s with preconditions %+v, want the cached UID", a.GetResource().Resource, d.GetName(), p)
					}
				}
			}
			events := f.events()
			found := tt.event == ""
			for _, e := range events {
				found = found || strings.HasPrefix(e, tt.event)
			}
			if !found {
				t.Errorf("events %q, want one starting %q", events, tt.event)
			}
		})
	}
}

// TestDeleteWorkloadsGoesOn: a Service's workloads are all deleted even
// when one delete fails, and the failure is returned for a retry.
func TestDeleteWorkloadsGoesOn(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := placement.Config{Namespace: systemNS, Image: "pulselb:test"}
	deploy, _ := placement.Desired(newService("web"), nil, cfg)
	daemon, _ := placement.Desired(newService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{contract.AnnotationProxyMode: "daemonset"}
	}), nil, cfg)
	f := newFixture(t, deploy.Deployment, daemon.DaemonSet)
	c := f.controller(ctx)
	f.client.PrependReactor("delete", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	err := c.sync(ctx, key(newService("web")))
	if err == nil || !strings.Contains(err.Error(), "deleting deployments") {
		t.Errorf("error %v, want the failed deployment delete", err)
	}
	if _, err := f.client.AppsV1().DaemonSets(systemNS).Get(ctx, daemon.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("daemonset after the sync: %v, want deleted", err)
	}
}
