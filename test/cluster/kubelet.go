package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

var everything = labels.Everything()

// Labels the harness puts on its nodes.
const (
	LabelZone     = "topology.kubernetes.io/zone"
	LabelNodeKind = "pulselb.io/test-node-kind" // "netns", "light" or "kubelet"
)

// kubelet simulates the kubelets of every node: Node objects, Lease
// heartbeats, Ready, and pods run as processes (or, on light nodes, only
// reported as running).
type kubelet struct {
	c      *Cluster
	client kubernetes.Interface

	factory    informers.SharedInformerFactory
	nodeLister corelisters.NodeLister
	podLister  corelisters.PodLister
	queue      workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex
	nodes     map[string]*simNode
	pods      map[types.UID]*podRuntime
	podKeys   map[string]types.UID
	lightNext int

	wg sync.WaitGroup
}

// simNode is one simulated node.
type simNode struct {
	name, ns                      string
	index                         int
	light                         bool
	internalIP, externalIP, zone  string // of the primary family
	internalIP4, internalIP6      string
	externalIP4, externalIP6      string
	podCIDR, podCIDR6             string
	leaseInterval, statusInterval time.Duration
	mu                            sync.Mutex
	down                          bool
	upCh                          chan struct{} // closed by NodeUp; nil while up
	beatMu                        sync.Mutex    // serialises beats: lease and lastStatus
	lease                         *coordinationv1.Lease
	lastStatus                    time.Time
	proxy                         *process
	usedIPs                       map[string]bool
	real                          *realNode // a real kubelet's node (realnode.go); nil when simulated
}

func newKubelet(c *Cluster, client kubernetes.Interface) *kubelet {
	return &kubelet{
		c:       c,
		client:  client,
		factory: informers.NewSharedInformerFactory(client, 0),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pulselb-test-kubelet"}),
		nodes:   map[string]*simNode{},
		pods:    map[types.UID]*podRuntime{},
		podKeys: map[string]types.UID{},
	}
}

func (k *kubelet) start(ctx context.Context) error {
	nodeInf := k.factory.Core().V1().Nodes()
	podInf := k.factory.Core().V1().Pods()
	k.nodeLister, k.podLister = nodeInf.Lister(), podInf.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("adding pod handler: %w", err)
	}
	k.factory.Start(ctx.Done())
	for typ, ok := range k.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing %v informer", typ)
		}
	}
	for range 4 {
		k.wg.Go(func() {
			for k.processNext(ctx) {
			}
		})
	}
	return nil
}

// stop stops the workers, heartbeats and every pod and kube-proxy.
func (k *kubelet) stop(ctx context.Context) {
	k.queue.ShutDown()
	k.c.cancel()
	k.wg.Wait()
	k.factory.Shutdown()
	k.mu.Lock()
	pods := make([]*podRuntime, 0, len(k.pods))
	for _, p := range k.pods {
		pods = append(pods, p)
	}
	nodes := make([]*simNode, 0, len(k.nodes))
	for _, n := range k.nodes {
		nodes = append(nodes, n)
	}
	k.mu.Unlock()
	for _, p := range pods {
		p.stop(ctx)
	}
	for _, n := range nodes {
		if n.proxy != nil {
			_ = n.proxy.stop(5 * time.Second)
		}
		if n.real != nil {
			n.real.stop()
		}
	}
}

func (k *kubelet) nodeList() []*simNode {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := make([]*simNode, 0, len(k.nodes))
	for _, n := range k.nodes {
		l = append(l, n)
	}
	sort.Slice(l, func(i, j int) bool {
		if l[i].light != l[j].light {
			return !l[i].light
		}
		return l[i].index < l[j].index
	})
	return l
}

func (k *kubelet) node(name string) (*simNode, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, ok := k.nodes[name]
	if !ok {
		return nil, fmt.Errorf("no node %q in the test cluster", name)
	}
	return n, nil
}

// NodeNamespace returns the network namespace of a namespace node.
func NodeNamespace(node string) string { return "plt-" + node }

