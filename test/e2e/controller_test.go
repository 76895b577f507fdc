package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

const (
	systemNamespace = "pulselb-system"
	controllerZone  = "lb.test."
	// lbFinalizer is controller.Finalizer, the standard name that
	// Kubernetes' own LoadBalancer e2e spec waits for; the test module
	// does not import the controller so that a controller that does not
	// compile fails only the pods running it.
	lbFinalizer = "service.kubernetes.io/load-balancer-cleanup"
)

// TestController runs `pulselb controller` against the harness: a
// LoadBalancer Service gets a proxy workload in pulselb-system, the
// finalizer and status.loadBalancer.ingress with the proxy nodes' IPs
// (ipMode Proxy); a client outside the cluster reaches a backend on
// nodeIP:port; the controller's DNS server answers the Service's name with
// the same IPs; deleting the Service removes the workload and the name.
func TestController(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 3})
	ctx := t.Context()
	cs := c.Client

	if err := c.CreateNamespaces(ctx, systemNamespace, "shop"); err != nil {
		t.Fatal(err)
	}
	dnsAddr := freeLoopbackPort(t)
	ctl := startController(t, c, dnsAddr)

	createWeb(ctx, t, cs, "shop")
	name := "web.shop." + controllerZone

	t.Run("ProxyWorkloadRuns", func(t *testing.T) {
		poll(ctx, t, 30*time.Second, "a proxy Deployment for shop/web in "+systemNamespace, func() bool {
			ctl.alive(t)
			return len(proxyDeployments(ctx, t, cs)) == 1
		})
		poll(ctx, t, 60*time.Second, "2 proxy pods running and ready in "+systemNamespace, func() bool {
			ctl.alive(t)
			return len(readyPods(ctx, t, cs, systemNamespace, "")) == 2
		})
		for _, p := range readyPods(ctx, t, cs, systemNamespace, "") {
			var started string
			poll(ctx, t, 10*time.Second, "the proxy of "+p.Name+" logging its mode", func() bool {
				log, err := c.ContainerLog(systemNamespace, p.Name, "proxy")
				for _, l := range strings.Split(string(log), "\n") {
					if strings.Contains(l, `"Started proxy"`) {
						started = l
					}
				}
				return err == nil && started != ""
			})
			t.Logf("proxy pod %s on %s (%s): %s", p.Name, p.Spec.NodeName, p.Status.PodIP, started)
		}
	})
	if t.Failed() {
		t.Fatalf("no running proxy workload; controller log: %s; proxy pods: %s", ctl.LogPath, describePods(ctx, cs, systemNamespace))
	}

	var ingress []string
	t.Run("StatusHasProxyNodeIPs", func(t *testing.T) {
		var svc *corev1.Service
		poll(ctx, t, 30*time.Second, "shop/web with the finalizer and 2 ingress IPs", func() bool {
			ctl.alive(t)
			var err error
			svc, err = cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
			return err == nil && slices.Contains(svc.Finalizers, lbFinalizer) && len(svc.Status.LoadBalancer.Ingress) == 2
		})
		nodeIPs := map[string]string{}
		for n, ip := range c.NodeIPs() {
			nodeIPs[ip] = n
		}
		proxyNodes := map[string]bool{}
		for _, p := range readyPods(ctx, t, cs, systemNamespace, "") {
			proxyNodes[p.Spec.NodeName] = true
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeProxy {
				t.Errorf("ingress %s has ipMode %v, want Proxy", ing.IP, ing.IPMode)
			}
			if node, ok := nodeIPs[ing.IP]; !ok || !proxyNodes[node] {
				t.Errorf("ingress %s is not the IP of a node running a proxy pod (nodes %v, proxies on %v)", ing.IP, nodeIPs, proxyNodes)
			}
			ingress = append(ingress, ing.IP)
		}
		slices.Sort(ingress)
		t.Logf("status.loadBalancer.ingress = %v", ingress)
	})
	if len(ingress) == 0 {
		t.Fatalf("no ingress IPs; controller log: %s", ctl.LogPath)
	}

	t.Run("ClientReachesBackendOnNodeIP", func(t *testing.T) {
		clientReachesWeb(ctx, t, c, ingress)
	})

	t.Run("DNSAnswersWithIngressIPs", func(t *testing.T) {
		var got []string
		poll(ctx, t, 10*time.Second, "A "+name+" = "+strings.Join(ingress, ","), func() bool {
			r, err := dnsQuery(dnsAddr, name, dns.TypeA)
			if err != nil || r.Rcode != dns.RcodeSuccess {
				return false
			}
			got = aRecords(r)
			return slices.Equal(got, ingress)
		})
		r, err := dnsQuery(dnsAddr, name, dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Authoritative {
			t.Errorf("answer for %s is not authoritative", name)
		}
	})

	t.Run("DeletingTheServiceRemovesWorkloadAndName", func(t *testing.T) {
		if err := cs.CoreV1().Services("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, 10*time.Second, name+" NXDOMAIN", func() bool {
			r, err := dnsQuery(dnsAddr, name, dns.TypeA)
			return err == nil && r.Rcode == dns.RcodeNameError
		})
		// The proxies drain first: the drain delay (TTL 5 s + 10 s) and, in
		// iptables mode, the whole drain timeout (10 s).
		poll(ctx, t, 60*time.Second, "proxy Deployment and pods gone, Service gone", func() bool {
			ctl.alive(t)
			_, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
			return apierrors.IsNotFound(err) && len(proxyDeployments(ctx, t, cs)) == 0 &&
				len(listPods(ctx, t, cs, systemNamespace, "")) == 0
		})
	})
}

