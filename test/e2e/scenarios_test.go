package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

const (
	scenarioNamespace = "scn"
	// localPort is the port of ExternalTrafficPolicyLocal's Service.
	localPort = 8090
)

// TestScenarios runs the controller's placement scenarios on one cluster of
// three nodes: exclusion labels, host port conflicts between replicas-1
// Services, a restart that must not write anything, cleanup on delete and
// on a class change, and externalTrafficPolicy Local following its backend.
// Each step is a method of scenariosEnv, run in this order on the same
// cluster and controller.
func TestScenarios(t *testing.T) {
	e := newScenariosEnv(t)
	t.Run("ExcludedNodesNeverHostOrPublish", e.excludedNodesNeverHostOrPublish)
	e.stopIfFailed(t)
	t.Run("PortConflict", e.portConflict)
	e.stopIfFailed(t)
	t.Run("RestartWritesNothing", e.restartWritesNothing)
	t.Run("DeleteRemovesWorkloadAndFinalizer", e.deleteRemovesWorkloadAndFinalizer)
	t.Run("OtherClassReleases", e.otherClassReleases)
	t.Run("ExternalTrafficPolicyLocal", e.externalTrafficPolicyLocal)
	if t.Failed() {
		t.Logf("controller log: %s; proxy pods: %s", e.ctl.LogPath, describePods(e.ctx, e.cs, systemNamespace))
	}
}

// scenariosEnv is TestScenarios' cluster: three nodes, the namespaces
// pulselb-system and scn, and a controller that a step may restart.
type scenariosEnv struct {
	ctx context.Context
	c   *cluster.Cluster
	cs  kubernetes.Interface
	// outer is TestScenarios' own t: the controller outlives the step that
	// restarts it.
	outer *testing.T
	// ctl is the running controller, with its metrics on metricsAddr.
	ctl         *controllerProcess
	metricsAddr string
	// nodeOf maps a node's IP to the node, ipOf a node to its IP.
	nodeOf, ipOf map[string]string
}

// newScenariosEnv starts the cluster and the controller.
func newScenariosEnv(t *testing.T) *scenariosEnv {
	c := cluster.ForTest(t, cluster.Options{Nodes: 3})
	ctx := t.Context()
	if err := c.CreateNamespaces(ctx, systemNamespace, scenarioNamespace); err != nil {
		t.Fatal(err)
	}
	e := &scenariosEnv{ctx: ctx, c: c, cs: c.Client, outer: t, metricsAddr: freeLoopbackPort(t),
		nodeOf: map[string]string{}, ipOf: c.NodeIPs()}
	for n, ip := range e.ipOf {
		e.nodeOf[ip] = n
	}
	e.ctl = runController(t, c, e.metricsAddr)
	return e
}

// stopIfFailed ends the test with the controller's log and the proxy pods
// when a step has failed, for the later steps build on it.
func (e *scenariosEnv) stopIfFailed(t *testing.T) {
	t.Helper()
	if t.Failed() {
		t.Fatalf("controller log: %s; proxy pods: %s", e.ctl.LogPath, describePods(e.ctx, e.cs, systemNamespace))
	}
}

// ingressNodes returns the nodes of svc's ingress IPs, sorted.
func (e *scenariosEnv) ingressNodes(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, e.nodeOf[in.IP])
	}
	slices.Sort(out)
	return out
}

