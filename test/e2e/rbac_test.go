package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/test/cluster"
)

// access is one request a ServiceAccount must or must not be allowed.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	if a.name != "" {
		r += " " + a.name
	}
	return a.verb + " " + r + " " + where
}

// TestRBAC installs deploy/base and asks the API server's authorizer
// (SubjectAccessReviews) what each pulselb ServiceAccount may do: every
// action its component takes must be allowed, and the listed others
// denied. Then it makes real requests with the prober's pod-bound token to
// check what RBAC cannot express: a prober may write only its own node's
// ProbeReport and Lease (the ValidatingAdmissionPolicies). Each step is a
// method of rbacEnv, run in this order on the same cluster.
func TestRBAC(t *testing.T) {
	e := newRBACEnv(t)
	for _, sa := range serviceAccountAccess() {
		t.Run(sa.sa, func(t *testing.T) { e.reviewAccess(t, sa) })
	}
	t.Run("ProxyWritesOnlyItsOwnPodsAllowListCondition", e.proxyWritesOnlyItsOwnPodsAllowListCondition)
	t.Run("ProberWritesOnlyItsOwnReport", e.proberWritesOnlyItsOwnReport)
	// RBAC lets the prober update any Lease of the namespace (its Lease's
	// name is its node's, unknown to the chart); the admission policy
	// limits it to its own, pulselb-prober-<node>, and so keeps it off
	// other probers' heartbeats and the controller's leader Lease.
	t.Run("ProberWritesOnlyItsOwnLease", e.proberWritesOnlyItsOwnLease)
	t.Run("ProberRealRequestsDenied", e.proberRealRequestsDenied)
}

// saAccess is what one ServiceAccount of pulselb-system must be allowed
// and denied.
type saAccess struct {
	sa              string
	allowed, denied []access
}

