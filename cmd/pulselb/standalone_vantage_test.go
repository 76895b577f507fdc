package main

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/standalone"
)

// TestStandaloneExternalVantage: a standalone instance with an
// external-vantage section probes the cluster's published addresses and
// writes the report of its vantage name, marked external, and its Lease.
func TestStandaloneExternalVantage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := int32(netip.MustParseAddrPort(ln.Addr().String()).Port())
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{"pulselb.io/probe-interval": "100ms"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: port, Protocol: corev1.ProtocolTCP}}},
		Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "127.0.0.1"}}}}
	client := fake.NewClientset(svc, node)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "ProbeReportList"})
	reports := v1alpha1.NewClient(dyn)

	ev := &standalone.ExternalVantage{Name: "home", Namespace: standalone.DefaultExternalNamespace}
	a, factory, err := newExternalVantage(ctx, ev, client, reports, agent.NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	var last *v1alpha1.ProbeReport
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := reports.Get(ctx, "pulselb-system", "external-home")
		if err != nil {
			return false, nil
		}
		last = r
		return r.Status.External && len(r.Status.Results) == 1 && r.Status.Results[0].State == v1alpha1.StateUp &&
			r.Status.Results[0].Node == "n1" && r.Status.Results[0].Address == ln.Addr().String(), nil
	})
	if err != nil {
		t.Fatalf("waiting for the report external-home with shop/web Up on n1: %v; last %+v", err, last)
	}
	if _, err := client.CoordinationV1().Leases("pulselb-system").Get(ctx, "pulselb-prober-external-home", metav1.GetOptions{}); err != nil {
		t.Errorf("the vantage's Lease: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
