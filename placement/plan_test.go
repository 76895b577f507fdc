package placement

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pulselb/pulselb/api/contract"
)

// stored returns o as the API server would hold it: with a UID, a
// resourceVersion and a status, changed by opts.
func stored(t *testing.T, o WorkloadObject, opts ...func(metav1.Object)) WorkloadObject {
	t.Helper()
	cp := o.DeepCopyObject().(WorkloadObject)
	cp.SetUID(types.UID("uid-" + kindOf(cp) + "-" + cp.GetName()))
	cp.SetResourceVersion("7")
	switch c := cp.(type) {
	case *appsv1.Deployment:
		c.Status.ReadyReplicas = 2
	case *appsv1.DaemonSet:
		c.Status.NumberReady = 2
	}
	for _, opt := range opts {
		opt(cp)
	}
	return cp
}

func renamed(name string) func(metav1.Object) {
	return func(o metav1.Object) { o.SetName(name) }
}

func relabelled(l map[string]string) func(metav1.Object) {
	return func(o metav1.Object) { o.SetLabels(l) }
}

func hashed(h string) func(metav1.Object) {
	return func(o metav1.Object) {
		a := map[string]string{}
		for k, v := range o.GetAnnotations() {
			a[k] = v
		}
		a[contract.AnnotationSpecHash] = h
		a["example.com/by-someone-else"] = "x"
		o.SetAnnotations(a)
	}
}

func TestPlanWorkload(t *testing.T) {
	nodes := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	svc := service()
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	deploy, _ := Desired(svc, nodes, testCfg)
	daemon, _ := Desired(service(annotate(contract.AnnotationProxyMode, "daemonset")), nodes, testCfg)
	unservable, _ := Desired(service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", nil }), nodes, testCfg)
	if deploy.Deployment == nil || daemon.DaemonSet == nil || !unservable.Empty() {
		t.Fatal("fixtures: want a Deployment, a DaemonSet and no workload")
	}
	name := deploy.Name
	other, _ := Desired(service(func(s *corev1.Service) { s.Name = "api" }), nodes, testCfg)
	otherLabels := other.Deployment.Labels
	// Budgets are TestPlanBudget's.
	deploy.Budget, other.Budget = nil, nil

	tests := []struct {
		name    string
		want    Workload
		current []WorkloadObject
		// actions as "verb reason Kind/name", in order.
		actions []string
	}{
		{"nothing exists", deploy, nil,
			[]string{"create notFound Deployment/" + name}},
		{"nothing exists, daemonset mode", daemon, nil,
			[]string{"create notFound DaemonSet/" + name}},
		{"up to date", deploy, []WorkloadObject{stored(t, deploy.Deployment)},
			[]string{"none upToDate Deployment/" + name}},
		{"up to date, listed and got by name", deploy, []WorkloadObject{stored(t, deploy.Deployment), stored(t, deploy.Deployment)},
			[]string{"none upToDate Deployment/" + name}},
		{"up to date, daemonset mode", daemon, []WorkloadObject{stored(t, daemon.DaemonSet)},
			[]string{"none upToDate DaemonSet/" + name}},
		{"spec changed", deploy, []WorkloadObject{stored(t, deploy.Deployment, hashed("old"))},
			[]string{"update specChanged Deployment/" + name}},
		{"spec changed, daemonset mode", daemon, []WorkloadObject{stored(t, daemon.DaemonSet, hashed("old"))},
			[]string{"update specChanged DaemonSet/" + name}},
		{"deployment to daemonset", daemon, []WorkloadObject{stored(t, deploy.Deployment)},
			[]string{"delete modeChanged Deployment/" + name, "create notFound DaemonSet/" + name}},
		{"daemonset to deployment", deploy, []WorkloadObject{stored(t, daemon.DaemonSet)},
			[]string{"delete modeChanged DaemonSet/" + name, "create notFound Deployment/" + name}},
		{"daemonset to deployment, the deployment already created", deploy, []WorkloadObject{stored(t, deploy.Deployment), stored(t, daemon.DaemonSet)},
			[]string{"delete modeChanged DaemonSet/" + name, "none upToDate Deployment/" + name}},
		{"old name", deploy, []WorkloadObject{stored(t, deploy.Deployment, renamed("pulselb-web-old"))},
			[]string{"delete nameChanged Deployment/pulselb-web-old", "create notFound Deployment/" + name}},
		{"old name, other kind", deploy, []WorkloadObject{stored(t, daemon.DaemonSet, renamed("pulselb-web-old")), stored(t, deploy.Deployment)},
			[]string{"delete modeChanged DaemonSet/pulselb-web-old", "none upToDate Deployment/" + name}},
		{"not servable", unservable, []WorkloadObject{stored(t, deploy.Deployment), stored(t, daemon.DaemonSet, renamed("pulselb-web-old"))},
			[]string{"delete notWanted Deployment/" + name, "delete notWanted DaemonSet/pulselb-web-old"}},
		{"not servable, nothing exists", unservable, nil, nil},
		{"no service (zero workload)", Workload{}, []WorkloadObject{stored(t, daemon.DaemonSet)},
			[]string{"delete notWanted DaemonSet/" + name}},
		{"name taken by another service", deploy, []WorkloadObject{stored(t, deploy.Deployment, relabelled(otherLabels))},
			[]string{"none nameTaken Deployment/" + name}},
		{"name taken by an unlabelled workload", deploy, []WorkloadObject{stored(t, deploy.Deployment, relabelled(map[string]string{"app": "mine"}))},
			[]string{"none nameTaken Deployment/" + name}},
		{"name taken, not servable", unservable, []WorkloadObject{stored(t, deploy.Deployment, relabelled(otherLabels))}, nil},
		{"name taken in the other kind", deploy, []WorkloadObject{stored(t, daemon.DaemonSet, relabelled(otherLabels))},
			[]string{"create notFound Deployment/" + name}},
		{"another service's workload", deploy, []WorkloadObject{stored(t, other.Deployment), stored(t, deploy.Deployment)},
			[]string{"none upToDate Deployment/" + name}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := PlanWorkload(key, tt.want, tt.current)
			var got []string
			for _, a := range plan.Actions {
				got = append(got, fmt.Sprintf("%s %s %s/%s", a.Verb, a.Reason, a.Kind(), a.Object.GetName()))
			}
			if strings.Join(got, "\n") != strings.Join(tt.actions, "\n") {
				t.Errorf("actions\n got %q\nwant %q", got, tt.actions)
			}
			for _, a := range plan.Actions {
				checkAction(t, tt.want, tt.current, a)
			}
		})
	}
}

