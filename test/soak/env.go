package soak

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// Names the soak shares with pulselb and deploy/base; the test module
// does not import pulselb's packages.
const (
	// Namespace holds the backend and the Services.
	Namespace = "soak"
	// Zone is deploy/base's DNS zone.
	Zone = "lb.internal."
	// Image is the image the soak installs deploy/base with (the
	// simulator runs pulselb for any image named pulselb).
	Image = "ghcr.io/pulselb/pulselb:soak"

	leaderLease     = "pulselb-controller"
	backend         = "web"
	backendPort     = 8080
	backendUDPPort  = 5353
	dnsService      = "pulselb-dns"
	labelServiceNS  = "pulselb.io/service-namespace"
	annotationMode  = "pulselb.io/proxy-mode"
	annotationRepl  = "pulselb.io/replicas"
	annotationNodes = "pulselb.io/node-selector"
	annotationProbe = "pulselb.io/probe"
	// annotationExternal is what external vantages' verdicts do to a
	// Service; conditionExternal the condition that says what they see.
	annotationExternal = "pulselb.io/external-vantages"
	conditionExternal  = "pulselb.io/ExternallyReachable"
	// vantageName is the soak's external vantage, in the client namespace.
	vantageName = "outside"
)

// service is one LoadBalancer Service of the soak.
type service struct {
	Name     string
	Port     int32
	Protocol corev1.Protocol
	// DaemonSet runs a proxy on every proxy node; else a Deployment of 2.
	DaemonSet bool
	// Client: a client outside sends it requests through DNS: HTTP to a
	// TCP Service, datagrams to be echoed to a UDP one.
	Client bool
	// ExternalRequired: the Service's addresses are published only while
	// the external vantage reaches them (pulselb.io/external-vantages:
	// required).
	ExternalRequired bool
	// Probe is the Service's pulselb.io/probe, when not the default.
	Probe string
}

// churn is the Service the soak edits, deletes and re-creates; churnPort
// the port an edit switches it to and back.
const (
	churn     = "churn"
	churnPort = 8082
)

// services are the soak's Services: deployment and daemonset mode, TCP
// and UDP, one that requires the external vantage.
var services = []service{
	{Name: "web", Port: 80, Client: true},
	{Name: "everywhere", Port: 8081, DaemonSet: true, Client: true},
	// dns's probe asks the echo backend for an answer: the default udp
	// probe takes silence for Up, and so cannot see its node cut off
	// (docs/probes.md); only the node's beacon can, which is missing while
	// the node's prober restarts (docs/health.md).
	{Name: "dns", Port: 5300, Protocol: corev1.ProtocolUDP, Client: true, Probe: "udp send=soak-probe expect=^soak-probe$"},
	{Name: churn, Port: churnPort},
	{Name: "outside", Port: 8084, Client: true, ExternalRequired: true},
}

// env is pulselb installed from deploy/base on a harness cluster with the
// soak's backend and Services.
type env struct {
	c   *cluster.Cluster
	dyn dynamic.Interface
	// backendNode runs the backend and is never faulted; proxyNodes are
	// the others.
	backendNode string
	proxyNodes  []string
	nodeIP      map[string]string
	// dnsServers are pulselb-dns's NodePort on every node, as a client
	// outside the cluster reaches it.
	dnsServers []string
	// vantage is the external vantage, which probes the Services'
	// published addresses from the client namespace.
	vantage *scenario.Vantage
	logf    func(string, ...any)
}

// setup installs deploy/base (overlaid with Image) from base, exposes
// pulselb-dns on a NodePort, starts the external vantage in the client
// namespace, creates the backend and the Services and waits until every
// Service is published and the one that requires the vantage is reachable
// from it. The caller stops the vantage (env.stop).
func setup(ctx context.Context, c *cluster.Cluster, base string, logf func(string, ...any)) (_ *env, err error) {
	nodes := c.Nodes()
	if len(nodes) < 3 {
		return nil, fmt.Errorf("the soak needs at least 3 nodes, the cluster has %d", len(nodes))
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, dyn: dyn, backendNode: nodes[len(nodes)-1], proxyNodes: nodes[:len(nodes)-1], nodeIP: c.NodeIPs(), logf: logf}
	dir, err := os.MkdirTemp(c.Dir, "soak-overlay-")
	if err != nil {
		return nil, err
	}
	objs, err := deploy.Overlay(base, Image, dir)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := scenario.InstallBase(ctx, c, objs, 90*time.Second); err != nil {
		return nil, err
	}
	logf("deploy/base installed in %s", time.Since(start).Round(time.Millisecond))
	if err := e.exposeDNS(ctx); err != nil {
		return nil, err
	}
	// As docs/external-vantages.md sets one up for the kustomize base.
	kubeconfig, err := scenario.CreateVantage(ctx, c, vantageName)
	if err != nil {
		return nil, err
	}
	if e.vantage, err = scenario.StartVantage(c, vantageName, kubeconfig); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	if err := c.CreateNamespaces(ctx, Namespace); err != nil {
		return nil, err
	}
	dep := cluster.EchoDeployment(Namespace, backend, 2, corev1.ContainerPort{Name: "http", ContainerPort: backendPort},
		corev1.ContainerPort{Name: "udp", ContainerPort: backendUDPPort, Protocol: corev1.ProtocolUDP})
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: e.backendNode}
	if _, err := c.Client.AppsV1().Deployments(Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating the backend: %w", err)
	}
	for _, s := range services {
		if err := e.createService(ctx, s); err != nil {
			return nil, err
		}
	}
	for _, s := range services {
		want := 2
		if s.DaemonSet {
			want = len(e.proxyNodes)
		}
		if err := scenario.Poll(ctx, 3*time.Minute, fmt.Sprintf("%s/%s published on %d nodes", Namespace, s.Name, want), func() bool {
			return len(e.ingress(ctx, s.Name)) == want
		}); err != nil {
			return nil, err
		}
	}
	for _, s := range services {
		if !s.ExternalRequired {
			continue
		}
		var why string
		if err := scenario.Poll(ctx, time.Minute, fmt.Sprintf("%s/%s reachable from external vantage %s", Namespace, s.Name, vantageName), func() bool {
			why = e.unreachableWhy(ctx, s.Name)
			return why == ""
		}); err != nil {
			return nil, fmt.Errorf("%w: %s; vantage log %s", err, why, e.vantage.Log)
		}
	}
	logf("every Service published %s after the install, and reachable from the external vantage", time.Since(start).Round(time.Millisecond))
	return e, nil
}

