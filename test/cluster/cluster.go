// Package cluster runs a real Kubernetes control plane for pulselb's tests:
// etcd, kube-apiserver, kube-scheduler and kube-controller-manager built from
// k8s.io/kubernetes, plus a kubelet simulator whose nodes are network
// namespaces on a bridge and whose pods are processes in their own network
// namespaces, with kube-proxy (iptables mode) in every node namespace. A
// fault is a real network fault: links down, packets dropped.
//
// Only one cluster can run on a machine at a time: it owns the bridge
// plt-br0 and the addresses 198.18.0.0/22, 198.18.128.0/17 and the service
// range 198.19.0.0/16. Everything made is recorded in the cluster directory,
// so Teardown (and `pulselb-testcluster down`) removes it after a crash.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/test/image"
)

// Options configure a test cluster. The zero value is a control plane with
// no nodes.
type Options struct {
	// Dir holds certificates, kubeconfigs, logs and the teardown record.
	// It is created when missing; empty means a new temporary directory.
	Dir string
	// BinDir holds the built binaries; empty means build them into the
	// test module's .bin directory (see Binaries).
	BinDir string
	// Nodes is the number of nodes with network namespaces (at most 63).
	Nodes int
	// LightNodes is the number of nodes without namespaces: heartbeats only,
	// pods reported Running without processes.
	LightNodes int
	// KubeletNodes is the number of real kubelet nodes, kubelet-1, ...:
	// network namespaces like the namespace nodes (after them in the
	// addressing), each with the upstream kubelet, its own containerd and
	// CNI, running pods as containers (see realnode.go). Needs cgroup v1.
	KubeletNodes int
	// ExternalIPs gives every namespace node an ExternalIP 198.18.2.N.
	ExternalIPs bool
	// IPFamilies are the cluster's IP families, primary first: IPv4 (the
	// default when empty), IPv4 and IPv6 (dual-stack, either order), or
	// IPv6. They decide the Service ranges, node addresses, pod IPs and
	// CIDRs, and kube-proxy's families (see ipfamily.go).
	IPFamilies []corev1.IPFamily
	// Zones spreads nodes round-robin over this many zones, zone-a, zone-b,
	// ...; default 3.
	Zones int
	// NodeGracePeriod is the node lifecycle controller's grace period after
	// which a node that stopped heartbeating is NotReady; default 8s.
	NodeGracePeriod time.Duration
	// ControlPlaneQPS, when positive, is the client rate limit of
	// kube-scheduler and kube-controller-manager (--kube-api-qps, with a
	// burst of twice that). Zero keeps Kubernetes' defaults (scheduler 50,
	// controller-manager 20 per controller), which make the ReplicaSet
	// controller, not the code under test, the bottleneck of a benchmark
	// that creates thousands of pods; large clusters raise both.
	ControlPlaneQPS float32
	// NoKubeProxy skips running kube-proxy in node namespaces.
	NoKubeProxy bool
	// KubeletImages are images imported into every kubelet node besides
	// the harness' own (images.go), such as the images an upstream e2e
	// spec names, under the exact names it uses.
	KubeletImages []image.Image
	// KubeletImageArchives are OCI image layout archives imported into
	// every kubelet node as they are, with the content of every platform
	// they hold (`ctr images import --all-platforms`), as a registry holds
	// a multi-platform image: a kubelet running such an image gets the
	// manifest of the node's platform from containerd, as from a pull.
	// `make release` writes one (dist/pulselb-image.tar).
	KubeletImageArchives []string
	// ClusterDNS, when set, is the nameserver address kubelet nodes give
	// pods with the ClusterFirst DNS policy (KubeletConfiguration
	// clusterDNS); whoever sets it runs the server there.
	ClusterDNS string
	// KubeletAllowedUnsafeSysctls are, by kubelet node name (kubelet-1,
	// ...), the unsafe sysctls that node's kubelet lets pods set
	// (KubeletConfiguration allowedUnsafeSysctls, the kubelet's
	// --allowed-unsafe-sysctls); a node not named allows none.
	KubeletAllowedUnsafeSysctls map[string][]string
	// WithoutControllers are kube-controller-manager controllers the
	// harness leaves out, such as "deployment-controller" for a benchmark
	// that makes the proxy pods itself.
	WithoutControllers []string
	// WaitForMachine is how long Start waits for another live cluster on
	// the machine (another test package, a cluster started by hand) to
	// stop; default 10 minutes.
	WaitForMachine time.Duration
}

