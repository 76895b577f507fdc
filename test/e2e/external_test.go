package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/status"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// TestExternalVantages runs an external vantage (`pulselb prober
// --external`) in the harness' client namespace, which stands for the
// Internet, with its own kubeconfig made by `pulselb vantage-kubeconfig`
// from the ServiceAccount and token Secret the docs show, against an
// install of deploy/base whose nodes have ExternalIPs. One cluster serves
// every scenario: a node's ExternalIP path broken from outside only
// (advisory: status kept, Event; required: the address leaves the
// status), the vantage itself cut off (nothing changes, a condition says
// why), and what its credentials must not do. Each step is a method of
// externalEnv, run in this order on the same cluster.
func TestExternalVantages(t *testing.T) {
	e := newExternalEnv(t)
	t.Run("Reachable", e.reachable)
	if t.Failed() {
		t.Fatalf("never steady; vantage log %s; pods %s", e.vantage.Log, describePods(e.ctx, e.cs, systemNamespace))
	}
	t.Run("ExternalPathDown", e.externalPathDown)
	t.Run("ExternalPathBack", func(t *testing.T) { e.steady(t, 30*time.Second) })
	t.Run("VantageCutOff", e.vantageCutOff)
	t.Run("VantageBack", func(t *testing.T) { e.steady(t, 60*time.Second) })
	t.Run("CredentialsLimited", e.credentialsLimited)
}

// externalEnv is TestExternalVantages' cluster: two nodes with ExternalIPs,
// deploy/base installed, the external vantage vps running in the client
// namespace, and two Services on the backend shop/web whose every status
// write is recorded: web-adv with advisory external vantages, web-req with
// required ones.
type externalEnv struct {
	ctx context.Context
	c   *cluster.Cluster
	cs  kubernetes.Interface
	dyn dynamic.Interface
	// kubeconfig is the vantage's own, made by `pulselb vantage-kubeconfig`.
	kubeconfig     string
	vantage        *scenario.Vantage
	recAdv, recReq *scenario.StatusRecorder
	// extIP holds each node's ExternalIP, all of them sorted.
	extIP map[string]string
	all   []string
	// victim is the node whose ExternalIP path ExternalPathDown breaks.
	victim string
}

