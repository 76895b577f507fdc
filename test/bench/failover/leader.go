package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

const (
	controllerApp = "app.kubernetes.io/name=pulselb-controller"
	leaseName     = "pulselb-controller"
	everywhere    = "everywhere"
)

// leaderPhase replaces the controller process by deploy/base's two
// controller replicas on the nodes and times the blackhole trials where
// the node that dies runs the leader, against trials where it runs no
// controller, alternately, on a Service with a proxy on every node
// (daemonset mode). It returns both series.
func (b *bench) leaderPhase(ctx context.Context, ctl *scenario.Controller, n int) (leader, none []time.Duration, err error) {
	if err := ctl.Stop(15 * time.Second); err != nil {
		return nil, nil, fmt.Errorf("stopping the controller process: %w", err)
	}
	objs, err := deploy.Build(filepath.Join("..", "deploy", "base"))
	if err != nil {
		return nil, nil, err
	}
	// The probers run already (deploy.InstallProbers, whose DaemonSet
	// selects its pods by other labels and cannot be changed in place).
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "DaemonSet" && o.GetName() == deploy.ProberName
	})
	a, err := deploy.NewApplier(b.c.RESTConfig)
	if err != nil {
		return nil, nil, err
	}
	if err := a.Install(ctx, objs); err != nil {
		return nil, nil, fmt.Errorf("installing deploy/base: %w", err)
	}
	web, err := b.cs.CoreV1().Services(appNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	b.rec = scenario.RecordStatus(ctx, b.cs, appNS, everywhere)
	if _, err := b.cs.CoreV1().Services(appNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: everywhere, Annotations: map[string]string{contract.AnnotationProxyMode: "daemonset"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: web.Spec.Selector,
			Ports: []corev1.ServicePort{{Name: "http", Port: 81, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("creating the daemonset-mode Service: %w", err)
	}
	if err := b.steadyEverywhere(ctx); err != nil {
		return nil, nil, err
	}
	for i := range n {
		victim, role, err := b.leaderVictim(ctx, i%2 == 0)
		if err != nil {
			return nil, nil, err
		}
		d, err := b.blackholeNode(ctx, victim)
		if err != nil {
			return nil, nil, fmt.Errorf("leader trial %d: %w", i+1, err)
		}
		if i%2 == 0 {
			leader = append(leader, d)
		} else {
			none = append(none, d)
		}
		log.Printf("installed trial %2d/%d: %s (%s) left the status after %s", i+1, n, victim, role, d.Round(time.Millisecond))
		if err := b.steadyEverywhere(ctx); err != nil {
			return nil, nil, err
		}
	}
	return leader, none, nil
}

// leaderVictim returns the leader's node, or a node that runs no
// controller replica.
func (b *bench) leaderVictim(ctx context.Context, ofLeader bool) (node, role string, err error) {
	if ofLeader {
		n, err := b.leaderNode(ctx)
		return n, "the leader's node", err
	}
	busy := map[string]bool{}
	for _, p := range scenario.ListPods(ctx, b.cs, systemNS, controllerApp) {
		busy[p.Spec.NodeName] = true
	}
	for _, n := range b.c.Nodes() {
		if !busy[n] {
			return n, "no controller", nil
		}
	}
	return "", "", errors.New("every node runs a controller replica")
}

// leaderNode returns the node of the pod that holds the leader Lease.
func (b *bench) leaderNode(ctx context.Context) (string, error) {
	l, err := b.cs.CoordinationV1().Leases(systemNS).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", errors.New("the leader Lease has no holder")
	}
	pod := *l.Spec.HolderIdentity
	if i := strings.LastIndexByte(pod, '_'); i > 0 {
		pod = pod[:i]
	}
	p, err := b.cs.CoreV1().Pods(systemNS).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the leader's pod: %w", err)
	}
	return p.Spec.NodeName, nil
}

// blackholeNode blackholes victim, returns the time until the status of
// the daemonset-mode Service is written without its address, and heals it.
func (b *bench) blackholeNode(ctx context.Context, victim string) (time.Duration, error) {
	ip := b.ips[victim]
	start := time.Now()
	if err := b.c.NodeBlackhole(ctx, victim); err != nil {
		return 0, err
	}
	err := scenario.PollEvery(ctx, 50*time.Millisecond, 60*time.Second, ip+" gone from the status", func() bool { return !b.rec.FirstWithout(ip, start).IsZero() })
	d := b.rec.FirstWithout(ip, start).Sub(start)
	// Stay cut off past the renew deadline (10s), so a cut-off leader
	// gives up, as it would in a real outage.
	time.Sleep(max(0, 12*time.Second-time.Since(start)))
	if herr := b.c.NodeHeal(ctx, victim); herr != nil {
		return 0, errors.Join(err, herr)
	}
	return d, err
}

// steadyEverywhere waits until the daemonset-mode Service is published on
// every node, no node is labelled unhealthy, both controller replicas are
// ready and one holds the Lease.
func (b *bench) steadyEverywhere(ctx context.Context) error {
	var want []string
	for _, n := range b.c.Nodes() {
		want = append(want, b.ips[n])
	}
	slices.Sort(want)
	var missing string
	err := scenario.PollEvery(ctx, 50*time.Millisecond, 180*time.Second, "shop/everywhere on every node, two controllers ready, one leading", func() bool {
		if got := b.rec.Last(); !slices.Equal(got, want) {
			missing = fmt.Sprintf("status %v, want %v", got, want)
			return false
		}
		if n := len(scenario.ReadyPods(ctx, b.cs, systemNS, controllerApp)); n != 2 {
			missing = fmt.Sprintf("%d controllers ready", n)
			return false
		}
		if _, err := b.leaderNode(ctx); err != nil {
			missing = err.Error()
			return false
		}
		l, err := b.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.LabelUnhealthy})
		if err != nil || len(l.Items) > 0 {
			missing = "a node is labelled unhealthy"
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, missing)
	}
	return nil
}
