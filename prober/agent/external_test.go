package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
)

// externalNode is a node whose ExternalIP is ext.
func externalNode(name, internal, ext string) *corev1.Node {
	n := node(name, internal, "")
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ext})
	return n
}

// An external vantage probes the published addresses (and those held out
// as unreachable) of the Services that want it, and writes its own report,
// marked external, and its Lease; it reads no pods or Secrets.
func TestExternalVantageProbesPublishedAddresses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln := acceptAndClose(t) // on 127.0.0.1; nothing listens on 127.0.0.2
	port := int32(netip.MustParseAddrPort(ln.Addr().String()).Port())
	fast := map[string]string{contract.AnnotationProbeInterval: "100ms", contract.AnnotationRise: "1", contract.AnnotationFall: "1",
		contract.AnnotationExternalUnreachable: "127.0.0.2"}
	web := service("web", fast, corev1.ServicePort{Name: "http", Port: port, Protocol: corev1.ProtocolTCP})
	web.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}
	quiet := service("quiet", map[string]string{contract.AnnotationExternalVantages: contract.ExternalOff},
		corev1.ServicePort{Port: port, Protocol: corev1.ProtocolTCP})
	quiet.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}

	objs := []runtime.Object{web, quiet, externalNode("n1", "10.0.0.1", "127.0.0.1"), externalNode("n2", "10.0.0.2", "127.0.0.2")}
	client := fake.NewClientset(objs...)
	cluster := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "ProbeReportList"})
	reports := v1alpha1.NewClient(dyn)
	a, err := New(ctx, cluster, nil, reports, Config{Node: "vps", External: true, Namespace: systemNS,
		Leases: client.CoordinationV1().Leases(systemNS), MinWriteInterval: 20 * time.Millisecond,
		Scheduler: prober.Config{Interval: 100 * time.Millisecond, Rise: 1, Fall: 1}})
	if err != nil {
		t.Fatal(err)
	}
	cluster.Start(ctx.Done())
	defer cluster.Shutdown()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	up, down := contract.TargetKey("shop/web", "TCP", port, "n1"), contract.TargetKey("shop/web", "TCP", port, "n2")
	r := waitReport(t, ctx, reports, "external-vps", "n1 Up and n2 Down", func(r *v1alpha1.ProbeReport) bool {
		res := resultsByTarget(r)
		return res[up] != nil && res[up].State == v1alpha1.StateUp && res[down] != nil && res[down].State == v1alpha1.StateDown
	})
	if !r.Status.External {
		t.Error("report not marked external")
	}
	if len(r.Status.Results) != 2 || len(r.Status.Beacons) != 0 {
		t.Errorf("results %+v, beacons %+v; want web on n1 and n2 only", r.Status.Results, r.Status.Beacons)
	}
	if got := resultsByTarget(r)[up].Address; got != ln.Addr().String() {
		t.Errorf("probed %s, want the published address %s", got, ln.Addr())
	}
	waitFor(t, ctx, "the Lease pulselb-prober-external-vps", func() bool {
		l, err := client.CoordinationV1().Leases(systemNS).Get(ctx, "pulselb-prober-external-vps", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil
	})
	for _, act := range client.Actions() {
		if r := act.GetResource().Resource; r == "pods" || r == "secrets" {
			t.Errorf("external vantage asked for %s: %v", r, act)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestExternalVantageName(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cluster := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	if _, err := New(ctx, cluster, nil, nil, Config{Node: "My_VPS", External: true}); err == nil {
		t.Fatal("New accepted the vantage name My_VPS")
	}
}
