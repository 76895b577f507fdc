package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// readyNodes lists the nodes once, as the controller's cache would hold
// them, and checks that all the light nodes are there and Ready.
func readyNodes(ctx context.Context, cs kubernetes.Interface) ([]*corev1.Node, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var nodes []*corev1.Node
	ready := 0
	for i := range list.Items {
		n := &list.Items[i]
		nodes = append(nodes, n)
		if cluster.NodeReady(n) == corev1.ConditionTrue {
			ready++
		}
	}
	if len(nodes) != *lightNodes || ready != len(nodes) {
		return nil, fmt.Errorf("listing nodes: %d nodes, %d Ready; want %d light nodes, all Ready", len(nodes), ready, *lightNodes)
	}
	return nodes, nil
}

// newCreateClient returns the client of the creations, limited to
// -create-qps.
func newCreateClient(c *cluster.Cluster) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = float32(*createQPS), int(*createQPS)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return cs, nil
}

// createServices creates *services Services with *creators goroutines
// sharing a client limited to *createQPS. Unless then is nil, each
// goroutine calls it with the created Service right after its creation.
func createServices(ctx context.Context, cs kubernetes.Interface, tr *tracker, then func(context.Context, *corev1.Service) error) error {
	var next atomic.Int64
	errs := make(chan error, *creators)
	var wg sync.WaitGroup
	for range *creators {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= *services {
					return
				}
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d", i), Namespace: benchNamespace},
					Spec: corev1.ServiceSpec{
						Type:                          corev1.ServiceTypeLoadBalancer,
						AllocateLoadBalancerNodePorts: ptr.To(*nodePorts),
						Selector:                      map[string]string{"app": "none"},
						Ports: []corev1.ServicePort{{Name: "p", Port: int32(firstPort + i),
							TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
					},
				}
				got, err := cs.CoreV1().Services(benchNamespace).Create(ctx, svc, metav1.CreateOptions{})
				if err != nil {
					errs <- fmt.Errorf("creating service %s: %w", svc.Name, err)
					return
				}
				tr.created(svc.Name, time.Now())
				if then != nil {
					if err := then(ctx, got); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() []error {
		var out []error
		for err := range errs {
			out = append(out, err)
		}
		return out
	}()...)
}

// startController runs the pulselb controller under test, with the
// flags of -controller-args, and waits until it serves metrics.
func startController(ctx context.Context, c *cluster.Cluster) (*scenario.Controller, error) {
	p, err := scenario.StartController(ctx, c, scenario.ControllerOptions{
		Namespace: systemNamespace, Ready: 30 * time.Second,
		Args: append([]string{"--probe-reports=false"}, strings.Fields(*ctlArgs)...),
	})
	if err != nil {
		return nil, err
	}
	log.Printf("pulselb controller %s (pid %d), log %s", strings.Join(p.Args, " "), p.Pid(), p.LogPath)
	return p, nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