func TestPlanBudget(t *testing.T) {
	nodes := []*corev1.Node{node("n1"), node("n2"), node("n3")}
	svc := service()
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	deploy, _ := Desired(svc, nodes, testCfg)
	daemon, _ := Desired(service(annotate(contract.AnnotationProxyMode, "daemonset")), nodes, testCfg)
	other, _ := Desired(service(func(s *corev1.Service) { s.Name = "api" }), nodes, testCfg)
	name := deploy.Name
	owned := func(d WorkloadObject) func(metav1.Object) {
		return func(o metav1.Object) {
			o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.GetName(), UID: d.GetUID()}})
		}
	}
	dep := stored(t, deploy.Deployment)
	recreated := stored(t, deploy.Deployment, func(o metav1.Object) { o.SetUID("uid-new") })
	tests := []struct {
		name    string
		want    Workload
		current []WorkloadObject
		actions []string
		owner   types.UID // of a created or updated budget
	}{
		{"nothing exists: the budget waits for its Deployment", deploy, nil,
			[]string{"create notFound Deployment/" + name, "none awaitingOwner PodDisruptionBudget/" + name}, ""},
		{"the Deployment exists", deploy, []WorkloadObject{dep},
			[]string{"none upToDate Deployment/" + name, "create notFound PodDisruptionBudget/" + name}, dep.GetUID()},
		{"up to date", deploy, []WorkloadObject{dep, stored(t, deploy.Budget, owned(dep))},
			[]string{"none upToDate Deployment/" + name, "none upToDate PodDisruptionBudget/" + name}, ""},
		{"spec changed", deploy, []WorkloadObject{dep, stored(t, deploy.Budget, owned(dep), hashed("old"))},
			[]string{"none upToDate Deployment/" + name, "update specChanged PodDisruptionBudget/" + name}, dep.GetUID()},
		{"the Deployment was created again", deploy, []WorkloadObject{recreated, stored(t, deploy.Budget, owned(dep))},
			[]string{"none upToDate Deployment/" + name, "update ownerChanged PodDisruptionBudget/" + name}, "uid-new"},
		{"deployment to daemonset", daemon, []WorkloadObject{dep, stored(t, deploy.Budget, owned(dep))},
			[]string{"delete modeChanged Deployment/" + name, "create notFound DaemonSet/" + name, "delete modeChanged PodDisruptionBudget/" + name}, ""},
		{"not wanted", Workload{}, []WorkloadObject{dep, stored(t, deploy.Budget, owned(dep))},
			[]string{"delete notWanted Deployment/" + name, "delete notWanted PodDisruptionBudget/" + name}, ""},
		{"old name", deploy, []WorkloadObject{dep, stored(t, deploy.Budget, owned(dep), renamed("pulselb-web-old"))},
			[]string{"none upToDate Deployment/" + name, "delete nameChanged PodDisruptionBudget/pulselb-web-old", "create notFound PodDisruptionBudget/" + name}, dep.GetUID()},
		{"another service's budget", deploy, []WorkloadObject{dep, stored(t, other.Budget), stored(t, deploy.Budget, owned(dep))},
			[]string{"none upToDate Deployment/" + name, "none upToDate PodDisruptionBudget/" + name}, ""},
		{"name taken by someone else's budget", deploy, []WorkloadObject{dep, stored(t, deploy.Budget, relabelled(map[string]string{"app": "mine"}))},
			[]string{"none upToDate Deployment/" + name, "none nameTaken PodDisruptionBudget/" + name}, ""},
		{"the Deployment's name is taken", deploy, []WorkloadObject{stored(t, deploy.Deployment, relabelled(other.Deployment.Labels))},
			[]string{"none nameTaken Deployment/" + name, "none awaitingOwner PodDisruptionBudget/" + name}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range PlanWorkload(key, tt.want, tt.current).Actions {
				got = append(got, fmt.Sprintf("%s %s %s/%s", a.Verb, a.Reason, a.Kind(), a.Object.GetName()))
				b, ok := a.Object.(*policyv1.PodDisruptionBudget)
				if !ok || (a.Verb != WorkloadCreate && a.Verb != WorkloadUpdate) {
					continue
				}
				if refs := b.OwnerReferences; len(refs) != 1 || refs[0].UID != tt.owner || refs[0].Kind != "Deployment" || refs[0].Name != name {
					t.Errorf("%s budget owned by %+v, want the Deployment %s with UID %s", a.Verb, refs, name, tt.owner)
				}
				if a.Verb == WorkloadUpdate && b.ResourceVersion != "7" {
					t.Errorf("update without the current resourceVersion: %q", b.ResourceVersion)
				}
				if b == tt.want.Budget {
					t.Error("the plan changed the desired budget in place")
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.actions, "\n") {
				t.Errorf("actions\n got %q\nwant %q", got, tt.actions)
			}
		})
	}
}

