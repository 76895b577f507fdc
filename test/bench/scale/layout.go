package main

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/bench/loopnodes"
)

// nodeName names node i (its address is loopnodes.IP(i)).
func nodeName(i int) string { return fmt.Sprintf("sn-%05d", i) }

func serviceName(s int) string { return fmt.Sprintf("svc-%05d", s) }

// layout is the cluster the benchmark builds: where each Service's proxies
// run, who probes what, and which nodes the trials blackhole.
type layout struct {
	nodes    []*loopnodes.Node
	services int
	// proxies[s] are the two nodes of Service s.
	proxies [][2]int
	victims []int
	// vantages gives each target key (beacons and Service ports) its K
	// vantages, as contract.Vantages computes them for the probers and the
	// controller.
	vantages func(key, node string) []string
}

func newLayout(nodes, services, trials int) *layout {
	l := &layout{services: services}
	for i := range nodes {
		l.nodes = append(l.nodes, &loopnodes.Node{IP: loopnodes.IP(i)})
	}
	for s := range services {
		p := [2]int{s % nodes, (s + nodes/2) % nodes}
		l.proxies = append(l.proxies, p)
		for _, i := range p {
			l.nodes[i].Ports = append(l.nodes[i].Ports, firstPort+s)
		}
	}
	// Victims spread over the nodes, each a different node.
	for t := range min(trials, nodes) {
		l.victims = append(l.victims, (t*nodes/min(trials, nodes)+nodes/(3*min(trials, nodes))+1)%nodes)
	}
	for len(l.victims) < trials {
		l.victims = append(l.victims, l.victims[len(l.victims)%nodes])
	}
	cands := make([]contract.Vantage, nodes)
	for i := range cands {
		cands[i] = contract.Vantage{Node: nodeName(i)}
	}
	memo := (&contract.VantageMemo{}).For(cands, contract.DefaultVantages)
	l.vantages = func(key, node string) []string { return memo(key, node, "") }
	return l
}

func (l *layout) victimNames() []string {
	out := make([]string, len(l.victims))
	for i, v := range l.victims {
		out[i] = nodeName(v)
	}
	return out
}

// servicesOn returns the Services with a proxy on node i.
func (l *layout) servicesOn(i int) []string {
	var out []string
	for s, p := range l.proxies {
		if p[0] == i || p[1] == i {
			out = append(out, serviceName(s))
		}
	}
	return out
}

// servicesOnIndex returns the indexes of the Services with a proxy on node i.
func (l *layout) servicesOnIndex(i int) []int {
	var out []int
	for s, p := range l.proxies {
		if p[0] == i || p[1] == i {
			out = append(out, s)
		}
	}
	return out
}

// targetKey is the key of Service s's port on node i.
func targetKey(s, i int) string {
	return contract.TargetKey(benchNS+"/"+serviceName(s), string(corev1.ProtocolTCP), int32(firstPort+s), nodeName(i))
}

// realAgents returns the nodes that probe a victim's beacon or one of its
// Service ports, sorted.
func (l *layout) realAgents() []int {
	byName := map[string]int{}
	for i := range l.nodes {
		byName[nodeName(i)] = i
	}
	set := map[int]bool{}
	for _, v := range l.victims {
		for _, n := range l.vantages(contract.BeaconKey(nodeName(v)), nodeName(v)) {
			set[byName[n]] = true
		}
		for s, p := range l.proxies {
			if p[0] == v || p[1] == v {
				for _, n := range l.vantages(targetKey(s, v), nodeName(v)) {
					set[byName[n]] = true
				}
			}
		}
	}
	out := make([]int, 0, len(set))
	for i := range set {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// create makes the Node objects, prober pods, Services and proxy pods.
func (l *layout) create(ctx context.Context, cs kubernetes.Interface) error {
	err := loopnodes.Parallel(ctx, *workers, len(l.nodes), func(i int) error {
		if err := loopnodes.CreateReadyNode(ctx, cs, nodeName(i), loopnodes.IP(i)); err != nil {
			return err
		}
		return loopnodes.CreateReadyPod(ctx, cs, systemNS, "pulselb-prober-"+nodeName(i), nodeName(i),
			map[string]string{contract.LabelAppName: contract.ProberAppName})
	})
	if err != nil {
		return err
	}
	return loopnodes.Parallel(ctx, *workers, l.services, func(s int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: serviceName(s)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
				Ports: []corev1.ServicePort{{Name: "tcp", Port: int32(firstPort + s), Protocol: corev1.ProtocolTCP}}},
		}
		svc, err := cs.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Service %d: %w", s, err)
		}
		for k, i := range l.proxies[s] {
			if err := loopnodes.CreateReadyPod(ctx, cs, systemNS, fmt.Sprintf("pulselb-%s-%d", svc.Name, k), nodeName(i), contract.ProxySelector(svc)); err != nil {
				return err
			}
		}
		return nil
	})
}

// raiseFileLimit lets the process hold every listener and probe socket
// of the largest of runs.
func raiseFileLimit(runs []size) error {
	var want uint64 = 4096
	for _, s := range runs {
		want = max(want, uint64(s.nodes+2*s.services)*2+4096)
	}
	return loopnodes.RaiseFileLimit(want)
}
