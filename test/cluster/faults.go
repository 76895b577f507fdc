package cluster

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"time"
)

// NodeDown takes a node off the network (its link down) and stops its
// heartbeats, as if it lost power: the node turns NotReady after the grace
// period and its processes keep running unreachable.
func (c *Cluster) NodeDown(ctx context.Context, name string) error {
	n, err := c.netNode(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.down = true
	if n.upCh == nil {
		n.upCh = make(chan struct{})
	}
	n.mu.Unlock()
	return run(ctx, "ip", "link", "set", fmt.Sprintf("plt-h%d", n.index), "down")
}

// NodeUp undoes NodeDown: link up, heartbeats and status posted at once, and
// the node's pods reconciled.
func (c *Cluster) NodeUp(ctx context.Context, name string) error {
	n, err := c.netNode(name)
	if err != nil {
		return err
	}
	if err := run(ctx, "ip", "link", "set", fmt.Sprintf("plt-h%d", n.index), "up"); err != nil {
		return err
	}
	n.mu.Lock()
	n.down = false
	if n.upCh != nil {
		close(n.upCh)
		n.upCh = nil
	}
	n.mu.Unlock()
	if n.real != nil {
		return nil // its kubelet reconnects by itself
	}
	if err := c.kubelet.beat(ctx, n, true); err != nil {
		return err
	}
	pods, err := c.kubelet.podLister.List(everything)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Spec.NodeName == name {
			c.kubelet.queue.Add(p.Namespace + "/" + p.Name)
		}
	}
	return nil
}

// NodeBlackhole drops every packet to and from the node's network while
// its heartbeats continue: the API server sees a healthy node nobody can
// reach.
func (c *Cluster) NodeBlackhole(ctx context.Context, name string) error {
	n, err := c.netNode(name)
	if err != nil {
		return err
	}
	return c.faultRules(ctx, n, "-A", nil)
}

// NodeHeal removes every blackhole and partition involving the node.
func (c *Cluster) NodeHeal(ctx context.Context, name string) error {
	n, err := c.netNode(name)
	if err != nil {
		return err
	}
	for _, tool := range c.opts.iptablesTools() {
		for _, table := range []string{"raw", "mangle"} {
			if err := nsRun(ctx, n.ns, tool, "-w", "-t", table, "-F", "PLT-FAULT"); err != nil {
				return err
			}
		}
	}
	for _, o := range c.kubelet.nodeList() {
		if o.light || o == n {
			continue
		}
		for _, addr := range n.addrs() {
			// Deleting a rule that is not there fails; that is fine.
			_ = nsRun(ctx, o.ns, iptablesFor(addr), "-w", "-t", "raw", "-D", "PLT-FAULT", "-i", "eth0", "-s", addr, "-j", "DROP")
			_ = nsRun(ctx, o.ns, iptablesFor(addr), "-w", "-t", "mangle", "-D", "PLT-FAULT", "-o", "eth0", "-d", addr, "-j", "DROP")
		}
	}
	return nil
}

// NodePartition drops packets between two nodes (and their pods), both ways.
func (c *Cluster) NodePartition(ctx context.Context, a, b string) error {
	na, err := c.netNode(a)
	if err != nil {
		return err
	}
	nb, err := c.netNode(b)
	if err != nil {
		return err
	}
	if err := c.faultRules(ctx, na, "-A", nb.addrs()); err != nil {
		return err
	}
	return c.faultRules(ctx, nb, "-A", na.addrs())
}

// faultRules drops traffic on n's uplink, from and to peers or everything.
func (c *Cluster) faultRules(ctx context.Context, n *simNode, op string, peers []string) error {
	type rule struct{ tool, peer string }
	var rules []rule
	if peers == nil {
		for _, tool := range c.opts.iptablesTools() {
			rules = append(rules, rule{tool: tool})
		}
	}
	for _, p := range peers {
		rules = append(rules, rule{tool: iptablesFor(p), peer: p})
	}
	for _, r := range rules {
		p := r.peer
		in := []string{r.tool, "-w", "-t", "raw", op, "PLT-FAULT", "-i", "eth0"}
		out := []string{r.tool, "-w", "-t", "mangle", op, "PLT-FAULT", "-o", "eth0"}
		if p != "" {
			in = append(in, "-s", p)
			out = append(out, "-d", p)
		}
		if err := nsRun(ctx, n.ns, append(in, "-j", "DROP")...); err != nil {
			return err
		}
		if err := nsRun(ctx, n.ns, append(out, "-j", "DROP")...); err != nil {
			return err
		}
	}
	return nil
}