// stop stops the external vantage.
func (e *env) stop() {
	if e.vantage == nil {
		return
	}
	if err := e.vantage.Stop(); err != nil {
		e.logf("%v", err)
	}
}

// unreachableWhy says why Service name is not reachable from the external
// vantage by its condition pulselb.io/ExternallyReachable ("" when it is
// True) or because the vantage has exited.
func (e *env) unreachableWhy(ctx context.Context, name string) string {
	if err := e.vantage.Alive(); err != nil {
		return err.Error()
	}
	svc, err := e.c.Client.CoreV1().Services(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range svc.Status.Conditions {
		if c.Type == conditionExternal {
			if c.Status == metav1.ConditionTrue {
				return ""
			}
			return fmt.Sprintf("condition %s %s/%s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return "no condition " + conditionExternal
}

// exposeDNS makes pulselb-dns a NodePort Service, as a cluster without
// another load balancer exposes it to clients outside.
func (e *env) exposeDNS(ctx context.Context) error {
	svcs := e.c.Client.CoreV1().Services(scenario.SystemNamespace)
	svc, err := svcs.Get(ctx, dnsService, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s: %w", dnsService, err)
	}
	svc.Spec.Type = corev1.ServiceTypeNodePort
	if svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("making %s a NodePort Service: %w", dnsService, err)
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol != corev1.ProtocolUDP {
			continue
		}
		// The backend node first: it is never cut off.
		for _, n := range append([]string{e.backendNode}, e.proxyNodes...) {
			e.dnsServers = append(e.dnsServers, net.JoinHostPort(e.nodeIP[n], fmt.Sprint(p.NodePort)))
		}
	}
	if len(e.dnsServers) == 0 {
		return fmt.Errorf("%s has no UDP port", dnsService)
	}
	return nil
}

func (e *env) createService(ctx context.Context, s service) error {
	ann := map[string]string{annotationNodes: corev1.LabelHostname + "!=" + e.backendNode}
	if s.DaemonSet {
		ann[annotationMode] = "daemonset"
	}
	if s.ExternalRequired {
		ann[annotationExternal] = "required"
	}
	if s.Probe != "" {
		ann[annotationProbe] = s.Probe
	}
	port := corev1.ServicePort{Name: "http", Port: s.Port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}
	if s.Protocol == corev1.ProtocolUDP {
		port = corev1.ServicePort{Name: "udp", Port: s.Port, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("udp")}
	}
	_, err := e.c.Client.CoreV1().Services(Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: Namespace, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": backend},
			Ports:    []corev1.ServicePort{port},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating service %s: %w", s.Name, err)
	}
	return nil
}

// ingress returns a Service's ingress IPs; nil when it cannot be read.
func (e *env) ingress(ctx context.Context, name string) []string {
	svc, err := e.c.Client.CoreV1().Services(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return scenario.IngressOf(svc)
}

// leader returns the controller pod named by the leader Lease's holder
// ("" when it has none) and the other controller pods.
func (e *env) leader(ctx context.Context) (leader string, others []string) {
	if l, err := e.c.Client.CoordinationV1().Leases(scenario.SystemNamespace).Get(ctx, leaderLease, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
		leader = *l.Spec.HolderIdentity
		if i := strings.LastIndexByte(leader, '_'); i > 0 {
			leader = leader[:i]
		}
	}
	for _, p := range scenario.ListPods(ctx, e.c.Client, scenario.SystemNamespace, scenario.ControllerSelector) {
		if p.Name != leader {
			others = append(others, p.Name)
		}
	}
	return leader, others
}

// logDir is where the soak writes its record of faults and failures.
func (e *env) logDir() string { return filepath.Join(e.c.Dir, "logs") }