// checkAction checks what a's object is: the desired one to create; the
// desired one with the current resourceVersion to update with; a current
// one, unchanged, to delete or leave alone.
func checkAction(t *testing.T, want Workload, current []WorkloadObject, a WorkloadAction) {
	t.Helper()
	desired := want.object()
	switch a.Verb {
	case WorkloadCreate:
		if a.Object != desired {
			t.Errorf("create %s/%s: not the desired object", a.Kind(), a.Object.GetName())
		}
	case WorkloadUpdate:
		if a.Object.GetResourceVersion() != "7" || a.Object.GetUID() != "" {
			t.Errorf("update with resourceVersion %q, uid %q; want the current resourceVersion 7 and no uid",
				a.Object.GetResourceVersion(), a.Object.GetUID())
		}
		if a.Object.GetAnnotations()["example.com/by-someone-else"] != "" {
			t.Error("update keeps the current annotations; want the desired ones")
		}
		if desired.GetResourceVersion() != "" {
			t.Error("the desired object was changed")
		}
		if d, ok := a.Object.(*appsv1.Deployment); ok && (*d.Spec.Replicas != want.Replicas || d.Status.ReadyReplicas != 0) {
			t.Errorf("update with replicas %d, status %+v; want the desired %d and no status", *d.Spec.Replicas, d.Status, want.Replicas)
		}
	case WorkloadDelete, WorkloadNone:
		found := false
		for _, c := range current {
			found = found || a.Object == c
		}
		if !found {
			t.Errorf("%s %s/%s: not a current object", a.Verb, a.Kind(), a.Object.GetName())
		}
		if a.Verb == WorkloadDelete && a.Object.GetUID() == "" {
			t.Error("delete without the UID for its precondition")
		}
	}
}