// addrs are the node's addresses and pod CIDR, as iptables matches.
func (n *simNode) addrs() []string {
	var a []string
	for _, s := range []string{n.internalIP4, n.podCIDR, n.externalIP4, n.internalIP6, n.podCIDR6, n.externalIP6} {
		if s != "" {
			a = append(a, s)
		}
	}
	return a
}

func (c *Cluster) netNode(name string) (*simNode, error) {
	n, err := c.kubelet.node(name)
	if err != nil {
		return nil, err
	}
	if n.light {
		return nil, fmt.Errorf("node %s is a light node without a network", name)
	}
	return n, nil
}

// KillContainer kills a container's process with SIGKILL; the simulator
// restarts it per the pod's restart policy.
func (c *Cluster) KillContainer(namespace, pod, container string) error {
	return c.SignalContainer(namespace, pod, container, syscall.SIGKILL)
}

// SignalContainer sends sig to a container's process: SIGSTOP freezes it
// (its sockets stay open, its probes time out), SIGCONT resumes it.
func (c *Cluster) SignalContainer(namespace, pod, container string, sig syscall.Signal) error {
	c.kubelet.mu.Lock()
	rt := c.kubelet.pods[c.kubelet.podKeys[namespace+"/"+pod]]
	c.kubelet.mu.Unlock()
	if rt == nil {
		return fmt.Errorf("pod %s/%s is not running", namespace, pod)
	}
	rt.mu.Lock()
	st := rt.containers[container]
	var p *process
	if st != nil {
		p = st.proc
	}
	rt.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("container %s of pod %s/%s is not running", container, namespace, pod)
	}
	return p.cmd.Process.Signal(sig)
}

// RestartAPIServer stops the API server and starts it again with the same
// flags, waiting until it is ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	return c.cp.restartAPIServer(ctx, 0)
}

// APIServerOutage stops the API server, keeps it stopped for down, and
// starts it again with the same flags, waiting until it is ready: an
// outage long enough for the clients' reconnections to back off.
func (c *Cluster) APIServerOutage(ctx context.Context, down time.Duration) error {
	return c.cp.restartAPIServer(ctx, down)
}

// WaitAPIService waits until each of nodes reaches the API server through
// the kubernetes Service, as the node's pods do (a TCP connect from its
// namespace), or until timeout. After an API server restart that comes
// seconds after the API server is ready: it takes its address out of the
// Service when it stops and puts it back when it starts, and each node's
// kube-proxy programs the address again only once its own watch is back.
// Without kube-proxy (Options.NoKubeProxy) nothing routes the Service, and
// it returns at once.
func (c *Cluster) WaitAPIService(ctx context.Context, nodes []string, timeout time.Duration) error {
	if c.opts.NoKubeProxy {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(c.opts.apiServiceIP(), "443")
	for _, name := range nodes {
		n, err := c.netNode(name)
		if err != nil {
			return err
		}
		for {
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			conn, err := dialInNetns(dctx, n.ns, "tcp", addr)
			dcancel()
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s does not reach the API server at %s (the kubernetes Service): %w", name, addr, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// PauseEtcd freezes etcd (SIGSTOP) for d, as a stalled disk or a
// long garbage-collection pause would, and lets it go on (SIGCONT): the
// API server's reads and writes hang meanwhile, its watches stay open.
// etcd is continued also when ctx ends first.
func (c *Cluster) PauseEtcd(ctx context.Context, d time.Duration) error {
	return c.cp.etcd.pause(ctx, d)
}