// addNode creates a node: its namespace (unless light), the Node object,
// its Lease, a heartbeat loop and kube-proxy.
func (k *kubelet) addNode(ctx context.Context, name string, index int, light bool) error {
	c := k.c
	grace := c.opts.NodeGracePeriod
	n := &simNode{
		name: name, index: index, light: light,
		zone:           fmt.Sprintf("zone-%c", 'a'+(index-1)%c.opts.Zones),
		leaseInterval:  grace / 4,
		statusInterval: time.Minute,
		usedIPs:        map[string]bool{},
	}
	if light {
		// Light nodes are for scale: fewer writes, addresses nobody routes.
		n.internalIP4 = fmt.Sprintf("198.18.%d.%d", 4+(index-1)/250, 1+(index-1)%250)
		n.internalIP6 = lightIP6(index)
		n.internalIP = c.opts.byFamily(n.internalIP4, n.internalIP6)[0]
		n.leaseInterval = max(grace/3, 10*time.Second)
		if n.leaseInterval >= grace {
			n.leaseInterval = grace / 2
		}
	} else {
		n.ns = NodeNamespace(name)
		n.internalIP4, n.internalIP6 = nodeInternalIP(index), nodeInternalIP6(index)
		n.podCIDR, n.podCIDR6 = nodePodCIDR(index), nodePodCIDR6(index)
		if c.opts.ExternalIPs {
			n.externalIP4, n.externalIP6 = nodeExternalIP(index), nodeExternalIP6(index)
		}
		if !c.opts.hasIPv6() {
			n.internalIP6, n.externalIP6, n.podCIDR6 = "", "", ""
		}
		n.internalIP = c.opts.byFamily(n.internalIP4, n.internalIP6)[0]
		if ext := c.opts.byFamily(n.externalIP4, n.externalIP6); len(ext) > 0 {
			n.externalIP = ext[0]
		}
		if err := c.net.setupNode(ctx, index, n.ns, c.opts.ExternalIPs); err != nil {
			return err
		}
		if c.opts.hasIPv6() {
			if err := c.net.setupNode6(ctx, index, n.ns, c.opts.ExternalIPs); err != nil {
				return err
			}
		}
		// Pod CIDRs are routed between nodes and from the root namespace.
		if err := k.routeNode(ctx, n); err != nil {
			return err
		}
		if c.opts.hasIPv6() {
			for _, o := range k.nodeList() {
				if o.light {
					continue
				}
				if err := c.net.routePodCIDR6(ctx, n.ns, o.index); err != nil {
					return err
				}
				if err := c.net.routePodCIDR6(ctx, o.ns, index); err != nil {
					return err
				}
			}
			if err := c.net.routePodCIDR6(ctx, "", index); err != nil {
				return err
			}
		}
	}
	if err := k.createNode(ctx, n); err != nil {
		return err
	}
	k.mu.Lock()
	k.nodes[name] = n
	k.mu.Unlock()
	k.wg.Go(func() { k.heartbeat(ctx, n) })
	if !light && !c.opts.NoKubeProxy {
		if err := k.startKubeProxy(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (k *kubelet) createNode(ctx context.Context, n *simNode) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name,
			Labels: map[string]string{
				corev1.LabelHostname:   n.name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				LabelZone:              n.zone,
				LabelNodeKind:          map[bool]string{true: "light", false: "netns"}[n.light],
			},
		},
	}
	if cidrs := k.c.opts.byFamily(n.podCIDR, n.podCIDR6); len(cidrs) > 0 {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = cidrs[0], cidrs
	}
	created, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", n.name, err)
	}
	if err := k.postStatus(ctx, n, created); err != nil {
		return err
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: created.UID}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(n.name),
			LeaseDurationSeconds: ptr.To(int32(40)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	l, err := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		l, err = k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating lease of node %s: %w", n.name, err)
	}
	n.lease = l
	return nil
}