// serviceAccountAccess lists, for each ServiceAccount deploy/base creates
// and the namespace's default one, the requests its component makes
// (allowed) and a choice of others it must not make (denied).
func serviceAccountAccess() []saAccess {
	const sys = systemNamespace
	return []saAccess{{
		sa: "pulselb-controller",
		allowed: []access{
			{"list", "", "services", "", "", ""}, {"watch", "", "services", "", "", ""},
			{"update", "", "services", "", "shop", "web"}, {"update", "", "services", "status", "shop", "web"},
			{"list", "", "nodes", "", "", ""}, {"patch", "", "nodes", "", "", "node-1"},
			{"list", "discovery.k8s.io", "endpointslices", "", "", ""},
			{"create", "", "events", "", "shop", ""}, {"patch", "", "events", "", "shop", ""},
			{"list", "", "pods", "", sys, ""}, {"delete", "", "pods", "", sys, "x"}, {"patch", "", "pods", "", sys, "x"},
			{"create", "apps", "deployments", "", sys, ""}, {"update", "apps", "deployments", "", sys, "x"},
			{"delete", "apps", "daemonsets", "", sys, "x"},
			{"create", "coordination.k8s.io", "leases", "", sys, ""},
			{"update", "coordination.k8s.io", "leases", "", sys, "pulselb-controller"},
			{"watch", "pulselb.io", "probereports", "", sys, ""},
			{"list", "coordination.k8s.io", "leases", "", sys, ""}, {"watch", "coordination.k8s.io", "leases", "", sys, ""},
			{"patch", "", "nodes", "status", "", "node-1"}, {"create", "", "pods", "eviction", sys, "x"},
			{"patch", "", "pods", "status", sys, "x"}, {"create", "policy", "poddisruptionbudgets", "", sys, ""}, {"delete", "policy", "poddisruptionbudgets", "", sys, "x"},
			{"list", "apps", "replicasets", "", sys, ""}, {"patch", "apps", "replicasets", "", sys, "x"}, {"delete", "apps", "replicasets", "", sys, "x"},
		},
		denied: []access{
			{"get", "", "secrets", "", sys, "x"}, {"list", "", "secrets", "", sys, ""}, {"list", "", "secrets", "", "", ""},
			{"list", "", "configmaps", "", "", ""},
			{"delete", "", "services", "", "shop", "web"}, {"create", "", "services", "", "shop", ""},
			{"update", "", "nodes", "", "", "node-1"}, {"delete", "", "nodes", "", "", "node-1"},
			{"update", "", "nodes", "status", "", "node-1"}, {"create", "", "pods", "eviction", "shop", "x"}, {"patch", "", "pods", "status", "shop", "x"},
			{"create", "policy", "poddisruptionbudgets", "", "shop", ""},
			{"delete", "", "pods", "", "shop", "x"}, {"patch", "", "pods", "", "shop", "x"}, {"create", "", "pods", "", sys, ""}, {"create", "", "pods", "exec", sys, "x"},
			{"create", "apps", "deployments", "", "shop", ""}, {"update", "apps", "deployments", "", "kube-system", "x"},
			{"create", "apps", "replicasets", "", sys, ""}, {"delete", "apps", "replicasets", "", "shop", "x"}, {"list", "apps", "replicasets", "", "", ""},
			{"update", "coordination.k8s.io", "leases", "", sys, "other"}, {"update", "coordination.k8s.io", "leases", "", "kube-system", "x"},
			{"update", "coordination.k8s.io", "leases", "", sys, "pulselb-prober-node-1"}, {"list", "coordination.k8s.io", "leases", "", "", ""},
			{"update", "pulselb.io", "probereports", "", sys, "node-1"}, {"create", "pulselb.io", "probereports", "", sys, ""},
			{"create", "rbac.authorization.k8s.io", "rolebindings", "", sys, ""},
			{"create", "", "serviceaccounts", "token", sys, "pulselb-prober"},
			{"get", "externaldns.k8s.io", "dnsendpoints", "", "shop", "web"}, // --dnsendpoints is off in the base
		},
	}, {
		sa: "pulselb-prober",
		allowed: []access{
			{"list", "", "services", "", "", ""}, {"watch", "", "nodes", "", "", ""},
			{"list", "", "pods", "", sys, ""}, {"watch", "", "secrets", "", sys, ""},
			{"get", "pulselb.io", "probereports", "", sys, "node-1"}, {"create", "pulselb.io", "probereports", "", sys, ""},
			{"update", "pulselb.io", "probereports", "", sys, "node-1"},
			{"get", "coordination.k8s.io", "leases", "", sys, "pulselb-prober-node-1"}, {"create", "coordination.k8s.io", "leases", "", sys, ""},
			{"update", "coordination.k8s.io", "leases", "", sys, "pulselb-prober-node-1"},
		},
		denied: []access{
			{"update", "", "services", "", "shop", "web"}, {"update", "", "services", "status", "shop", "web"},
			{"get", "", "secrets", "", "default", "x"}, {"list", "", "secrets", "", "kube-system", ""}, {"list", "", "secrets", "", "", ""},
			{"patch", "", "nodes", "", "", "node-1"}, {"list", "", "pods", "", "shop", ""}, {"delete", "", "pods", "", sys, "x"},
			{"create", "apps", "deployments", "", sys, ""}, {"delete", "pulselb.io", "probereports", "", sys, "node-2"},
			{"list", "pulselb.io", "probereports", "", sys, ""}, {"update", "pulselb.io", "probereports", "", "default", "node-1"},
			{"create", "", "events", "", "shop", ""},
			{"list", "coordination.k8s.io", "leases", "", sys, ""}, {"watch", "coordination.k8s.io", "leases", "", sys, ""},
			{"delete", "coordination.k8s.io", "leases", "", sys, "pulselb-prober-node-1"},
			{"update", "coordination.k8s.io", "leases", "", "kube-node-lease", "node-1"}, {"create", "coordination.k8s.io", "leases", "", "kube-system", ""},
		},
	}, {
		// Proxy pods read their own workload's allow-list, nothing else.
		sa: "pulselb-proxy",
		allowed: []access{
			{"get", "apps", "deployments", "", sys, "pulselb-web-x"}, {"list", "apps", "deployments", "", sys, ""},
			{"watch", "apps", "deployments", "", sys, ""}, {"watch", "apps", "daemonsets", "", sys, ""},
			{"patch", "", "pods", "status", sys, "x"},
		},
		denied: []access{
			{"update", "apps", "deployments", "", sys, "x"}, {"patch", "apps", "daemonsets", "", sys, "x"},
			{"list", "apps", "deployments", "", "", ""}, {"list", "apps", "deployments", "", "shop", ""},
			{"list", "", "services", "", "", ""}, {"list", "", "pods", "", sys, ""}, {"get", "", "secrets", "", sys, "x"},
			{"list", "", "configmaps", "", sys, ""}, {"create", "", "events", "", "shop", ""},
			{"patch", "", "pods", "status", "shop", "x"}, {"patch", "", "pods", "", sys, "x"}, {"delete", "", "pods", "", sys, "x"},
			{"update", "pulselb.io", "probereports", "", sys, "node-1"}, {"update", "coordination.k8s.io", "leases", "", sys, "pulselb-prober-node-1"},
		},
	}, {
		// Nothing runs as the namespace's default ServiceAccount; it must
		// have nothing.
		sa: "default",
		denied: []access{
			{"list", "", "services", "", "", ""}, {"list", "", "pods", "", sys, ""}, {"get", "", "secrets", "", sys, "x"},
			{"update", "pulselb.io", "probereports", "", sys, "node-1"}, {"update", "coordination.k8s.io", "leases", "", sys, "pulselb-prober-node-1"},
		},
	}}
}

