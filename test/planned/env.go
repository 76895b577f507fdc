// Package planned runs pulselb on a harness cluster for the planned-change
// scenarios of DESIGN.md ("Planned changes lose nothing") and drives those
// changes: a rolling upgrade of every proxy, maintenance and drains of
// proxy nodes, a lowered replica count, a leader lost and the probers
// rolled. The e2e scenarios (test/e2e/planned_test.go) assert on what a
// client lost during each; the benchmark (test/bench/planned) counts it.
//
// Setup installs the ProbeReport CRD and the prober DaemonSet, runs two
// `pulselb controller` processes with leader election, each serving the
// DNS zone on its own port of the harness' bridge address (so a client in
// the client namespace asks both, like a resolver with two name servers),
// an echo backend on the last node, and one LoadBalancer Service per
// ServiceConfig whose proxies may run on every other node.
package planned

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
	"github.com/pulselb/pulselb/test/traffic"
)

// Names the scenarios share with pulselb; the API's own are
// api/contract's.
const (
	SystemNamespace = "pulselb-system"
	AppNamespace    = "shop"
	// Zone is the controllers' --dns-zone.
	Zone = "lb.test."
	// Backend is the Deployment (app=Backend) every Service selects.
	Backend = "web"
	// BackendPort is the echo backend's container port, and
	// BackendUDPPort its UDP echo's.
	BackendPort    = 8080
	BackendUDPPort = 5353

	// conditionProxiesDrained is the node condition saying a node in
	// maintenance is safe to drain: controller.ConditionProxiesDrained;
	// the test module imports the API (api/...), not the controller, so
	// that a controller that does not compile fails only the processes
	// running it.
	conditionProxiesDrained = "pulselb.io/ProxiesDrained"
	labelProxyApp           = contract.LabelAppName + "=" + contract.ProxyAppName
	proxyContainer          = "proxy"
	defaultProxyImage       = "ghcr.io/pulselb/pulselb:v1"
	defaultReplicas         = 2
	controllerReplicas      = 2
	controllerLeaseName     = "pulselb-controller"
)

// ServiceConfig is one LoadBalancer Service of the scenarios.
type ServiceConfig struct {
	Name string
	Port int32
	// Protocol is its port's protocol; empty: TCP, to the backend's HTTP
	// port. A UDP port goes to the backend's UDP echo.
	Protocol corev1.Protocol
	// DrainDelay is its pulselb.io/drain-delay annotation; empty: none,
	// pulselb's default.
	DrainDelay string
	// DNSTTL is its pulselb.io/dns-ttl annotation; 0: none, the
	// controllers' --dns-ttl.
	DNSTTL int
}

// Config configures Setup.
type Config struct {
	Services []ServiceConfig
	// DNSTTL is the controllers' --dns-ttl; default 1.
	DNSTTL int
	// ProxyImage is the controllers' first --proxy-image; default
	// ghcr.io/pulselb/pulselb:v1 (the simulator runs pulselb for any
	// image named pulselb).
	ProxyImage string
	// Logf, when set, reports progress.
	Logf func(format string, args ...any)
}

// Env is pulselb running on a harness cluster.
type Env struct {
	C           *cluster.Cluster
	Client      kubernetes.Interface
	Dyn         dynamic.Interface
	Config      Config
	Controllers [controllerReplicas]*Controller
	// BackendNode runs the echo backend and no proxy; ProxyNodes are the
	// others, where proxies may run.
	BackendNode string
	ProxyNodes  []string
	image       string
	nodeIP      map[string]string
}