// postStatus writes the node's status as a healthy kubelet would.
func (k *kubelet) postStatus(ctx context.Context, n *simNode, node *corev1.Node) error {
	now := metav1.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if node == nil {
			var err error
			if node, err = k.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		node = node.DeepCopy()
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		node.Status.Capacity, node.Status.Allocatable = capacity, capacity
		node.Status.Addresses = append(k.c.opts.nodeAddresses(n), corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.name})
		node.Status.NodeInfo = corev1.NodeSystemInfo{
			KubeletVersion: "v1.37.2", KubeProxyVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "pulselb-test://1", OSImage: "pulselb test node", KernelVersion: "simulated",
			MachineID: n.name, SystemUUID: n.name, BootID: n.name,
		}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
		cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
			c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
			for _, old := range node.Status.Conditions {
				if old.Type == t && old.Status == s {
					c.LastTransitionTime = old.LastTransitionTime
				}
			}
			return c
		}
		own := []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		}
		node.Status.Conditions = withConditions(node.Status.Conditions, own)
		_, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		node = nil
		return err
	})
	if err != nil {
		return fmt.Errorf("updating status of node %s: %w", n.name, err)
	}
	n.lastStatus = now.Time
	return nil
}

// withConditions returns old with the conditions of own's types replaced
// by own's: like the kubelet, the simulator keeps conditions other
// controllers set on the node (pulselb's ProxiesDrained).
func withConditions(old, own []corev1.NodeCondition) []corev1.NodeCondition {
	out := slices.Clone(own)
	for _, c := range old {
		if !slices.ContainsFunc(own, func(o corev1.NodeCondition) bool { return o.Type == c.Type }) {
			out = append(out, c)
		}
	}
	return out
}

// heartbeat renews the node's Lease and re-posts its status when it is due
// or when the node lifecycle controller marked the node not Ready, until
// ctx ends. A node taken down skips both.
func (k *kubelet) heartbeat(ctx context.Context, n *simNode) {
	logger := klog.FromContext(ctx).WithValues("node", n.name)
	t := time.NewTicker(n.leaseInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.mu.Lock()
		down := n.down
		n.mu.Unlock()
		if down {
			continue
		}
		if err := k.beat(ctx, n, false); err != nil && ctx.Err() == nil {
			logger.V(2).Info("Heartbeat failed", "err", err)
		}
	}
}

// beat renews the node's lease and posts its status when forced, due, or
// the node is not Ready.
func (k *kubelet) beat(ctx context.Context, n *simNode, forceStatus bool) error {
	n.beatMu.Lock()
	defer n.beatMu.Unlock()
	l := n.lease.DeepCopy()
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	updated, err := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone else wrote it; take theirs and renew on the next beat.
		if fresh, gerr := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.name, metav1.GetOptions{}); gerr == nil {
			n.lease = fresh
		}
		return fmt.Errorf("renewing lease: %w", err)
	}
	if err != nil {
		return fmt.Errorf("renewing lease: %w", err)
	}
	n.lease = updated
	node, err := k.nodeLister.Get(n.name)
	if err != nil {
		node = nil // not in the cache yet: postStatus reads it
	}
	if forceStatus || node == nil || NodeReady(node) != corev1.ConditionTrue || time.Since(n.lastStatus) > n.statusInterval {
		return k.postStatus(ctx, n, node)
	}
	return nil
}

// startKubeProxy runs kube-proxy in iptables mode in the node's namespace.
func (k *kubelet) startKubeProxy(ctx context.Context, n *simNode) error {
	c := k.c
	dir := filepath.Join(c.Dir, "nodes", n.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating node dir: %w", err)
	}
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: 0.0.0.0
mode: iptables
clusterCIDR: %s
detectLocalMode: ClusterCIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: ["primary"]
iptables:
  syncPeriod: 30s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, filepath.Join(c.Dir, "kube-proxy.kubeconfig"), n.name, strings.Join(c.opts.byFamily(PodCIDR, PodCIDR6), ","))
	path := filepath.Join(dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("writing kube-proxy config: %w", err)
	}
	p, err := startProcess(ctx, c.rec, filepath.Join(c.Dir, "logs"), "kube-proxy-"+n.name, n.ns,
		[]string{"PATH=" + os.Getenv("PATH")}, filepath.Join(c.bin, "kube-proxy"), "--config="+path, "--v=1")
	if err != nil {
		return err
	}
	n.proxy = p
	return nil
}