// rbacEnv is TestRBAC's cluster: two nodes with deploy/base installed.
type rbacEnv struct {
	ctx context.Context
	c   *cluster.Cluster
	cs  kubernetes.Interface
}

// newRBACEnv starts the cluster and installs deploy/base.
func newRBACEnv(t *testing.T) *rbacEnv {
	// The install tests wait longer for a machine other tests share.
	c := cluster.ForTest(t, cluster.Options{Nodes: 2, WaitForMachine: 20 * time.Minute})
	ctx := t.Context()
	installBase(ctx, t, c)
	return &rbacEnv{ctx: ctx, c: c, cs: c.Client}
}

// reviewAccess asks the authorizer about each of tc's requests as its
// ServiceAccount.
func (e *rbacEnv) reviewAccess(t *testing.T, tc saAccess) {
	user := "system:serviceaccount:" + systemNamespace + ":" + tc.sa
	for _, want := range []bool{true, false} {
		list := tc.allowed
		if !want {
			list = tc.denied
		}
		for _, a := range list {
			got, reason := review(e.ctx, t, e.cs, user, a)
			if got != want {
				t.Errorf("%s: %s allowed=%v, want %v (%s)", tc.sa, a, got, want, reason)
			}
		}
	}
}

// proberPod returns a ready prober pod, the one on node unless node is
// empty, whose bound tokens carry that node's name.
func (e *rbacEnv) proberPod(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	for _, p := range readyPods(e.ctx, t, e.cs, systemNamespace, "app.kubernetes.io/name=pulselb-prober") {
		if node == "" || p.Spec.NodeName == node {
			pod = &p
		}
	}
	if pod == nil {
		t.Fatalf("no ready prober pod (node %q)", node)
	}
	return pod
}

// boundTo is the reference that binds a token to pod.
func boundTo(pod *corev1.Pod) *authenticationv1.BoundObjectReference {
	return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
}