func (o *Options) defaults() {
	if o.Zones <= 0 {
		o.Zones = 3
	}
	if o.WaitForMachine <= 0 {
		o.WaitForMachine = 10 * time.Minute
	}
	if o.NodeGracePeriod <= 0 {
		o.NodeGracePeriod = 8 * time.Second
		if o.LightNodes > 50 {
			// Many heartbeats at grace/4 would swamp a small machine.
			o.NodeGracePeriod = 40 * time.Second
		}
	}
}

// Cluster is a running test cluster.
type Cluster struct {
	// Dir is the cluster directory.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig.
	Kubeconfig string
	// RESTConfig and Client are admin clients.
	RESTConfig *rest.Config
	Client     kubernetes.Interface

	opts    Options
	bin     string
	rec     *record
	net     *network
	cp      *controlPlane
	kubelet *kubelet

	lock     *os.File // held while the cluster owns the machine
	cancel   context.CancelFunc
	stopOnce sync.Once
	stopErr  error
}

// Start starts a cluster and returns once the control plane is healthy and
// every node is Ready. On error everything started is removed again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	opts.defaults()
	logger := klog.FromContext(ctx)
	if opts.Nodes+opts.KubeletNodes > maxNetNodes {
		return nil, fmt.Errorf("at most %d namespace and kubelet nodes, asked for %d", maxNetNodes, opts.Nodes+opts.KubeletNodes)
	}
	if opts.LightNodes > maxLightNodes {
		return nil, fmt.Errorf("at most %d light nodes, asked for %d", maxLightNodes, opts.LightNodes)
	}
	if err := validIPFamilies(opts.IPFamilies); err != nil {
		return nil, err
	}
	if opts.KubeletNodes > 0 && opts.hasIPv6() {
		return nil, errors.New("kubelet nodes are IPv4 only: start them on a cluster without IPv6 families")
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "pulselb-testcluster-")
		if err != nil {
			return nil, fmt.Errorf("creating cluster dir: %w", err)
		}
		opts.Dir = d
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving cluster dir: %w", err)
	}
	bin := opts.BinDir
	if bin == "" {
		if bin, err = Binaries(ctx); err != nil {
			return nil, err
		}
	}
	lock, err := claimMachine(ctx, dir, opts.WaitForMachine)
	if err != nil {
		return nil, err
	}
	if err := Teardown(ctx, dir); err != nil {
		lock.Close()
		return nil, err
	}
	// A bridge whose record is lost: the name is ours.
	if linkExists(bridgeName) {
		_ = run(ctx, "ip", "link", "delete", bridgeName)
	}
	// Every start is a new cluster: no state of an earlier one survives.
	for _, d := range []string{"etcd", "pki", "logs", "pods", "nodes", "apiserver-certs"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			lock.Close()
			return nil, fmt.Errorf("removing old %s: %w", d, err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, "logs"), filepath.Join(dir, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			lock.Close()
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}

	began := time.Now()
	rec := newRecord(dir)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c = &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), opts: opts, bin: bin, rec: rec,
		net: &network{rec: rec}, cancel: cancel, lock: lock}
	if err := rec.add(item{Kind: "harness", PID: os.Getpid(), Start: processStart(os.Getpid())}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(context.WithoutCancel(ctx)); stopErr != nil {
				logger.Error(stopErr, "Cleaning up after a failed start")
			}
			c = nil
		}
	}()

	if err := c.net.setupRoot(ctx); err != nil {
		return c, err
	}
	if opts.hasIPv6() {
		if err := c.net.setupRoot6(ctx); err != nil {
			return c, err
		}
	}
	p, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return c, err
	}
	c.cp = &controlPlane{dir: dir, bin: bin, logs: filepath.Join(dir, "logs"), rec: rec, pki: p, opts: opts}
	if err := c.cp.start(ctx); err != nil {
		return c, err
	}
	if err := copyFile(filepath.Join(dir, "admin.kubeconfig"), c.Kubeconfig); err != nil {
		return c, err
	}
	c.RESTConfig, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return c, fmt.Errorf("loading kubeconfig: %w", err)
	}
	c.RESTConfig.QPS, c.RESTConfig.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(c.RESTConfig); err != nil {
		return c, fmt.Errorf("creating client: %w", err)
	}
	// Pods are rejected until the serviceaccount controller made "default".
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return c, fmt.Errorf("waiting for the default service account: %w", err)
	}
	logger.Info("Control plane up", "dir", dir, "took", time.Since(began).Round(time.Millisecond))

	kcfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubelet.kubeconfig"))
	if err != nil {
		return c, fmt.Errorf("loading kubelet kubeconfig: %w", err)
	}
	kcfg.QPS, kcfg.Burst = 200, 400
	kcs, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return c, fmt.Errorf("creating kubelet client: %w", err)
	}
	c.kubelet = newKubelet(c, kcs)
	if err := c.kubelet.start(runCtx); err != nil {
		return c, err
	}
	for i := 1; i <= opts.Nodes; i++ {
		if err := c.kubelet.addNode(runCtx, fmt.Sprintf("node-%d", i), i, false); err != nil {
			return c, err
		}
	}
	for i := 1; i <= opts.LightNodes; i++ {
		if err := c.kubelet.addNode(runCtx, fmt.Sprintf("light-%d", i), i, true); err != nil {
			return c, err
		}
	}
	if opts.KubeletNodes > 0 {
		images, err := writeImages(dir, bin, opts.KubeletImages...)
		if err != nil {
			return c, err
		}
		for i := 1; i <= opts.KubeletNodes; i++ {
			if err := c.kubelet.addRealNode(runCtx, fmt.Sprintf("kubelet-%d", i), opts.Nodes+i, images, opts.KubeletImageArchives); err != nil {
				return c, err
			}
		}
		// Imported: the archives (85 MB) are not needed any more.
		if err := os.RemoveAll(filepath.Join(dir, "images")); err != nil {
			return c, fmt.Errorf("removing image archives: %w", err)
		}
	}
	if err := c.WaitNodesReady(ctx, 60*time.Second); err != nil {
		return c, err
	}
	logger.Info("Test cluster up", "dir", dir, "nodes", opts.Nodes, "lightNodes", opts.LightNodes, "kubeletNodes", opts.KubeletNodes, "took", time.Since(began).Round(time.Millisecond))
	return c, nil
}