// Setup installs and starts everything, and waits until every Service is
// published on its proxies' nodes.
func Setup(ctx context.Context, c *cluster.Cluster, cfg Config) (*Env, error) {
	if cfg.DNSTTL <= 0 {
		cfg.DNSTTL = 1
	}
	if cfg.ProxyImage == "" {
		cfg.ProxyImage = defaultProxyImage
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return nil, err
	}
	nodes := c.Nodes()
	if len(nodes) < 3 {
		return nil, fmt.Errorf("planned scenarios need at least 3 nodes, the cluster has %d", len(nodes))
	}
	e := &Env{C: c, Client: c.Client, Dyn: dyn, Config: cfg, image: cfg.ProxyImage, nodeIP: map[string]string{},
		BackendNode: nodes[len(nodes)-1], ProxyNodes: nodes[:len(nodes)-1]}
	for _, n := range nodes {
		if e.nodeIP[n], err = c.NodeIP(n); err != nil {
			return nil, err
		}
	}
	cs := c.Client
	if err := c.CreateNamespaces(ctx, SystemNamespace, AppNamespace); err != nil {
		return nil, err
	}
	if err := deploy.InstallProbeReportCRD(ctx, dyn, SystemNamespace); err != nil {
		return nil, err
	}
	if err := deploy.InstallProbers(ctx, cs, SystemNamespace, "--v=2"); err != nil {
		return nil, err
	}
	if err := e.createBackend(ctx); err != nil {
		return nil, err
	}
	if err := e.waitFor(ctx, 90*time.Second, fmt.Sprintf("%d prober pods ready", len(nodes)), func() (bool, error) {
		return len(scenario.ReadyPods(ctx, e.Client, SystemNamespace, "app.kubernetes.io/name="+deploy.ProberName)) == len(nodes), nil
	}); err != nil {
		return nil, err
	}
	for i := range e.Controllers {
		if e.Controllers[i], err = e.newController(i); err != nil {
			return nil, err
		}
		if err := e.Controllers[i].start(ctx, e.image); err != nil {
			return nil, err
		}
	}
	for _, s := range cfg.Services {
		if err := e.createService(ctx, s); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := e.WaitSettled(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	cfg.Logf("every Service published on %d proxies after %s", defaultReplicas, time.Since(start).Round(time.Millisecond))
	return e, nil
}

// Close stops the controllers.
func (e *Env) Close() error {
	var first error
	for _, ctl := range e.Controllers {
		if ctl == nil {
			continue
		}
		if err := ctl.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// createBackend runs two echo pods on the backend node: no change drains
// it, so whatever a client loses, a proxy lost.
func (e *Env) createBackend(ctx context.Context) error {
	dep := cluster.EchoDeployment(AppNamespace, Backend, 2, corev1.ContainerPort{Name: "http", ContainerPort: BackendPort},
		corev1.ContainerPort{Name: "udp", ContainerPort: BackendUDPPort, Protocol: corev1.ProtocolUDP})
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: e.BackendNode}
	if _, err := e.Client.AppsV1().Deployments(AppNamespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the backend: %w", err)
	}
	return nil
}

func (e *Env) createService(ctx context.Context, s ServiceConfig) error {
	ann := map[string]string{contract.AnnotationNodeSelector: corev1.LabelHostname + "!=" + e.BackendNode}
	if s.DrainDelay != "" {
		ann[contract.AnnotationDrainDelay] = s.DrainDelay
	}
	if s.DNSTTL > 0 {
		ann[contract.AnnotationDNSTTL] = fmt.Sprint(s.DNSTTL)
	}
	_, err := e.Client.CoreV1().Services(AppNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: AppNamespace, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": Backend},
			Ports:    []corev1.ServicePort{servicePort(s)},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating service %s: %w", s.Name, err)
	}
	return nil
}

// servicePort is the one port of Service s.
func servicePort(s ServiceConfig) corev1.ServicePort {
	if s.Protocol == corev1.ProtocolUDP {
		return corev1.ServicePort{Name: "udp", Port: s.Port, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("udp")}
	}
	return corev1.ServicePort{Name: "http", Port: s.Port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}
}

// Name returns a Service's DNS name in the controllers' zone.
func Name(svc string) string { return svc + "." + AppNamespace + "." + Zone }

// DNSServers returns the controllers' DNS addresses.
func (e *Env) DNSServers() []string {
	var out []string
	for _, c := range e.Controllers {
		out = append(out, c.DNS)
	}
	return out
}

// NodeIP returns a node's InternalIP, the address its proxies publish.
func (e *Env) NodeIP(node string) string { return e.nodeIP[node] }

// StartClient starts a traffic client for a Service in the client
// namespace, resolving through the controllers' DNS servers.
func (e *Env) StartClient(ctx context.Context, s ServiceConfig) *traffic.Client {
	return traffic.Start(ctx, traffic.Options{
		Name: Name(s.Name), Port: int(s.Port),
		Resolver:    &traffic.Resolver{Servers: e.DNSServers(), Timeout: 500 * time.Millisecond},
		Timeout:     time.Second,
		MaxRequests: 200_000,
		MaxDuration: 10 * time.Minute,
		// At most 500 requests a second: thousands per change, without
		// taking the shared machine's CPU from the cluster.
		Interval: 2 * time.Millisecond,
		Run:      InClientNamespace,
	})
}

// InClientNamespace runs fn on a thread in the harness' client namespace,
// the world outside the cluster.
func InClientNamespace(fn func() error) error {
	return cluster.RunInNamespace(cluster.ClientNamespace, fn)
}

// Measure runs change while a client per Service sends requests, and
// returns each client's report by Service name. The clients start (and
// must have had successes) before the change, and stop once it returned
// and every Service is settled again.
func (e *Env) Measure(ctx context.Context, change func(context.Context) error) (map[string]traffic.Report, error) {
	clients := map[string]*traffic.Client{}
	stop := func() map[string]traffic.Report {
		out := map[string]traffic.Report{}
		for name, c := range clients {
			r, _ := c.Stop()
			out[name] = r
		}
		return out
	}
	for _, s := range e.Config.Services {
		clients[s.Name] = e.StartClient(ctx, s)
	}
	for name, c := range clients {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.WaitSucceeding(wctx, 50)
		cancel()
		if err != nil {
			return stop(), fmt.Errorf("client of %s before the change: %w", name, err)
		}
	}
	err := change(ctx)
	if err == nil {
		err = e.WaitSettled(ctx, 3*time.Minute)
	}
	return stop(), err
}

// waitFor polls cond until it holds, fails, or timeout passes.
func (e *Env) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: not within %s", what, timeout)
		case <-t.C:
		}
	}
}

