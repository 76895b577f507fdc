package main

import (
	"context"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/bench/loopnodes"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// nodeName names node i (its address is loopnodes.IP(i)).
func nodeName(i int) string { return fmt.Sprintf("bn-%05d", i) }

// setup creates the nodes, prober pods, Services and proxy pods.
func setup(ctx context.Context, cs kubernetes.Interface) ([]*loopnodes.Node, error) {
	nodes := make([]*loopnodes.Node, *agents)
	for i := range nodes {
		nodes[i] = &loopnodes.Node{IP: loopnodes.IP(i)}
	}
	for s := range *services {
		for _, i := range []int{s % *agents, (s + *agents/2) % *agents} {
			nodes[i].Ports = append(nodes[i].Ports, firstPort+s)
		}
	}
	err := loopnodes.Parallel(ctx, *workers, *agents, func(i int) error {
		if err := loopnodes.CreateReadyNode(ctx, cs, nodeName(i), loopnodes.IP(i)); err != nil {
			return err
		}
		return loopnodes.CreateReadyPod(ctx, cs, systemNS, "pulselb-prober-"+nodeName(i), nodeName(i),
			map[string]string{contract.LabelAppName: contract.ProberAppName})
	})
	if err != nil {
		return nil, err
	}
	err = loopnodes.Parallel(ctx, *workers, *services, func(s int) error {
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
			if err := loopnodes.CreateReadyPod(ctx, cs, systemNS, fmt.Sprintf("pulselb-%s-%d", svc.Name, k), nodeName(i), contract.ProxySelector(svc)); err != nil {
				return err
			}
		}
		return nil
	})
	return nodes, err
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