// ErrNotRoot is returned by Start when not running as root.
var ErrNotRoot = errors.New("the test cluster needs root (network namespaces, iptables)")

// Stop stops every process and removes everything the cluster made. The
// directory itself, with the logs, stays. Stop is idempotent.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		var errs []error
		if c.kubelet != nil {
			c.kubelet.stop(ctx)
		}
		c.cancel()
		if c.cp != nil {
			errs = append(errs, c.cp.stop())
		}
		errs = append(errs, Teardown(ctx, c.Dir))
		if c.lock != nil {
			c.lock.Close() // releases the flock
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// BinDir returns the directory of the binaries the cluster runs, pulselb
// among them (Options.BinDir, or what Binaries built).
func (c *Cluster) BinDir() string { return c.bin }

// Nodes returns the names of the cluster's nodes, namespace nodes first.
func (c *Cluster) Nodes() []string {
	var names []string
	for _, n := range c.kubelet.nodeList() {
		names = append(names, n.name)
	}
	return names
}

// NodeIP returns a node's InternalIP.
func (c *Cluster) NodeIP(name string) (string, error) {
	n, err := c.kubelet.node(name)
	if err != nil {
		return "", err
	}
	return n.internalIP, nil
}

// NodeIPs returns every node's InternalIP by node name.
func (c *Cluster) NodeIPs() map[string]string {
	ips := map[string]string{}
	for _, n := range c.kubelet.nodeList() {
		ips[n.name] = n.internalIP
	}
	return ips
}

// CreateNamespaces creates the namespaces names. SystemNamespace gets the
// proxy pods' ServiceAccount and Role from deploy/base with it.
func (c *Cluster) CreateNamespaces(ctx context.Context, names ...string) error {
	for _, ns := range names {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		if ns == SystemNamespace {
			if err := c.installProxyRBAC(ctx, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// WaitNodesReady waits until every node of the cluster is Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	want := c.Nodes()
	return poll(ctx, timeout, 200*time.Millisecond, func() (bool, error) {
		nodes, err := c.kubelet.nodeLister.List(everything)
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for _, n := range nodes {
			ready[n.Name] = NodeReady(n) == corev1.ConditionTrue
		}
		for _, w := range want {
			if !ready[w] {
				return false, nil
			}
		}
		return true, nil
	})
}

// NodeReady returns the status of a node's Ready condition.
func NodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return corev1.ConditionUnknown
}

// Informers returns a factory for the admin client; callers start it.
func (c *Cluster) Informers() informers.SharedInformerFactory {
	return informers.NewSharedInformerFactory(c.Client, 0)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading %s: %w", from, err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", to, err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