// proxySelector selects the proxy pods of a Service.
func proxySelector(svc string) string {
	return labelProxyApp + "," + contract.LabelServiceNamespace + "=" + AppNamespace + "," + contract.LabelServiceName + "=" + svc
}

// ProxyNodesOf returns the nodes of a Service's ready proxies, sorted.
func (e *Env) ProxyNodesOf(ctx context.Context, svc string) []string {
	var out []string
	for _, p := range scenario.ReadyPods(ctx, e.Client, SystemNamespace, proxySelector(svc)) {
		out = append(out, p.Spec.NodeName)
	}
	slices.Sort(out)
	return out
}

// SharedProxyNode returns a node that runs a ready proxy of every Service,
// so that one drain changes them all; with none, a node of the first
// Service's proxies.
func (e *Env) SharedProxyNode(ctx context.Context) string {
	count := map[string]int{}
	var first []string
	for i, s := range e.Config.Services {
		nodes := e.ProxyNodesOf(ctx, s.Name)
		if i == 0 {
			first = nodes
		}
		for _, n := range nodes {
			count[n]++
		}
	}
	for _, n := range first {
		if count[n] == len(e.Config.Services) {
			return n
		}
	}
	if len(first) > 0 {
		return first[0]
	}
	return e.ProxyNodes[0]
}

// Ingress returns a Service's published IPs, sorted.
func (e *Env) Ingress(ctx context.Context, svc string) ([]string, error) {
	s, err := e.Client.CoreV1().Services(AppNamespace).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	slices.Sort(out)
	return out, nil
}

// settled says why a Service is not settled, or "" when it is: its
// replicas proxies ready, none terminating, its status listing exactly
// their nodes, and every DNS server answering the same.
func (e *Env) settled(ctx context.Context, svc string, replicas int) (string, error) {
	all := scenario.ListPods(ctx, e.Client, SystemNamespace, proxySelector(svc))
	nodes := e.ProxyNodesOf(ctx, svc)
	if len(nodes) != replicas || len(all) != replicas {
		return fmt.Sprintf("%d proxy pods, %d of them ready, want %d", len(all), len(nodes), replicas), nil
	}
	var want []string
	for _, n := range nodes {
		want = append(want, e.nodeIP[n])
	}
	slices.Sort(want)
	got, err := e.Ingress(ctx, svc)
	if err != nil {
		return err.Error(), nil
	}
	if !slices.Equal(got, want) {
		return fmt.Sprintf("status %v, proxies on %v", got, want), nil
	}
	for _, server := range e.DNSServers() {
		if a := lookup(server, Name(svc)); !slices.Equal(a, want) {
			return fmt.Sprintf("DNS %s answers %v, want %v", server, a, want), nil
		}
	}
	return "", nil
}

// replicas returns a Service's pulselb.io/replicas, or the default.
func (e *Env) replicas(ctx context.Context, svc string) (int, error) {
	s, err := e.Client.CoreV1().Services(AppNamespace).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	n := defaultReplicas
	if v, ok := s.Annotations[contract.AnnotationReplicas]; ok {
		if _, err := fmt.Sscan(v, &n); err != nil {
			return 0, fmt.Errorf("service %s: %s=%q: %w", svc, contract.AnnotationReplicas, v, err)
		}
	}
	return min(n, len(e.schedulableProxyNodes(ctx))), nil
}

// schedulableProxyNodes are the proxy nodes that are not cordoned and not
// in maintenance.
func (e *Env) schedulableProxyNodes(ctx context.Context) []string {
	var out []string
	for _, name := range e.ProxyNodes {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if _, maint := n.Labels[contract.LabelMaintenance]; !n.Spec.Unschedulable && !maint {
			out = append(out, name)
		}
	}
	return out
}

// WaitSettled waits until every Service is settled: as many ready proxies
// as it asks for (at most one per schedulable proxy node), none
// terminating, published exactly on their nodes, in status and DNS.
func (e *Env) WaitSettled(ctx context.Context, timeout time.Duration) error {
	var why []string
	err := e.waitFor(ctx, timeout, "every Service settled", func() (bool, error) {
		why = why[:0]
		for _, s := range e.Config.Services {
			n, err := e.replicas(ctx, s.Name)
			if err != nil {
				return false, err
			}
			w, err := e.settled(ctx, s.Name, n)
			if err != nil {
				return false, err
			}
			if w != "" {
				why = append(why, s.Name+": "+w)
			}
		}
		return len(why) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w (%s)", err, strings.Join(why, "; "))
	}
	return nil
}

// lookup returns the sorted A records a DNS server answers for name.
func lookup(server, name string) []string {
	var out []string
	_ = InClientNamespace(func() error {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, server)
		if err != nil {
			return err
		}
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				out = append(out, a.A.String())
			}
		}
		return nil
	})
	slices.Sort(out)
	return out
}
