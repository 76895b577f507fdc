package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// nodeName and nodeIP name node i and give its loopback address.
func nodeName(i int) string { return fmt.Sprintf("bn-%05d", i) }
func nodeIP(i int) string   { return fmt.Sprintf("127.%d.%d.%d", 1+i/62500, i/250%250, 1+i%250) }

// node is one simulated node: its listeners, closed while it is blackholed.
type node struct {
	ip    string
	ports []int
	mu    sync.Mutex
	lns   []net.Listener
}

// listen opens the node's beacon and proxy listeners, each accepting and
// closing connections until closed.
func (n *node) listen(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range append([]int{beaconPort}, n.ports...) {
		ln, err := net.Listen("tcp", net.JoinHostPort(n.ip, strconv.Itoa(p)))
		if err != nil {
			return fmt.Errorf("listening on %s:%d: %w", n.ip, p, err)
		}
		n.lns = append(n.lns, ln)
		go func() { _ = agent.ServeBeacon(ctx, ln, 0) }()
	}
	return nil
}

// blackhole closes every listener of the node: probes are refused.
func (n *node) blackhole() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ln := range n.lns {
		ln.Close()
	}
	n.lns = nil
}

// setup creates the nodes, prober pods, Services and proxy pods.
func setup(ctx context.Context, cs kubernetes.Interface) ([]*node, error) {
	nodes := make([]*node, *agents)
	for i := range nodes {
		nodes[i] = &node{ip: nodeIP(i)}
	}
	for s := range *services {
		for _, i := range []int{s % *agents, (s + *agents/2) % *agents} {
			nodes[i].ports = append(nodes[i].ports, firstPort+s)
		}
	}
	err := parallel(ctx, *agents, func(i int) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %d: %w", i, err)
		}
		// The node lifecycle controller updates a new node too.
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, nodeName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP(i)}}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Benchmark",
				LastHeartbeatTime: now, LastTransitionTime: now}}
			_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("making node %d Ready: %w", i, err)
		}
		return createReadyPod(ctx, cs, "pulselb-prober-"+nodeName(i), nodeName(i),
			map[string]string{contract.LabelAppName: contract.ProberAppName})
	})
	if err != nil {
		return nil, err
	}
	err = parallel(ctx, *services, func(s int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("svc-%05d", s),
				Annotations: map[string]string{contract.AnnotationProbeInterval: probeInterval.String()}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
				Ports: []corev1.ServicePort{{Name: "tcp", Port: int32(firstPort + s), Protocol: corev1.ProtocolTCP}}},
		}
		svc, err := cs.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Service %d: %w", s, err)
		}
		for k, i := range []int{s % *agents, (s + *agents/2) % *agents} {
			if err := createReadyPod(ctx, cs, fmt.Sprintf("pulselb-%s-%d", svc.Name, k), nodeName(i), contract.ProxySelector(svc)); err != nil {
				return err
			}
		}
		return nil
	})
	return nodes, err
}

// createReadyPod creates a pod on node and reports it Running and Ready, as
// a kubelet would.
func createReadyPod(ctx context.Context, cs kubernetes.Interface, name, node string, labels map[string]string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pulselb"}}},
	}
	if _, err := cs.CoreV1().Pods(systemNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := cs.CoreV1().Pods(systemNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = cs.CoreV1().Pods(systemNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("making pod %s Ready: %w", name, err)
	}
	return nil
}

// parallel calls f(0..n-1) on *workers goroutines and returns the first
// error.
func parallel(ctx context.Context, n int, f func(int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, *workers)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// startController runs `pulselb controller` judging the node beacons only.
func startController(ctx context.Context, c *cluster.Cluster) (*scenario.Controller, error) {
	p, err := scenario.StartController(ctx, c, scenario.ControllerOptions{
		Namespace: systemNS, Ready: 60 * time.Second,
		Args: []string{"--class-only", "--probe-reports", "--dashboard=false"},
	})
	if err != nil {
		return nil, err
	}
	log.Printf("pulselb controller (pid %d), log %s", p.Pid(), p.LogPath)
	return p, nil
}

// raiseFileLimit lets the process hold every listener and probe socket.
func raiseFileLimit() error {
	want := uint64(*agents+2**services)*2 + 4096
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("reading the open file limit: %w", err)
	}
	if l.Cur >= want {
		return nil
	}
	l.Cur = max(l.Cur, want)
	l.Max = max(l.Max, l.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raising the open file limit to %d: %w", want, err)
	}
	return nil
}