// service returns Service scn/name, or nil if it cannot be read.
func (e *scenariosEnv) service(name string) *corev1.Service {
	svc, err := e.cs.CoreV1().Services(scenarioNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return svc
}

// proxyPodsOf lists the proxy pods of Service name.
func (e *scenariosEnv) proxyPodsOf(t *testing.T, name string) []corev1.Pod {
	return listPods(e.ctx, t, e.cs, systemNamespace, contract.LabelServiceName+"="+name)
}

// workloadsOf counts the proxy Deployments and DaemonSets of Service name,
// -1 if they cannot be listed.
func (e *scenariosEnv) workloadsOf(name string) int {
	sel := metav1.ListOptions{LabelSelector: contract.LabelServiceName + "=" + name}
	d, err1 := e.cs.AppsV1().Deployments(systemNamespace).List(e.ctx, sel)
	ds, err2 := e.cs.AppsV1().DaemonSets(systemNamespace).List(e.ctx, sel)
	if err1 != nil || err2 != nil {
		return -1
	}
	return len(d.Items) + len(ds.Items)
}

// waitReleased waits until Service name has no proxy workload and no proxy
// pod left.
func (e *scenariosEnv) waitReleased(t *testing.T, name string) {
	t.Helper()
	poll(e.ctx, t, 60*time.Second, "the workload and proxy pods of "+name+" gone", func() bool {
		e.ctl.alive(t)
		return e.workloadsOf(name) == 0 && len(e.proxyPodsOf(t, name)) == 0
	})
}

// nodesOf returns the nodes pods are scheduled on, sorted.
func nodesOf(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			out = append(out, p.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out
}

// excludedNodesNeverHostOrPublish excludes node-1 and node-2 by label: a
// DaemonSet proxy and a Deployment asking for 3 replicas both run and
// publish on node-3 only, and deleting their Services removes the workloads
// and then the finalizers.
func (e *scenariosEnv) excludedNodesNeverHostOrPublish(t *testing.T) {
	ctx, cs, ctl := e.ctx, e.cs, e.ctl
	excluded := map[string]string{"node-1": contract.LabelExclude, "node-2": contract.LabelExcludeFromLB}
	for node, label := range excluded {
		labelNode(ctx, t, cs, node, label, ptr.To("true"))
	}
	// A DaemonSet proxy would run on every node the exclusion did
	// not remove, so one node is left.
	createLBService(ctx, t, cs, "excluded", 80, map[string]string{contract.AnnotationProxyMode: "daemonset"}, nil)
	var svc *corev1.Service
	poll(ctx, t, 60*time.Second, "excluded published on node-3 only", func() bool {
		ctl.alive(t)
		svc = e.service("excluded")
		return svc != nil && slices.Equal(e.ingressNodes(svc), []string{"node-3"}) && len(readyPods(ctx, t, cs, systemNamespace, contract.LabelServiceName+"=excluded")) == 1
	})
	if got := nodesOf(e.proxyPodsOf(t, "excluded")); !slices.Equal(got, []string{"node-3"}) {
		t.Errorf("proxy pods on %v, want node-3 only", got)
	}
	if got := svc.Annotations[contract.AnnotationNodes]; got != "node-3" {
		t.Errorf("%s = %q, want node-3", contract.AnnotationNodes, got)
	}
	// A Deployment asking for 3 replicas is capped to the one node.
	createLBService(ctx, t, cs, "excluded-deploy", 81, map[string]string{contract.AnnotationReplicas: "3"}, nil)
	poll(ctx, t, 60*time.Second, "excluded-deploy published on node-3 only", func() bool {
		ctl.alive(t)
		svc = e.service("excluded-deploy")
		return svc != nil && slices.Equal(e.ingressNodes(svc), []string{"node-3"})
	})
	d, err := cs.AppsV1().Deployments(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelServiceName + "=excluded-deploy"})
	if err != nil || len(d.Items) != 1 || *d.Items[0].Spec.Replicas != 1 {
		t.Errorf("excluded-deploy Deployments %v (%v), want one with 1 replica", d, err)
	}
	if got := nodesOf(e.proxyPodsOf(t, "excluded-deploy")); !slices.Equal(got, []string{"node-3"}) {
		t.Errorf("excluded-deploy proxy pods on %v, want node-3 only", got)
	}

	// Deleting a Service removes its workload and then the finalizer,
	// which lets the Service go.
	for _, name := range []string{"excluded", "excluded-deploy"} {
		if err := cs.CoreV1().Services(scenarioNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"excluded", "excluded-deploy"} {
		e.waitReleased(t, name)
		poll(ctx, t, 30*time.Second, name+" deleted (finalizer removed)", func() bool {
			_, err := cs.CoreV1().Services(scenarioNamespace).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
	for node, label := range excluded {
		labelNode(ctx, t, cs, node, label, nil)
	}
}

// portConflict fills port 80 on every node with replicas-1 Services p1-p3: a
// fourth, p4, is not published and says why, in a ProxiesScheduled
// condition and a Warning Event that name the port and every node.
func (e *scenariosEnv) portConflict(t *testing.T) {
	ctx, c, cs, ctl := e.ctx, e.c, e.cs, e.ctl
	one := map[string]string{contract.AnnotationReplicas: "1"}
	for _, name := range []string{"p1", "p2", "p3"} {
		createLBService(ctx, t, cs, name, 80, one, nil)
	}
	var holders []string
	poll(ctx, t, 60*time.Second, "p1, p2 and p3 each published on one node", func() bool {
		ctl.alive(t)
		holders = nil
		for _, name := range []string{"p1", "p2", "p3"} {
			svc := e.service(name)
			if svc == nil || len(svc.Status.LoadBalancer.Ingress) != 1 {
				return false
			}
			holders = append(holders, e.ingressNodes(svc)...)
		}
		return true
	})
	slices.Sort(holders)
	if !slices.Equal(holders, c.Nodes()) {
		t.Fatalf("p1, p2, p3 published on %v, want one each on %v", holders, c.Nodes())
	}

	createLBService(ctx, t, cs, "p4", 80, one, nil)
	var cond *metav1.Condition
	poll(ctx, t, 60*time.Second, "p4 with "+status.ConditionProxiesScheduled+"=False PortConflict", func() bool {
		ctl.alive(t)
		svc := e.service("p4")
		if svc == nil {
			return false
		}
		for i := range svc.Status.Conditions {
			if svc.Status.Conditions[i].Type == status.ConditionProxiesScheduled {
				cond = &svc.Status.Conditions[i]
			}
		}
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "PortConflict"
	})
	mentionsPortAndNodes := func(msg string) bool {
		if !strings.Contains(msg, "TCP:80") {
			return false
		}
		for _, n := range c.Nodes() {
			if !strings.Contains(msg, n) {
				return false
			}
		}
		return true
	}
	if !mentionsPortAndNodes(cond.Message) {
		t.Errorf("condition message %q does not name TCP:80 and every node", cond.Message)
	}
	var event string
	poll(ctx, t, 30*time.Second, "a PortConflict Event on p4", func() bool {
		l, err := cs.CoreV1().Events(scenarioNamespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=p4,reason=PortConflict"})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		event = l.Items[0].Message
		return l.Items[0].Type == corev1.EventTypeWarning
	})
	if !mentionsPortAndNodes(event) {
		t.Errorf("PortConflict Event %q does not name TCP:80 and every node", event)
	}
	if svc := e.service("p4"); svc == nil || len(svc.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("p4 has ingress %v with no proxy running", svc.Status.LoadBalancer.Ingress)
	}
	t.Logf("p4: condition %q; event %q", cond.Message, event)
}

// restartWritesNothing kills the controller and starts another: once it has
// reconciled every Service, no resourceVersion has changed and it has
// written nothing.
func (e *scenariosEnv) restartWritesNothing(t *testing.T) {
	ctx, cs := e.ctx, e.cs
	before := resourceVersions(ctx, t, cs)
	e.ctl.kill(t)
	e.ctl = runController(e.outer, e.c, e.metricsAddr)
	ctl := e.ctl
	services, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Idle: every Service reconciled since the start and nothing
	// queued.
	poll(ctx, t, 60*time.Second, fmt.Sprintf("the restarted controller idle after reconciling %d Services", len(services.Items)), func() bool {
		ctl.alive(t)
		m, err := cluster.ScrapeMetrics("http://" + e.metricsAddr + "/metrics")
		if err != nil {
			return false
		}
		synced := m[`pulselb_controller_sync_duration_seconds_count{queue="services",result="ok"}`]
		depth, ok := m[`pulselb_controller_workqueue_depth{queue="services"}`]
		return synced >= float64(len(services.Items)) && ok && depth == 0
	})
	after := resourceVersions(ctx, t, cs)
	for k, rv := range before {
		if after[k] != rv {
			t.Errorf("%s: resourceVersion %s before the restart, %s after", k, rv, after[k])
		}
	}
	m, err := cluster.ScrapeMetrics("http://" + e.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for series, v := range m {
		if strings.HasPrefix(series, "pulselb_controller_writes_total") && v > 0 {
			t.Errorf("restarted controller wrote: %s = %v", series, v)
		}
	}
	t.Logf("%d resourceVersions unchanged across the restart", len(before))
}

// deleteRemovesWorkloadAndFinalizer deletes p1: its workload and then its
// finalizer go, and p4 takes the freed port.
func (e *scenariosEnv) deleteRemovesWorkloadAndFinalizer(t *testing.T) {
	ctx, cs, ctl := e.ctx, e.cs, e.ctl
	if err := cs.CoreV1().Services(scenarioNamespace).Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReleased(t, "p1")
	poll(ctx, t, 30*time.Second, "p1 deleted (finalizer removed)", func() bool {
		_, err := cs.CoreV1().Services(scenarioNamespace).Get(ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// p4 gets the freed port.
	poll(ctx, t, 60*time.Second, "p4 published once p1's port is free", func() bool {
		ctl.alive(t)
		svc := e.service("p4")
		return svc != nil && len(svc.Status.LoadBalancer.Ingress) == 1
	})
}

// otherClassReleases moves p2 to another load balancer class: pulselb
// removes its workload, finalizer, status, annotations and conditions.
func (e *scenariosEnv) otherClassReleases(t *testing.T) {
	ctx, cs, ctl := e.ctx, e.cs, e.ctl
	// The API allows no class change on a LoadBalancer Service:
	// moving to another class goes through another type.
	svc := e.service("p2")
	if svc == nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
		t.Fatalf("p2 not published before the class change: %v", svc)
	}
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc, err := cs.CoreV1().Services(scenarioNamespace).Update(ctx, svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.LoadBalancerClass = ptr.To("example.com/other")
	if _, err := cs.CoreV1().Services(scenarioNamespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReleased(t, "p2")
	poll(ctx, t, 30*time.Second, "p2 without pulselb's finalizer, status, annotations and conditions", func() bool {
		ctl.alive(t)
		svc := e.service("p2")
		if svc == nil || slices.Contains(svc.Finalizers, lbFinalizer) || len(svc.Status.LoadBalancer.Ingress) > 0 {
			return false
		}
		for _, k := range []string{contract.AnnotationExternalIPs, contract.AnnotationInternalIPs, contract.AnnotationNodes} {
			if _, ok := svc.Annotations[k]; ok {
				return false
			}
		}
		for _, cond := range svc.Status.Conditions {
			if strings.HasPrefix(cond.Type, contract.Prefix) {
				return false
			}
		}
		return true
	})
}

// externalTrafficPolicyLocal: a Service with externalTrafficPolicy Local,
// created before its backend, has an address at once (its proxies are not
// held Pending by the lack of a backend); once its one backend runs on
// node-2 it is published on node-2 only (localServedOn); moving the backend
// to node-3 moves the proxy and the published IP.
func (e *scenariosEnv) externalTrafficPolicyLocal(t *testing.T) {
	ctx, cs := e.ctx, e.cs
	const port = localPort
	dep := cluster.EchoDeployment(scenarioNamespace, "local", 1, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-2"}
	dep.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(1))
	labels := dep.Spec.Selector.MatchLabels
	createLBService(ctx, t, cs, "local", port, nil, func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.Selector = labels
		s.Spec.Ports[0].TargetPort = intstr.FromString("http")
	})
	created := time.Now()
	poll(ctx, t, 90*time.Second, "local published before any backend exists", func() bool {
		svc, err := cs.CoreV1().Services(scenarioNamespace).Get(ctx, "local", metav1.GetOptions{})
		return err == nil && len(svc.Status.LoadBalancer.Ingress) > 0
	})
	t.Logf("local published without a backend %s after its creation", time.Since(created).Round(10*time.Millisecond))
	if _, err := cs.AppsV1().Deployments(scenarioNamespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	waitPodsRunningIn(ctx, t, cs, scenarioNamespace, "app=local", 1)

	e.localServedOn(t, "node-2")
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"node-3"}}}}}`)
	if _, err := cs.AppsV1().Deployments(scenarioNamespace).Patch(ctx, "local", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.localServedOn(t, "node-3")
}

// localServedOn waits until Service scn/local's one backend runs on node
// and local is published on node only, with its one ready proxy there;
// then a client reaches the backend through node's IP, the backend sees a
// source on node (no hop through another node), and no other node's IP
// answers.
func (e *scenariosEnv) localServedOn(t *testing.T, node string) {
	ctx, c, cs, ctl, ipOf := e.ctx, e.c, e.cs, e.ctl, e.ipOf
	const port = localPort
	var backend corev1.Pod
	poll(ctx, t, 60*time.Second, "the one backend running on "+node, func() bool {
		pods := readyPods(ctx, t, cs, scenarioNamespace, "app=local")
		all := listPods(ctx, t, cs, scenarioNamespace, "app=local")
		if len(pods) != 1 || len(all) != 1 || pods[0].Spec.NodeName != node {
			return false
		}
		backend = pods[0]
		return true
	})
	poll(ctx, t, 90*time.Second, "local published on "+node+" only, with its ready proxies all there", func() bool {
		ctl.alive(t)
		svc, err := cs.CoreV1().Services(scenarioNamespace).Get(ctx, "local", metav1.GetOptions{})
		if err != nil || len(svc.Status.LoadBalancer.Ingress) != 1 || svc.Status.LoadBalancer.Ingress[0].IP != ipOf[node] {
			return false
		}
		proxies := readyPods(ctx, t, cs, systemNamespace, contract.LabelServiceName+"=local")
		for _, p := range proxies {
			if p.Spec.NodeName != node {
				return false
			}
		}
		return len(proxies) == 1
	})
	poll(ctx, t, 60*time.Second, "no proxy pod of local left on a node other than "+node, func() bool {
		for _, p := range listPods(ctx, t, cs, systemNamespace, contract.LabelServiceName+"=local") {
			if p.Spec.NodeName != "" && p.Spec.NodeName != node {
				return false
			}
		}
		return true
	})
	nodeObj, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podCIDR, err := netip.ParsePrefix(nodeObj.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("node %s pod CIDR %q: %v", node, nodeObj.Spec.PodCIDR, err)
	}
	url := fmt.Sprintf("http://%s:%d/", ipOf[node], port)
	var answer string
	poll(ctx, t, 30*time.Second, "the backend on "+node+" answering "+url, func() bool {
		out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
		answer = string(out)
		name, _ := field(answer, "name")
		return err == nil && name == scenarioNamespace+"/"+backend.Name
	})
	client, _ := field(answer, "client")
	src, err := netip.ParseAddrPort(client)
	if err != nil {
		t.Fatalf("backend answer %q: client %q: %v", answer, client, err)
	}
	if !podCIDR.Contains(src.Addr()) && src.Addr().String() != ipOf[node] {
		t.Errorf("backend on %s saw the client as %s, which is not on %s (pod CIDR %s, IP %s)", node, src.Addr(), node, podCIDR, ipOf[node])
	}
	t.Logf("through %s: %s", url, strings.TrimSpace(answer))
	for other, ip := range ipOf {
		if other == node {
			continue
		}
		u := fmt.Sprintf("http://%s:%d/", ip, port)
		if out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", u); err == nil {
			t.Errorf("%s answered through %s, which has no local endpoint: %s", u, other, out)
		}
	}
}

// createLBService creates a LoadBalancer Service in the scenario namespace
// with one TCP port.
func createLBService(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, port int32,
	annotations map[string]string, mutate func(*corev1.Service)) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: scenarioNamespace, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "p", Port: port, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if mutate != nil {
		mutate(svc)
	}
	if _, err := cs.CoreV1().Services(scenarioNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

// labelNode sets (value non-nil) or removes a node label.
func labelNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, node, label string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = strconv.Quote(*value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, label, v)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling node %s: %v", node, err)
	}
}

// resourceVersions returns the resourceVersion of every Service in the
// scenario namespace and every proxy workload, by "kind ns/name".
func resourceVersions(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	svcs, err := cs.CoreV1().Services(scenarioNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		out["Service "+s.Namespace+"/"+s.Name] = s.ResourceVersion
	}
	deps, err := cs.AppsV1().Deployments(systemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		out["Deployment "+d.Namespace+"/"+d.Name] = d.ResourceVersion
	}
	if len(svcs.Items) == 0 || len(deps.Items) == 0 {
		t.Fatalf("nothing to compare: %d Services, %d Deployments", len(svcs.Items), len(deps.Items))
	}
	return out
}

// runController starts `pulselb controller` with the admin kubeconfig, no
// leader election, no DNS, verdicts from node labels only, and metrics on
// metricsAddr. Unlike startController it can be killed and started again
// within a test; each run logs to its own file in the cluster's logs.
func runController(t *testing.T, c *cluster.Cluster, metricsAddr string) *controllerProcess {
	t.Helper()
	p := launchController(t, c, scenario.ControllerOptions{
		Metrics: metricsAddr,
		Log:     "pulselb-controller-*.log",
		Args:    []string{"--probe-reports=false", "--v=2"},
	})
	t.Cleanup(func() {
		if !p.Exited() { // else killed by the test
			p.stop(t)
		}
	})
	return p
}

// kill stops the controller with SIGKILL, as a crash or a node loss would,
// and waits for it to exit.
func (p *controllerProcess) kill(t *testing.T) {
	t.Helper()
	p.alive(t)
	if err := p.Kill(); err != nil {
		t.Fatalf("killing pulselb controller: %v", err)
	}
}