// newExternalEnv starts the cluster, installs deploy/base, starts the
// vantage and creates shop/web-adv and shop/web-req.
func newExternalEnv(t *testing.T) *externalEnv {
	c := cluster.ForTest(t, cluster.Options{Nodes: 2, ExternalIPs: true, WaitForMachine: 30 * time.Minute})
	ctx := t.Context()
	cs := c.Client
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	installBase(ctx, t, c)
	if err := c.CreateNamespaces(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := createVantage(ctx, t, c, "vps")
	vantage := startVantage(t, c, "vps", kubeconfig)

	createBackend(ctx, t, cs, "web", 2, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	fast := map[string]string{contract.AnnotationAddressType: "external", contract.AnnotationProbeInterval: "300ms"}
	adv := map[string]string{contract.AnnotationExternalVantages: "advisory"}
	req := map[string]string{contract.AnnotationExternalVantages: "required"}
	for k, v := range fast {
		adv[k], req[k] = v, v
	}
	createExternalLB(ctx, t, cs, "web-adv", adv, 80)
	createExternalLB(ctx, t, cs, "web-req", req, 81)
	recAdv, recReq := scenario.RecordStatus(ctx, cs, "shop", "web-adv"), scenario.RecordStatus(ctx, cs, "shop", "web-req")

	extIP := map[string]string{}
	for _, n := range c.Nodes() {
		node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeExternalIP {
				extIP[n] = a.Address
			}
		}
	}
	all := make([]string, 0, len(extIP))
	for _, ip := range extIP {
		all = append(all, ip)
	}
	slices.Sort(all)
	return &externalEnv{ctx: ctx, c: c, cs: cs, dyn: dyn, kubeconfig: kubeconfig, vantage: vantage,
		recAdv: recAdv, recReq: recReq, extIP: extIP, all: all, victim: c.Nodes()[0]}
}

// condition returns shop/name's ExternallyReachable condition, nil if it
// has none or cannot be read.
func (e *externalEnv) condition(name string) *metav1.Condition {
	svc, err := e.cs.CoreV1().Services("shop").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return findCondition(svc.Status.Conditions, status.ConditionExternallyReachable)
}

// reason returns shop/name's ExternallyReachable condition as
// "Status/Reason", "" without one.
func (e *externalEnv) reason(name string) string {
	if c := e.condition(name); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

// steady waits until both Services publish every node's ExternalIP and are
// reachable from outside.
func (e *externalEnv) steady(t *testing.T, timeout time.Duration) {
	t.Helper()
	poll(e.ctx, t, timeout, "both Services published on every node's ExternalIP and reachable from outside", func() bool {
		if err := e.vantage.Alive(); err != nil {
			t.Fatal(err)
		}
		return slices.Equal(e.recAdv.Last(), e.all) && slices.Equal(e.recReq.Last(), e.all) &&
			e.reason("web-adv") == "True/Reachable" && e.reason("web-req") == "True/Reachable"
	})
}

// clientDrops makes the client namespace drop what it sends that matches
// match (iptables OUTPUT arguments), until t ends.
func (e *externalEnv) clientDrops(t *testing.T, match ...string) {
	t.Helper()
	rule := append([]string{"iptables", "-w", "-A", "OUTPUT"}, append(match, "-j", "DROP")...)
	if out, err := e.c.ClientExec(e.ctx, rule...); err != nil {
		t.Fatalf("%v: %v %s", rule, err, out)
	}
	t.Cleanup(func() {
		rule[2] = "-D"
		if out, err := e.c.ClientExec(e.ctx, rule...); err != nil {
			t.Errorf("%v: %v %s", rule, err, out)
		}
	})
}

// reachable waits until both Services are steady and the vantage has its
// ProbeReport external-vps.
func (e *externalEnv) reachable(t *testing.T) {
	ctx := e.ctx
	e.steady(t, 120*time.Second)
	var marked bool
	for _, r := range listReports(ctx, t, e.dyn) {
		if r.Name == "external-vps" {
			marked = true
		}
	}
	if !marked {
		t.Error("no ProbeReport external-vps")
	}
}

// externalPathDown breaks only the way in from outside to the victim's
// ExternalIP: it leaves required web-req's status and annotation, both
// Services get an Event, the dashboard shows the vantage's column Down,
// and advisory web-adv keeps every address with a False condition.
func (e *externalEnv) externalPathDown(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	victim := e.victim
	ip := e.extIP[victim]
	// Only the way in from outside breaks: the client namespace drops
	// what it sends to the victim's ExternalIP; in the cluster every
	// path works.
	e.clientDrops(t, "-d", ip)
	start := time.Now()
	poll(ctx, t, 15*time.Second, ip+" gone from web-req's status", func() bool {
		return !slices.Contains(e.recReq.Last(), ip)
	})
	gone := e.recReq.FirstWithout(ip, start)
	t.Logf("%s left web-req's status %s after the path broke", ip, gone.Sub(start).Round(10*time.Millisecond))
	svc, err := cs.CoreV1().Services("shop").Get(ctx, "web-req", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Annotations[contract.AnnotationExternalUnreachable]; got != ip {
		t.Errorf("web-req's pulselb.io/external-unreachable = %q, want %s", got, ip)
	}
	poll(ctx, t, 10*time.Second, "ExternalPathDown Events on both Services", func() bool {
		return hasEventOn(ctx, t, cs, "shop", "web-adv", "ExternalPathDown") && hasEventOn(ctx, t, cs, "shop", "web-req", "ExternalPathDown")
	})
	// The dashboard of the leading controller shows the external
	// vantage's column, Down for the victim, outside the verdict.
	poll(ctx, t, 10*time.Second, "the dashboard's external-vps column Down on "+victim+" for shop/web-adv", func() bool {
		return externalColumnState(ctx, t, c, "shop/web-adv", victim, "external-vps") == "Down"
	})
	if got := e.reason("web-adv"); got != "False/Unreachable" {
		t.Errorf("web-adv condition %s, want False/Unreachable", got)
	}
	if !slices.Equal(e.recAdv.Last(), e.all) {
		t.Errorf("advisory web-adv publishes %v, want every address %v", e.recAdv.Last(), e.all)
	}
	for _, w := range e.recAdv.Since(0) {
		if !slices.Equal(w.IPs, e.all) && w.At.After(start) {
			t.Errorf("advisory web-adv published %v at %s", w.IPs, w.At)
		}
	}
}

// vantageCutOff cuts the vantage off from every node, then from the API
// server too: a condition says why, and both Services keep every address.
func (e *externalEnv) vantageCutOff(t *testing.T) {
	ctx := e.ctx
	// The vantage loses its way to every node but still reaches the
	// API server: it says every address is down, and is not believed.
	e.clientDrops(t, "-d", "198.18.2.0/24")
	poll(ctx, t, 20*time.Second, "the condition saying the external vantages are cut off", func() bool {
		return e.reason("web-req") == "False/ExternalVantagesCutOff" && e.reason("web-adv") == "False/ExternalVantagesCutOff"
	})
	holds(ctx, t, time.Now().Add(3*time.Second), "both Services publishing every address", func() bool {
		return slices.Equal(e.recAdv.Last(), e.all) && slices.Equal(e.recReq.Last(), e.all)
	})

	// Then from everything, the API server too: its Lease lapses.
	e.clientDrops(t)
	poll(ctx, t, 30*time.Second, "the condition saying the external vantages are stale", func() bool {
		return e.reason("web-req") == "False/ExternalVantagesStale"
	})
	if c := e.condition("web-req"); c != nil && !strings.Contains(c.Message, "in-cluster verdicts") {
		t.Errorf("condition message %q does not say the status follows in-cluster verdicts", c.Message)
	}
	holds(ctx, t, time.Now().Add(3*time.Second), "both Services publishing every address", func() bool {
		return slices.Equal(e.recAdv.Last(), e.all) && slices.Equal(e.recReq.Last(), e.all)
	})
}

// credentialsLimited checks what the vantage's kubeconfig may do: its own
// report, and nothing of other reports, Leases, Secrets or pods.
func (e *externalEnv) credentialsLimited(t *testing.T) {
	ctx := e.ctx
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	vcs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vdyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reports := vdyn.Resource(deploy.ProbeReports).Namespace(systemNamespace)
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	own, err := reports.Get(ctx, "external-vps", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the vantage reading its own report: %v", err)
	}
	if _, err := reports.Update(ctx, own, dry); err != nil {
		t.Errorf("the vantage updating its own report: %v", err)
	}
	unmarked := own.DeepCopy()
	if err := unstructured.SetNestedField(unmarked.Object, false, "status", "external"); err != nil {
		t.Fatal(err)
	}
	if _, err := reports.Update(ctx, unmarked, dry); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "must be marked status.external") {
		t.Errorf("the vantage unmarking its report: %v, want Forbidden by the admission policy", err)
	}
	for _, name := range []string{"external-other", e.victim, "vps"} {
		forged := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "ProbeReport",
			"metadata": map[string]any{"name": name, "namespace": systemNamespace},
			"status":   map[string]any{"external": true},
		}}
		_, err := reports.Create(ctx, forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only its own ProbeReport") {
			t.Errorf("the vantage creating report %s: %v, want Forbidden by the admission policy", name, err)
		}
	}
	if node, err := reports.Get(ctx, e.victim, metav1.GetOptions{}); err == nil {
		if _, err := reports.Update(ctx, node, dry); !apierrors.IsForbidden(err) {
			t.Errorf("the vantage updating node %s's report: %v, want Forbidden", e.victim, err)
		}
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "pulselb-prober-" + e.victim, Namespace: systemNamespace}}
	if _, err := vcs.CoordinationV1().Leases(systemNamespace).Create(ctx, lease, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the vantage creating node %s's Lease: %v, want Forbidden", e.victim, err)
	}
	if _, err := vcs.CoreV1().Secrets(systemNamespace).Get(ctx, "pulselb-vantage-vps-token", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the vantage reading its own token Secret: %v, want Forbidden", err)
	}
	if _, err := vcs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the vantage listing Secrets: %v, want Forbidden", err)
	}
	if _, err := vcs.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the vantage listing pods: %v, want Forbidden", err)
	}
}

