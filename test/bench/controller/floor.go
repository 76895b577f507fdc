package main

import (
	"context"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/cluster"
)

// runFloor measures the control plane alone (-floor): each Service's proxy
// Deployment is created by the creating goroutine instead of the
// controller, and the run ends when every Deployment is ready.
func runFloor(ctx context.Context, c *cluster.Cluster, tr *tracker) error {
	nodes, err := readyNodes(ctx, c.Client)
	if err != nil {
		return err
	}
	// The controller's defaults with the flags startController passes.
	cfg := placement.Config{
		Namespace:         systemNamespace,
		Image:             "pulselb",
		ImagePullPolicy:   corev1.PullIfNotPresent,
		PriorityClassName: placement.DefaultPriorityClassName,
		ProxyMode:         placement.DefaultProxyMode,
	}
	createClient, err := newCreateClient(c)
	if err != nil {
		return err
	}
	createDeployment := func(ctx context.Context, svc *corev1.Service) error {
		w, problems := placement.Desired(svc, nodes, cfg)
		if len(problems) > 0 || w.Deployment == nil {
			return fmt.Errorf("service %s: want a proxy Deployment and no problems, got mode %q, problems %v", svc.Name, w.Mode, problems)
		}
		d, err := createClient.AppsV1().Deployments(systemNamespace).Create(ctx, w.Deployment, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating deployment %s/%s: %w", systemNamespace, w.Deployment.Name, err)
		}
		tr.deploymentCreatedAt(w.Deployment.Name, time.Now())
		// The controller also creates each Deployment's budget, owned by
		// the Deployment, as soon as it exists.
		if w.Budget != nil {
			b := w.Budget.DeepCopy()
			b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, BlockOwnerDeletion: ptr.To(true)}}
			if _, err := createClient.PolicyV1().PodDisruptionBudgets(systemNamespace).Create(ctx, b, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating budget %s/%s: %w", systemNamespace, b.Name, err)
			}
		}
		return nil
	}

	// The harness' own cost before any object: the light nodes' heartbeats
	// and the control plane's idle loops.
	var idle string
	if *idleWindow > 0 {
		machineBefore, err := procstat.ReadMachine()
		if err != nil {
			return err
		}
		procsBefore := processCPU()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*idleWindow): // a measurement window, not synchronisation
		}
		machineAfter, err := procstat.ReadMachine()
		if err != nil {
			return err
		}
		idle = fmt.Sprintf("machine %.0f %% busy over %s; %s", machineAfter.BusyPercent(machineBefore), *idleWindow, cpuByProcess(procsBefore, processCPU()))
	}

	before, err := readUsage(ctx, c.Client)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := createServices(ctx, createClient, tr, createDeployment); err != nil {
		return err
	}
	created := time.Since(start)
	log.Printf("created %d Services and %d proxy Deployments in %s", *services, *services, created.Round(time.Millisecond))

	deadline := time.Now().Add(*timeout)
	for {
		_, ready := tr.counts()
		if ready >= *services {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d of %d proxy Deployments ready", *timeout, ready, *services)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			log.Printf("%6.1fs: %d of %d proxy Deployments ready", time.Since(start).Seconds(), ready, *services)
		}
	}
	after, err := readUsage(ctx, c.Client)
	if err != nil {
		return err
	}
	loadavg := loadAverage()
	_, last, _ := tr.deploymentSpan(*services)
	total := last.Sub(start)

	fmt.Println()
	fmt.Printf("control plane alone (no pulselb), %d Services + %d proxy Deployments on %d light nodes (%s)\n",
		*services, *services, *lightNodes, setting())
	fmt.Printf("  Services and Deployments created in   %8.1f s (client limit %.0f/s for both, %d in parallel, NodePorts %v)\n",
		created.Seconds(), *createQPS, *creators, *nodePorts)
	fmt.Printf("  every proxy Deployment ready after    %8.1f s (from the first creation; pulselb's target is %s)\n",
		total.Seconds(), *targetTime)
	fmt.Printf("  per Deployment, creation to ready: %s\n", quantiles(tr.deploymentLatencies()))
	printUsage(before, after, loadavg)
	if idle != "" {
		fmt.Printf("  idle harness before the creations: %s\n", idle)
	}
	return nil
}
