// Package loopnodes simulates nodes without processes for the benchmarks
// that run many prober agents in one process (bench/probers, bench/scale):
// each node is a loopback address with a listener for its beacon and one
// for each of its proxies' ports, blackholed by closing them, and its
// objects (the Node, pods reported Running and Ready as a kubelet would)
// are created by a bounded number of goroutines.
package loopnodes

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/pulselb/pulselb/prober/agent"
)

// IP is node i's loopback address: 127.1.0.1 onwards, 250 to a /24, for
// up to 62,500 nodes per /16.
func IP(i int) string { return fmt.Sprintf("127.%d.%d.%d", 1+i/62500, i/250%250, 1+i%250) }

// Node is one simulated node: its listeners, closed while it is
// blackholed.
type Node struct {
	// IP is its address; Ports the ports of its proxies.
	IP    string
	Ports []int
	mu    sync.Mutex
	lns   []net.Listener
}

// Listen opens the node's beacon listener on beaconPort and one on each
// of its proxies' ports, each answering as a prober's beacon does
// (agent.ServeBeacon) until closed.
func (n *Node) Listen(ctx context.Context, beaconPort int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range append([]int{beaconPort}, n.Ports...) {
		ln, err := net.Listen("tcp", net.JoinHostPort(n.IP, strconv.Itoa(p)))
		if err != nil {
			return fmt.Errorf("listening on %s:%d: %w", n.IP, p, err)
		}
		n.lns = append(n.lns, ln)
		go func() { _ = agent.ServeBeacon(ctx, ln, 0) }()
	}
	return nil
}

// Blackhole closes every listener of the node: probes are refused.
func (n *Node) Blackhole() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ln := range n.lns {
		ln.Close()
	}
	n.lns = nil
}

// CreateReadyNode creates Node name with InternalIP ip and reports it
// Ready, once: no heartbeats follow, so the cluster's node grace period
// must outlast the benchmark.
func CreateReadyNode(ctx context.Context, cs kubernetes.Interface, name, ip string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	// The node lifecycle controller updates a new node too.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Benchmark",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("making node %s Ready: %w", name, err)
	}
	return nil
}

// CreateReadyPod creates pod ns/name on node and reports it Running and
// Ready, as a kubelet would.
func CreateReadyPod(ctx context.Context, cs kubernetes.Interface, ns, name, node string, labels map[string]string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pulselb"}}},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("making pod %s Ready: %w", name, err)
	}
	return nil
}

// Parallel calls f(0..n-1) on workers goroutines and returns the first
// error; after one, it starts no more calls.
func Parallel(ctx context.Context, workers, n int, f func(int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
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

// RaiseFileLimit raises the process' open file limit to at least want, so
// that it can hold every listener and probe socket.
func RaiseFileLimit(want uint64) error {
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
