package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// kubeletFailoverTarget bounds how long a blackholed proxy node's IP may
// stay in the status on real kubelets. The benchmark's target is a 3 s
// maximum on a quiet machine; this leaves room for a shared CI machine.
const kubeletFailoverTarget = 10 * time.Second

// overlayBase builds deploy/base with only the image overridden
// (deploy.Overlay).
func overlayBase(t *testing.T, image string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := deploy.Overlay(filepath.Join("..", "..", "deploy", "base"), image, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestKubeletInstall installs pulselb from deploy/base, with only the image
// overridden, on three real kubelet nodes (containerd, runc, CNI bridge and
// portmap), with the release's multi-platform image: the image index that
// `make release` writes (dist/pulselb-image.tar), imported into each node's
// containerd with every platform's content, as a registry serves it, so
// that the kubelet gets the image of the machine's platform from it as a
// user's kubelet does from a pull. What the simulator cannot show: the
// image runs (iptables works in it, as user 65532 and with the
// capabilities the pod specs grant), it is the image of the node's
// platform, hostPorts go through portmap, the proxy's rules are in the
// pod's network namespace and not the node's.
func TestKubeletInstall(t *testing.T) {
	e := newKubeletEnv(t)
	defer func() {
		if t.Failed() {
			t.Logf("pods in %s: %s", systemNamespace, describePods(e.ctx, e.cs, systemNamespace))
			t.Logf("controller logs:\n%s", controllerLogs(e.ctx, t, e.c))
		}
	}()
	t.Run("ComponentsRunUnderTheirServiceAccounts", func(t *testing.T) {
		kubeletComponentsRun(e.ctx, t, e.c, e.installed, e.rel.name)
	})
	e.createShop(t, createKubeletWeb)
	t.Run("ProxiesPublishedThroughPortmap", e.proxiesPublishedThroughPortmap)
	if len(e.ingress) != 2 {
		t.Fatal("no ingress")
	}
	t.Run("ProxyRunsIptablesModeInItsOwnNamespace", e.proxyRunsIptablesModeInItsOwnNamespace)
	t.Run("ImageOfTheMachinesPlatformFromTheIndex", func(t *testing.T) { e.rel.runsOwnPlatform(e.ctx, t, e.c) })
	t.Run("ClientReachesBackendOverTCPAndUDP", func(t *testing.T) { clientReachesWebOverTCPAndUDP(e.ctx, t, e.c, e.ingress) })
	t.Run("SourceRangesInPlace", e.sourceRangesInPlace)
	t.Run("RollingUpgradeLosesNoRequest", func(t *testing.T) {
		kubeletRollingUpgrade(e.ctx, t, e.c, e.applier, installNamespace, e.rel.name)
	})
	// The upgrade may have moved proxies.
	if e.ingress = ingressIPs(e.ctx, e.cs, installNamespace, "web"); len(e.ingress) != 2 {
		t.Fatalf("after the upgrade, web's status is %v", e.ingress)
	}
	t.Run("BlackholedNodeLeavesStatusAndProxyMoves", e.blackholedNodeLeavesStatusAndProxyMoves)
	// Last: the proxies roll to pod sysctls, which kubelet-3 refuses.
	t.Run("ForwardingBySysctls", func(t *testing.T) { kubeletForwardingSysctls(e.ctx, t, e.c, installNamespace) })
	t.Run("CleanedUp", func(t *testing.T) {
		// Containers, mounts, cgroups, kubelet's log links, CNI results,
		// shim sockets: cluster.Leftovers covers kubelet nodes.
		stopLeavesNothing(t, e.c)
	})
}

// kubeletEnv is TestKubeletInstall's cluster: three kubelet nodes with the
// release's image index imported, and pulselb installed from deploy/base
// with only the image overridden.
type kubeletEnv struct {
	*installEnv
	rel     releaseImage
	applier *deploy.Applier
	// installed is when deploy/base was applied.
	installed time.Time
}

// newKubeletEnv reads the release image, starts the cluster and installs
// deploy/base with the release's image.
func newKubeletEnv(t *testing.T) *kubeletEnv {
	var rel releaseImage
	if os.Geteuid() == 0 { // without root, ForTest skips the test
		rel = readReleaseImage(t)
	}
	c := cluster.ForTest(t, cluster.Options{KubeletNodes: 3, WaitForMachine: 20 * time.Minute,
		KubeletAllowedUnsafeSysctls: kubeletSysctlOptions(3), KubeletImageArchives: []string{rel.path}})
	e := &kubeletEnv{installEnv: newInstallEnv(t, c), rel: rel}
	a, err := deploy.NewApplier(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	e.applier = a
	e.installed = time.Now()
	if err := a.Install(e.ctx, overlayBase(t, rel.name)); err != nil {
		t.Fatalf("installing deploy/base: %v", err)
	}
	return e
}

// proxiesPublishedThroughPortmap waits until web's status has 2 kubelet
// node IPs, and checks that each node has the CNI portmap plugin's DNAT
// rules for the proxy's hostPorts.
func (e *kubeletEnv) proxiesPublishedThroughPortmap(t *testing.T) {
	ctx, c := e.ctx, e.c
	e.waitIngress(t, "kubelet nodes")
	for _, ip := range e.ingress {
		node, ok := e.nodeOf[ip]
		if !ok {
			t.Fatalf("ingress %s is not a node IP (%v)", ip, e.nodeOf)
		}
		// The CNI portmap plugin's DNAT for the proxy's hostPorts, in
		// the node's namespace.
		out, err := c.Exec(ctx, node, "iptables-save", "-t", "nat")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, want := range []string{"-p tcp -m tcp --dport 80 ", "-p udp -m udp --dport 5353 "} {
			if !hostPortRule(string(out), want) {
				t.Errorf("node %s has no CNI-DN hostPort rule with %q:\n%s", node, want, out)
			}
		}
	}
	t.Logf("status.loadBalancer.ingress = %v", e.ingress)
}

// proxyRunsIptablesModeInItsOwnNamespace checks that both proxies started
// in iptables mode, with their rules in their pod's network namespace and
// none in their node's nat table.
func (e *kubeletEnv) proxyRunsIptablesModeInItsOwnNamespace(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	pods := readyPods(ctx, t, cs, systemNamespace, proxyAppSelector)
	if len(pods) != 2 {
		t.Fatalf("%d proxy pods ready, want 2", len(pods))
	}
	for _, p := range pods {
		proxyStartedInIptablesMode(t, c, p)
		rules, err := c.PodExec(ctx, systemNamespace, p.Name, "iptables-save", "-t", "nat")
		if err != nil {
			t.Fatalf("%v: %s", err, rules)
		}
		if !strings.Contains(string(rules), ":PULSELB-PREROUTING") {
			t.Errorf("proxy pod %s's namespace has no PULSELB-PREROUTING chain:\n%s", p.Name, rules)
		}
		node, err := c.Exec(ctx, p.Spec.NodeName, "iptables-save", "-t", "nat")
		if err != nil {
			t.Fatalf("%v: %s", err, node)
		}
		if strings.Contains(string(node), "PULSELB") {
			t.Errorf("node %s's nat table holds pulselb rules:\n%s", p.Spec.NodeName, node)
		}
	}
}

// sourceRangesInPlace checks that the proxies run as pulselb-proxy and
// that loadBalancerSourceRanges are enforced (testSourceRanges).
func (e *kubeletEnv) sourceRangesInPlace(t *testing.T) {
	ctx, cs := e.ctx, e.cs
	for _, p := range listPods(ctx, t, cs, systemNamespace, proxyAppSelector) {
		if p.Spec.ServiceAccountName != "pulselb-proxy" {
			t.Errorf("proxy pod %s runs as service account %q, want pulselb-proxy", p.Name, p.Spec.ServiceAccountName)
		}
	}
	testSourceRanges(ctx, t, cs, installNamespace, map[string]string{"app": "web"}, intstr.FromString("http"), nil)
}

// blackholedNodeLeavesStatusAndProxyMoves blackholes a proxy node that does
// not run the leading controller once every proxy node is probed Up: its
// IP leaves the status within kubeletFailoverTarget, the proxy moves to
// another node, and a client reaches web on the new status over TCP and
// UDP.
func (e *kubeletEnv) blackholedNodeLeavesStatusAndProxyMoves(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	// CleanedUp stops the cluster: say what went wrong while it is up.
	defer func() {
		if t.Failed() {
			t.Logf("pods in %s: %s", systemNamespace, describePods(ctx, cs, systemNamespace))
			t.Logf("controller logs:\n%s", controllerLogs(ctx, t, c))
			for _, p := range listPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name=pulselb-prober") {
				log, _ := c.ContainerLog(systemNamespace, p.Name, p.Spec.Containers[0].Name)
				t.Logf("prober %s on %s:\n%s", p.Name, p.Spec.NodeName, scenario.Tail(string(log), 30))
			}
		}
	}()
	victim, victimIP := e.proxyNodeOffTheLeader(t)
	// The failover target is for a steady cluster: every proxy node
	// probed Up by both of its vantages (the other two nodes) first.
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 60*time.Second, "shop/web:80 Up in both vantages' reports on every proxy node", func() bool {
		reports := listReports(ctx, t, dyn)
		for _, ip := range e.ingress {
			if scenario.UpVotes(reports, "shop/web", 80, e.nodeOf[ip]) < 2 {
				return false
			}
		}
		return true
	})
	defer func() {
		if t.Failed() {
			for _, r := range listReports(ctx, t, dyn) {
				t.Logf("report %s: %+v", r.Name, r.Status.Results)
			}
		}
	}()
	now := e.blackholeUntilReplaced(t, victim, victimIP, kubeletFailoverTarget)
	var onNodes []string
	for _, p := range readyPods(ctx, t, cs, systemNamespace, proxyAppSelector) {
		onNodes = append(onNodes, p.Spec.NodeName)
	}
	if slices.Contains(onNodes, victim) || len(onNodes) != 2 {
		t.Errorf("ready proxy pods on %v, want 2 off %s", onNodes, victim)
	}
	clientReachesWebOverTCPAndUDP(ctx, t, c, now)
}

// proxyStartedInIptablesMode checks that proxy pod p's log says it started
// in iptables mode: forwarding was on in its network namespace.
func proxyStartedInIptablesMode(t *testing.T, c *cluster.Cluster, p corev1.Pod) {
	t.Helper()
	log, err := c.ContainerLog(systemNamespace, p.Name, p.Spec.Containers[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(strings.Split(string(log), "\n"), func(l string) bool {
		return strings.Contains(l, `"Started proxy"`) && strings.Contains(l, ` mode="iptables"`)
	}) {
		t.Errorf("proxy %s did not start in iptables mode:\n%s", p.Name, scenario.Tail(string(log), 20))
	}
}

// kubeletComponentsRun waits for pulselb's 2 controllers and 3 probers to
// run and be ready (installed is when they were applied), each under its own
// ServiceAccount, in image, run by containerd, and for one controller to
// lead.
func kubeletComponentsRun(ctx context.Context, t *testing.T, c *cluster.Cluster, installed time.Time, image string) {
	t.Helper()
	cs := c.Client
	poll(ctx, t, 120*time.Second, "2 controllers and 3 probers running and ready", func() bool {
		return len(readyPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name=pulselb-controller")) == 2 &&
			len(readyPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name=pulselb-prober")) == 3
	})
	t.Logf("pulselb running and ready %s after the install", time.Since(installed).Round(100*time.Millisecond))
	componentsUnderTheirServiceAccounts(ctx, t, c, func(p corev1.Pod) {
		for _, st := range p.Status.ContainerStatuses {
			if st.Image != image && !strings.HasSuffix(st.Image, "/"+image) {
				t.Errorf("pod %s container %s runs image %q, want %s", p.Name, st.Name, st.Image, image)
			}
			if !strings.HasPrefix(st.ContainerID, "containerd://") {
				t.Errorf("pod %s container %s has ID %q: not run by containerd", p.Name, st.Name, st.ContainerID)
			}
		}
	})
}

// clientReachesWebOverTCPAndUDP checks a client in the client namespace gets
// answers from shop/web's backends on every ingress IP, over TCP (port 80)
// and UDP (port 5353).
func clientReachesWebOverTCPAndUDP(ctx context.Context, t *testing.T, c *cluster.Cluster, ingress []string) {
	t.Helper()
	clientReachesWeb(ctx, t, c, ingress)
	for _, ip := range ingress {
		addr := net.JoinHostPort(ip, "5353")
		poll(ctx, t, 30*time.Second, "a UDP echo from "+addr+" in the client namespace", func() bool {
			return udpEcho(addr, "pulselb "+ip) == nil
		})
	}
}

// hostPortRule reports whether iptables-save output has a portmap DNAT
// rule (chain CNI-DN-...) matching spec.
func hostPortRule(save, spec string) bool {
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "-A CNI-DN-") && strings.Contains(l, spec) && strings.Contains(l, "DNAT") {
			return true
		}
	}
	return false
}

// udpEcho sends msg to addr from the client namespace and checks the
// answer is msg.
func udpEcho(addr, msg string) error {
	return cluster.RunInNamespace(cluster.ClientNamespace, func() error {
		conn, err := net.DialTimeout("udp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
			return err
		}
		if _, err := conn.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) != msg {
			return fmt.Errorf("udp echo from %s: %q, want %q", addr, buf[:n], msg)
		}
		return nil
	})
}

// createKubeletWeb creates Deployment "web" in ns of two pulselb-echo
// containers (HTTP on 8080, UDP echo on 5353; a kubelet passes no ports, so
// they are arguments) and LoadBalancer Service "web" on ports 80/TCP and
// 5353/UDP in front of them.
func createKubeletWeb(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "echo", Image: cluster.KubeletEchoImage,
					Args: []string{"--name=$(POD_NAMESPACE)/$(POD_NAME)", "--tcp=8080", "--udp=5353"},
					Env: []corev1.EnvVar{
						{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					},
					Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
						{Name: "echo-udp", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	created := time.Now()
	poll(ctx, t, 60*time.Second, "2 web pods running and ready", func() bool { return len(readyPods(ctx, t, cs, ns, "app=web")) == 2 })
	t.Logf("2 web pods ready %s after the Deployment was created", time.Since(created).Round(100*time.Millisecond))
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: labels,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "echo-udp", Port: 5353, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("echo-udp")},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service: %v", err)
	}
}

// TestOverlayBaseOverridesOnlyTheImage checks the install overlay changes
// the image of every container and the controller's --proxy-image, and
// nothing else of deploy/base.
func TestOverlayBaseOverridesOnlyTheImage(t *testing.T) {
	base, err := deploy.Build(filepath.Join("..", "..", "deploy", "base"))
	if err != nil {
		t.Fatal(err)
	}
	over := overlayBase(t, cluster.PulselbImage)
	if len(over) != len(base) {
		t.Fatalf("overlay has %d objects, base %d", len(over), len(base))
	}
	replaced := 0
	for i := range base {
		b, o := base[i], over[i] // changed in place: built for this test only
		for _, ctrs := range [][2][]map[string]any{
			{scenario.UnstructuredSlice(b.Object, "spec", "template", "spec", "containers"), scenario.UnstructuredSlice(o.Object, "spec", "template", "spec", "containers")},
			{scenario.UnstructuredSlice(b.Object, "spec", "template", "spec", "initContainers"), scenario.UnstructuredSlice(o.Object, "spec", "template", "spec", "initContainers")},
		} {
			for j := range ctrs[1] {
				if img := ctrs[1][j]["image"]; img != cluster.PulselbImage {
					t.Errorf("%s %s container %v runs %v, want %s", o.GetKind(), o.GetName(), ctrs[1][j]["name"], img, cluster.PulselbImage)
				}
				ctrs[1][j]["image"] = ctrs[0][j]["image"]
				args, _ := ctrs[1][j]["args"].([]any)
				for k, a := range args {
					if a == "--proxy-image="+cluster.PulselbImage {
						args[k] = ctrs[0][j]["args"].([]any)[k]
						replaced++
					}
				}
			}
		}
		bj, _ := b.MarshalJSON()
		oj, _ := o.MarshalJSON()
		if string(bj) != string(oj) {
			t.Errorf("%s %s differs beyond the image:\nbase    %s\noverlay %s", o.GetKind(), o.GetName(), bj, oj)
		}
	}
	if replaced != 1 {
		t.Errorf("--proxy-image replaced %d times, want once", replaced)
	}
}

// TestChartWithImageMatchesKubeletInstall checks the Helm chart rendered
// with only image.repository and image.tag set (and the base's namespace
// value) is, object for object, what TestKubeletInstall installs on real
// kubelets: a Helm user gets the same install. The one difference is the
// app.kubernetes.io/version label, which the chart takes from the image tag
// and a kustomize image override leaves at the chart's appVersion.
func TestChartWithImageMatchesKubeletInstall(t *testing.T) {
	name, tag, _ := strings.Cut(cluster.PulselbImage, ":")
	values := deploy.BaseValues()
	values["image"] = map[string]any{"repository": name, "tag": tag}
	docs, err := deploy.Render(filepath.Join("..", "..", "deploy", "helm", "pulselb"), values)
	if err != nil {
		t.Fatal(err)
	}
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	versionLabel := regexp.MustCompile(`"app.kubernetes.io/version":"[^"]*"`)
	normal := func(o *unstructured.Unstructured) string {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return versionLabel.ReplaceAllString(string(b), `"app.kubernetes.io/version":"V"`)
	}
	chart := map[string]string{}
	for _, o := range deploy.Objects(docs) {
		chart[key(o)] = normal(o)
	}
	over := overlayBase(t, cluster.PulselbImage)
	if len(over) != len(chart) {
		t.Errorf("chart renders %d objects, the install overlay has %d", len(chart), len(over))
	}
	for _, o := range over {
		if got, ok := chart[key(o)]; !ok {
			t.Errorf("%s is installed but not rendered by the chart", key(o))
		} else if want := normal(o); got != want {
			t.Errorf("%s differs:\nchart   %s\noverlay %s", key(o), got, want)
		}
	}
}
