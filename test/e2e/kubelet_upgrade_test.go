package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/traffic"
)

// upgradeImage is the next release of the test image: the same build
// under another tag, so that an upgrade changes only the reference.
const upgradeImage = "pulselb.test/pulselb:v2"

// webDNSTTL is the TTL shop/web's records get: no dns-ttl annotation, so
// the controller's default, 5 s; its drain delay is the default, TTL + 10 s.
const webDNSTTL = 5 * time.Second

// kubeletRollingUpgrade upgrades pulselb on the kubelet nodes as a user
// does, by applying the install again with a new image, while a client
// outside the cluster sends requests to shop/web without a pause. The
// client resolves web from its status (what external-dns publishes) and
// holds each answer for the TTL. The kubelets roll the controller
// Deployment and the prober DaemonSet, the new leader rolls the proxies
// (hostPorts through portmap), and web, on pulselb's default drain delay,
// must lose no request. installed is the image pulselb runs; upgradeImage
// becomes a second name of it.
func kubeletRollingUpgrade(ctx context.Context, t *testing.T, c *cluster.Cluster, a *deploy.Applier, ns, installed string) {
	cs := c.Client
	if err := c.TagImage(ctx, installed, upgradeImage); err != nil {
		t.Fatal(err)
	}
	before := ingressIPs(ctx, cs, ns, "web")
	res := newStatusResolver(ctx, cs, ns, "web", webDNSTTL)
	client := traffic.Start(ctx, traffic.Options{
		Name: "web." + ns, Port: 80, Resolver: res,
		Timeout: time.Second, MaxRequests: 200_000, MaxDuration: 10 * time.Minute,
		// At most 500 requests a second, as in TestPlannedChanges.
		Interval: 2 * time.Millisecond,
		Run:      func(fn func() error) error { return cluster.RunInNamespace(cluster.ClientNamespace, fn) },
	})
	stopped := false
	defer func() {
		if !stopped {
			_, _ = client.Stop()
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := client.WaitSucceeding(wctx, 50)
	cancel()
	if err != nil {
		t.Fatalf("the client had no 50 successes before the upgrade: %v", err)
	}

	began := time.Now()
	if err := a.Install(ctx, overlayBase(t, upgradeImage)); err != nil {
		t.Fatalf("applying the install with %s: %v", upgradeImage, err)
	}
	var why string
	poll(ctx, t, 5*time.Minute, "controllers, probers and web's proxies rolled to "+upgradeImage+" and settled", func() bool {
		why = upgradeSettled(ctx, t, c, ns)
		return why == ""
	})
	rolled := time.Since(began)
	// Settled means the old proxies are gone; a client may still hold an
	// answer from before for one TTL: keep sending until it runs out.
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(webDNSTTL + time.Second):
	}
	r, err := client.Stop()
	stopped = true
	if err != nil {
		t.Errorf("client: %v", err)
	}
	after := ingressIPs(ctx, cs, ns, "web")
	t.Logf("upgrade rolled in %s; status %v → %v; web: %s", rolled.Round(100*time.Millisecond), before, after, r)
	for addr, n := range r.ByAddr() {
		t.Logf("  %s: %d sent, %d failed", addr, n[0], n[1])
	}
	for _, f := range r.Failures(5) {
		t.Errorf("request to %s at +%s failed: %s", f.Addr, f.At.Sub(began).Round(time.Millisecond), f.Err)
	}
	if r.Sent-r.Failed < 1000 {
		t.Errorf("only %d requests succeeded during the upgrade: too few to show that none was lost", r.Sent-r.Failed)
	}
	if res.answers() < 2 {
		t.Errorf("the client resolved web %d times: its answers never expired during the upgrade", res.answers())
	}
}

// upgradeSettled says what is not yet rolled to upgradeImage: the
// controller Deployment, the prober DaemonSet, web's proxies (every proxy
// pod, terminating ones too, on the new image; two ready), and web's
// status (the nodes of its ready proxies). "" when all are.
func upgradeSettled(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) string {
	cs := c.Client
	dep, err := cs.AppsV1().Deployments(systemNamespace).Get(ctx, "pulselb-controller", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if want := *dep.Spec.Replicas; dep.Status.ObservedGeneration < dep.Generation || dep.Status.UpdatedReplicas != want ||
		dep.Status.Replicas != want || dep.Status.AvailableReplicas != want {
		return fmt.Sprintf("controller Deployment rolling: %+v", dep.Status)
	}
	ds, err := cs.AppsV1().DaemonSets(systemNamespace).Get(ctx, "pulselb-prober", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if ds.Status.ObservedGeneration < ds.Generation || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled ||
		ds.Status.NumberAvailable != ds.Status.DesiredNumberScheduled {
		return fmt.Sprintf("prober DaemonSet rolling: %+v", ds.Status)
	}
	for _, sel := range []string{"app.kubernetes.io/name=pulselb-controller", "app.kubernetes.io/name=pulselb-prober", proxyAppSelector} {
		for _, p := range listPods(ctx, t, cs, systemNamespace, sel) {
			for _, ctr := range p.Spec.Containers {
				if ctr.Image != upgradeImage {
					return fmt.Sprintf("pod %s on %s runs %s", p.Name, p.Spec.NodeName, ctr.Image)
				}
			}
		}
	}
	ready := readyPods(ctx, t, cs, systemNamespace, proxyAppSelector)
	if len(ready) != 2 {
		return fmt.Sprintf("%d proxy pods ready, want 2", len(ready))
	}
	ips := c.NodeIPs()
	var want []string
	for _, p := range ready {
		want = append(want, ips[p.Spec.NodeName])
	}
	got := ingressIPs(ctx, cs, ns, "web")
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return fmt.Sprintf("web's status %v, its ready proxies' nodes %v", got, want)
	}
	return ""
}

// statusResolver resolves a Service to its status.loadBalancer.ingress,
// as a client resolves a name that external-dns publishes from that
// status, without external-dns' own sync interval: an answer is held for
// ttl. A goroutine reads the status every 100 ms, so Lookup, which the
// traffic client calls from the client namespace, never waits on the API.
type statusResolver struct {
	ttl time.Duration

	mu       sync.Mutex
	latest   []netip.Addr
	addrs    []netip.Addr
	expires  time.Time
	resolved int
}

func newStatusResolver(ctx context.Context, cs kubernetes.Interface, ns, name string, ttl time.Duration) *statusResolver {
	r := &statusResolver{ttl: ttl}
	read := func() {
		svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return // keep the last status, as a DNS zone keeps its records
		}
		var addrs []netip.Addr
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
				addrs = append(addrs, a)
			}
		}
		r.mu.Lock()
		r.latest = addrs
		r.mu.Unlock()
	}
	read()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return r
}

var errNoIngress = errors.New("no IPv4 address in the Service's status")

// Lookup implements traffic.Lookuper.
func (r *statusResolver) Lookup(string) ([]netip.Addr, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if len(r.addrs) > 0 && now.Before(r.expires) {
		return r.addrs, false, nil
	}
	if len(r.latest) == 0 {
		return nil, true, errNoIngress
	}
	r.addrs, r.expires = slices.Clone(r.latest), now.Add(r.ttl)
	r.resolved++
	return r.addrs, true, nil
}

// answers is how many answers the client has taken.
func (r *statusResolver) answers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resolved
}

var _ traffic.Lookuper = (*statusResolver)(nil)