// createExternalLB creates the LoadBalancer Service name in shop for the
// backend web on port.
func createExternalLB(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, annotations map[string]string, port int32) {
	t.Helper()
	if _, err := cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

// createVantage creates the external vantage name as
// docs/external-vantages.md shows (scenario.CreateVantage) and checks that
// its kubeconfig, which holds a token, is readable by its owner only.
func createVantage(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) string {
	t.Helper()
	file, err := scenario.CreateVantage(ctx, c, name)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig %s: %v, mode %v; want 0600", file, err, fi.Mode())
	}
	return file
}

// startVantage runs external vantage name in the client namespace with
// kubeconfig until the test ends (scenario.StartVantage).
func startVantage(t *testing.T, c *cluster.Cluster, name, kubeconfig string) *scenario.Vantage {
	t.Helper()
	v, err := scenario.StartVantage(c, name, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Stop(); err != nil {
			t.Errorf("external vantage %s: %v", name, err)
		}
	})
	return v
}

// externalColumnState returns the state in the leading controller's
// dashboard (/api/v1/state on its pod's port 9471) of vantage's column for
// service's target on node, "" when the dashboard does not show it as an
// external vantage's.
func externalColumnState(ctx context.Context, t *testing.T, c *cluster.Cluster, service, node, vantage string) string {
	t.Helper()
	leaders := leaderPods(ctx, t, c)
	if len(leaders) != 1 || leaders[0].Status.PodIP == "" {
		return ""
	}
	url := "http://" + net.JoinHostPort(leaders[0].Status.PodIP, "9471") + "/api/v1/state"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		ExternalVantages []string `json:"externalVantages"`
		Services         []struct {
			Name    string `json:"name"`
			Targets []struct {
				Node     string `json:"node"`
				Vantages []struct {
					Vantage  string `json:"vantage"`
					External bool   `json:"external"`
					State    string `json:"state"`
				} `json:"vantages"`
			} `json:"targets"`
		} `json:"services"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || !slices.Contains(st.ExternalVantages, vantage) {
		return ""
	}
	for _, svc := range st.Services {
		if svc.Name != service {
			continue
		}
		for _, tg := range svc.Targets {
			if tg.Node != node {
				continue
			}
			for _, v := range tg.Vantages {
				if v.Vantage == vantage && v.External {
					return v.State
				}
			}
		}
	}
	return ""
}