// controllerProcess is a `pulselb controller` run by the test.
type controllerProcess struct {
	*scenario.Controller
}

// startController runs pulselb controller with the admin kubeconfig, no
// leader election, and DNS on dnsAddr, until the test ends. Its log goes
// to the cluster's log directory, kept when the test fails.
// extra flags follow the defaults, so they win.
func startController(t *testing.T, c *cluster.Cluster, dnsAddr string, extra ...string) *controllerProcess {
	t.Helper()
	p := launchController(t, c, scenario.ControllerOptions{
		Metrics: "127.0.0.1:0",
		Args: append([]string{
			"--dns-zone=" + controllerZone,
			"--dns-ns=ns1." + controllerZone + "=127.0.0.1",
			"--dns-listen=" + dnsAddr,
			"--probe-reports=false",
			"--v=2"}, extra...),
	})
	t.Cleanup(func() { p.stop(t) })
	return p
}

// launchController starts pulselb controller in systemNamespace as o
// says, failing t if it cannot.
func launchController(t *testing.T, c *cluster.Cluster, o scenario.ControllerOptions) *controllerProcess {
	t.Helper()
	o.Namespace = systemNamespace
	p, err := scenario.StartController(t.Context(), c, o)
	if err != nil {
		t.Fatal(err)
	}
	return &controllerProcess{p}
}

// stop stops the controller with SIGTERM, failing t unless it exits
// cleanly within 15 s.
func (p *controllerProcess) stop(t *testing.T) {
	if err := p.Shutdown(15 * time.Second); err != nil {
		t.Error(err)
	}
}

// alive fails t when the controller has exited.
func (p *controllerProcess) alive(t *testing.T) {
	t.Helper()
	if err := p.Alive(); err != nil {
		t.Fatal(err)
	}
}

// freeLoopbackPort returns 127.0.0.1:port with the port free for both UDP
// and TCP at the time of the call.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	addr, err := cluster.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func dnsQuery(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = false
	r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, addr)
	return r, err
}

func aRecords(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// proxyDeployments lists the proxy Deployments in pulselb-system.
func proxyDeployments(ctx context.Context, t *testing.T, cs kubernetes.Interface) []appsv1.Deployment {
	t.Helper()
	l, err := cs.AppsV1().Deployments(systemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	return l.Items
}

// listPods returns the pods in ns matching selector (scenario.ListPods).
func listPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string) []corev1.Pod {
	t.Helper()
	return scenario.ListPods(ctx, cs, ns, selector)
}

// readyPods returns the Running and Ready pods in ns matching selector
// (scenario.ReadyPods).
func readyPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string) []corev1.Pod {
	t.Helper()
	return scenario.ReadyPods(ctx, cs, ns, selector)
}

func waitPodsRunningIn(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string, n int) {
	t.Helper()
	poll(ctx, t, 30*time.Second, fmt.Sprintf("%d pods %s in %s running and ready", n, selector, ns), func() bool {
		return len(readyPods(ctx, t, cs, ns, selector)) == n
	})
}

// describePods summarises the pods in ns for a failure message: phase,
// node, and each container's state.
func describePods(ctx context.Context, cs kubernetes.Interface, ns string) string {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range l.Items {
		fmt.Fprintf(&b, "\n  %s phase=%s node=%s", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " %s=%s(%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, " [%s restarts=%d", st.Name, st.RestartCount)
			if w := st.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if x := st.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " last exit %d %s", x.ExitCode, x.Reason)
			}
			b.WriteString("]")
		}
	}
	return b.String()
}

// clientReachesWeb waits until a client outside the cluster reaches an
// echo pod of shop/web on port 80 of every IP in ingress.
func clientReachesWeb(ctx context.Context, t *testing.T, c *cluster.Cluster, ingress []string) {
	t.Helper()
	clientReachesWebOn(ctx, t, c, ingress, 80)
}

// clientReachesWebOn is clientReachesWeb on another port than 80.
func clientReachesWebOn(ctx context.Context, t *testing.T, c *cluster.Cluster, ingress []string, port int) {
	t.Helper()
	for _, ip := range ingress {
		url := fmt.Sprintf("http://%s/", net.JoinHostPort(ip, strconv.Itoa(port)))
		poll(ctx, t, 30*time.Second, "an echo pod answering "+url+" from the client namespace", func() bool {
			out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
			name, _ := field(string(out), "name")
			return err == nil && strings.HasPrefix(name, "shop/web-")
		})
	}
}

// createWeb creates Deployment "web" in ns: two echo pods labelled
// app=web with port "http" 8080, waits until both run, and creates
// LoadBalancer Service "web" in front of them on port 80.
func createWeb(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	dep := cluster.EchoDeployment(ns, "web", 2, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	waitPodsRunningIn(ctx, t, cs, ns, "app=web", 2)
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: dep.Spec.Selector.MatchLabels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service: %v", err)
	}
}