// proxyWritesOnlyItsOwnPodsAllowListCondition checks with a proxy's pod-bound
// token that a proxy may set the allow-list condition on its own pod's
// status only, and no other condition.
func (e *rbacEnv) proxyWritesOnlyItsOwnPodsAllowListCondition(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	const sys = systemNamespace
	// Two pods running as pulselb-proxy stand for proxies (a token can
	// only be bound to a pod of its ServiceAccount): the token is bound
	// to the first; every write is a dry run.
	standIn := func(name string) *corev1.Pod {
		p, err := cs.CoreV1().Pods(sys).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sys},
			Spec: corev1.PodSpec{ServiceAccountName: "pulselb-proxy", AutomountServiceAccountToken: new(false),
				Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Pods(sys).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
		return p
	}
	own, other := standIn("proxy-stand-in-a"), standIn("proxy-stand-in-b")
	cfg := tokenConfig(ctx, t, c, "pulselb-proxy", boundTo(own))
	proxyClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(pod, condition string) error {
		body := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"Applied","message":"all"}]}}`, condition)
		_, err := proxyClient.CoreV1().Pods(sys).Patch(ctx, pod, types.StrategicMergePatchType, []byte(body),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err
	}
	if err := patch(own.Name, contract.PodConditionAllowList); err != nil {
		t.Errorf("a proxy reporting its allow-list on its own pod: %v", err)
	}
	if err := patch(other.Name, contract.PodConditionAllowList); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only its own pod's status") {
		t.Errorf("a proxy writing another pod's status: %v, want Forbidden by the admission policy", err)
	}
	if err := patch(own.Name, contract.PodConditionProbed); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only the pulselb.io/allow-list condition") {
		t.Errorf("a proxy opening its own readiness gate: %v, want Forbidden by the admission policy", err)
	}
}

// proberWritesOnlyItsOwnReport checks with node-1's prober token that it may
// update node-1's ProbeReport only, and that an unbound token may not.
func (e *rbacEnv) proberWritesOnlyItsOwnReport(t *testing.T) {
	ctx, c := e.ctx, e.c
	const sys = systemNamespace
	pod := e.proberPod(t, "node-1")
	bound := proberClient(ctx, t, c, boundTo(pod))
	res := bound.Resource(probeReportResource).Namespace(sys)

	// The prober on node-1 has written node-1's report: it may update it.
	var own *unstructured.Unstructured
	poll(ctx, t, 30*time.Second, "the ProbeReport node-1", func() bool {
		var err error
		own, err = res.Get(ctx, "node-1", metav1.GetOptions{})
		return err == nil
	})
	if err := dryRunReportUpdate(ctx, res, res, "node-1"); err != nil {
		t.Errorf("the node-1 prober's token updating node-1's report: %v", err)
	}

	other := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "ProbeReport",
		"metadata": map[string]any{"name": "node-2-forged", "namespace": sys},
	}}
	for _, name := range []string{"node-2", "node-2-forged"} {
		var err error
		if cur, getErr := res.Get(ctx, name, metav1.GetOptions{}); getErr == nil {
			_, err = res.Update(ctx, cur, metav1.UpdateOptions{})
		} else {
			other.SetName(name)
			_, err = res.Create(ctx, other, metav1.CreateOptions{})
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only the ProbeReport of its own node") {
			t.Errorf("the node-1 prober's token writing report %s: %v, want Forbidden by the admission policy", name, err)
		}
	}

	// A token not bound to a pod carries no node: refused even for node-1.
	unbound := proberClient(ctx, t, c, nil).Resource(probeReportResource).Namespace(sys)
	err := dryRunReportUpdate(ctx, res, unbound, own.GetName())
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no node-name claim") {
		t.Errorf("an unbound prober token updating node-1's report: %v, want Forbidden for the missing claim", err)
	}
}

// proberWritesOnlyItsOwnLease checks with node-1's prober token that it may
// update node-1's Lease only, not another node's, a forged one or the
// leader Lease, and that an unbound token may not.
func (e *rbacEnv) proberWritesOnlyItsOwnLease(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	const sys = systemNamespace
	pod := e.proberPod(t, "node-1")
	bound, err := kubernetes.NewForConfig(tokenConfig(ctx, t, c, "pulselb-prober", boundTo(pod)))
	if err != nil {
		t.Fatal(err)
	}
	leases := bound.CoordinationV1().Leases(sys)

	// The prober on node-1 keeps node-1's Lease: it may update it.
	var own *coordinationv1.Lease
	poll(ctx, t, 30*time.Second, "the Lease pulselb-prober-node-1", func() bool {
		own, err = leases.Get(ctx, "pulselb-prober-node-1", metav1.GetOptions{})
		return err == nil
	})
	if own.Spec.HolderIdentity == nil || *own.Spec.HolderIdentity != "node-1" || own.Labels["app.kubernetes.io/name"] != "pulselb-prober" {
		t.Errorf("node-1's Lease: holder %v, labels %v; want node-1 and the prober's labels", own.Spec.HolderIdentity, own.Labels)
	}
	if err := dryRunLeaseUpdate(ctx, cs, leases, own.Name); err != nil {
		t.Errorf("the node-1 prober's token updating node-1's Lease: %v", err)
	}

	// Another node's Lease, existing or not, a forged name, and the
	// leader Lease are refused.
	poll(ctx, t, 30*time.Second, "the Lease pulselb-prober-node-2", func() bool {
		_, err := cs.CoordinationV1().Leases(sys).Get(ctx, "pulselb-prober-node-2", metav1.GetOptions{})
		return err == nil
	})
	for _, name := range []string{"pulselb-prober-node-2", "pulselb-prober-node-2-forged", "node-1", "pulselb-controller"} {
		var err error
		if _, getErr := cs.CoordinationV1().Leases(sys).Get(ctx, name, metav1.GetOptions{}); getErr == nil {
			err = dryRunLeaseUpdate(ctx, cs, leases, name)
		} else {
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sys}},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only the Lease of its own node") {
			t.Errorf("the node-1 prober's token writing Lease %s: %v, want Forbidden by the admission policy", name, err)
		}
	}

	// A token not bound to a pod carries no node: refused even for node-1.
	unbound, err := kubernetes.NewForConfig(tokenConfig(ctx, t, c, "pulselb-prober", nil))
	if err != nil {
		t.Fatal(err)
	}
	err = dryRunLeaseUpdate(ctx, cs, unbound.CoordinationV1().Leases(sys), own.Name)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no node-name claim") {
		t.Errorf("an unbound prober token updating node-1's Lease: %v, want Forbidden for the missing claim", err)
	}
}

// proberRealRequestsDenied checks with a prober's token that it may not list
// Secrets, get a Service or update one.
func (e *rbacEnv) proberRealRequestsDenied(t *testing.T) {
	ctx, c := e.ctx, e.c
	const sys = systemNamespace
	pod := e.proberPod(t, "")
	cfg := tokenConfig(ctx, t, c, "pulselb-prober", boundTo(pod))
	pc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("prober listing Secrets in default: %v, want Forbidden", err)
	}
	svc, err := pc.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("prober getting a Service: %v, want Forbidden (it reads through list and watch only)", err)
	}
	if svc == nil || svc.Name == "" {
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}}
	}
	if _, err := pc.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("prober updating a Service: %v, want Forbidden", err)
	}
}

// review asks the authorizer whether user may do a.
func review(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string, a access) (bool, string) {
	t.Helper()
	ns, _, _ := strings.Cut(strings.TrimPrefix(user, "system:serviceaccount:"), ":")
	r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("subject access review %s: %v", a, err)
	}
	return r.Status.Allowed, r.Status.Reason
}

// tokenConfig returns a client config authenticating with a token of the
// pulselb-system ServiceAccount sa, bound to obj when not nil.
func tokenConfig(ctx context.Context, t *testing.T, c *cluster.Cluster, sa string, obj *authenticationv1.BoundObjectReference) *rest.Config {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(systemNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600)), BoundObjectRef: obj},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s: %v", sa, err)
	}
	cfg := rest.AnonymousClientConfig(c.RESTConfig)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

func proberClient(ctx context.Context, t *testing.T, c *cluster.Cluster, obj *authenticationv1.BoundObjectReference) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(tokenConfig(ctx, t, c, "pulselb-prober", obj))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dryRunLeaseUpdate sends, as the client as, a dry-run update of the
// Lease name as admin reads it now. The Lease's holder renews it every few
// seconds, and the API server answers a stale resourceVersion with a
// Conflict before admission sees the request: after a Conflict the Lease is
// read again, so the answer is the one about who may write.
func dryRunLeaseUpdate(ctx context.Context, admin kubernetes.Interface, as coordinationv1client.LeaseInterface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := admin.CoordinationV1().Leases(systemNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = as.Update(ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// dryRunReportUpdate is dryRunLeaseUpdate for the ProbeReport name, read
// through get, which the prober rewrites on every change.
func dryRunReportUpdate(ctx context.Context, get, as dynamic.ResourceInterface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := get.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = as.Update(ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}
