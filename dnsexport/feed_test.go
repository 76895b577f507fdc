package dnsexport

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
)

const testClass = contract.Class

func lbService(name string, class *string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: class,
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func withIngress(svc *corev1.Service, ips ...string) *corev1.Service {
	svc = svc.DeepCopy()
	svc.Status.LoadBalancer.Ingress = nil
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress,
			corev1.LoadBalancerIngress{IP: ip, IPMode: new(corev1.LoadBalancerIPModeProxy)})
	}
	return svc
}

type reports struct {
	mu  sync.Mutex
	got map[string][]error
}

func (r *reports) add(svc *corev1.Service, problems []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[svc.Namespace+"/"+svc.Name] = append(r.got[svc.Namespace+"/"+svc.Name], problems...)
}

func (r *reports) of(key string) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[key])
}

// startFeed runs a server fed from a fake clientset's Service informer
// until the test ends.
func startFeed(t *testing.T, cfg FeedConfig, objs ...*corev1.Service) (kubernetes.Interface, *Server, *reports) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := NewServer(Config{Zone: testZoneConfig, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	rep := &reports{got: map[string][]error{}}
	cfg.Report = rep.add
	factory := informers.NewSharedInformerFactory(client, 0)
	feed, err := NewFeed(srv, factory.Core().V1().Services(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	runServer(t, srv)
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("feed Run: %v", err)
		}
		factory.Shutdown()
	})
	return client, srv, rep
}

// waitFor queries name until the answer satisfies ok or 5 s pass.
func waitFor(t *testing.T, srv *Server, name string, qtype uint16, what string, ok func(*dns.Msg) bool) *dns.Msg {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := exchange(t, "udp", srv.Addr(), query(name, qtype))
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: still %s after 5s, want %s", name, dns.TypeToString[qtype], dns.RcodeToString[r.Rcode], what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a condition wait
	}
}

func hasAnswers(want ...string) func(*dns.Msg) bool {
	return func(r *dns.Msg) bool {
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != len(want) {
			return false
		}
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	}
}

func rcodeIs(rcode int) func(*dns.Msg) bool {
	return func(r *dns.Msg) bool { return r.Rcode == rcode }
}

func TestFeedFollowsServiceStatus(t *testing.T) {
	name := "web.default." + testOrigin
	client, srv, _ := startFeed(t, FeedConfig{}, lbService("web", nil, nil))
	ctx := t.Context()

	// The Service exists without status: its name exists, without data.
	r := waitFor(t, srv, name, dns.TypeA, "NOERROR without answers", func(r *dns.Msg) bool {
		return r.Rcode == dns.RcodeSuccess && len(r.Answer) == 0
	})
	if len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("NODATA answer authority = %v, want the SOA", r.Ns)
	}

	svc, err := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := client.CoreV1().Services("default").UpdateStatus(ctx, withIngress(svc, "192.0.2.2", "192.0.2.1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, srv, name, dns.TypeA, "the status IPs", hasAnswers("192.0.2.1", "192.0.2.2"))
	t.Logf("status change served after %s", time.Since(began).Round(time.Millisecond))

	// A failover drops an IP.
	svc, _ = client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if _, err := client.CoreV1().Services("default").UpdateStatus(ctx, withIngress(svc, "192.0.2.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, srv, name, dns.TypeA, "one IP", hasAnswers("192.0.2.2"))

	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, srv, name, dns.TypeA, "NXDOMAIN", rcodeIs(dns.RcodeNameError))
}

func TestFeedServesOnlyItsClass(t *testing.T) {
	other := "example.com/other"
	terminating := withIngress(lbService("leaving", nil, nil), "192.0.2.9")
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	terminating.Finalizers = []string{"service.kubernetes.io/load-balancer-cleanup"}
	nodePort := withIngress(lbService("nodeport", nil, nil), "192.0.2.8")
	nodePort.Spec.Type = corev1.ServiceTypeNodePort
	services := []*corev1.Service{
		withIngress(lbService("classless", nil, nil), "192.0.2.1"),
		withIngress(lbService("ours", new(testClass), nil), "192.0.2.2"),
		withIngress(lbService("theirs", &other, nil), "192.0.2.3"),
		nodePort,
		terminating,
	}
	for _, tc := range []struct {
		name      string
		classOnly bool
		served    []string
	}{
		{"default", false, []string{"classless", "ours"}},
		{"class-only", true, []string{"ours"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv, _ := startFeed(t, FeedConfig{Services: contract.Selection{ClassOnly: tc.classOnly}}, services...)
			// The first zone is served once the cache synced.
			waitFor(t, srv, testOrigin, dns.TypeSOA, "the SOA", rcodeIs(dns.RcodeSuccess))
			for _, svc := range services {
				name := svc.Name + ".default." + testOrigin
				r := exchange(t, "udp", srv.Addr(), query(name, dns.TypeA))
				if got, want := r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1, slices.Contains(tc.served, svc.Name); got != want {
					t.Errorf("%s: served = %v (rcode %s, %d answers), want %v", name, got, dns.RcodeToString[r.Rcode], len(r.Answer), want)
				}
			}
		})
	}
}

func TestFeedReportsProblemsOnce(t *testing.T) {
	// Two Services claim one name: the second in namespace/name order is
	// refused it, and that is a zone problem of that Service.
	name := map[string]string{contract.AnnotationHostname: "shared." + strings.TrimSuffix(testOrigin, ".")}
	first := withIngress(lbService("a", nil, name), "192.0.2.1")
	second := withIngress(lbService("b", nil, name), "192.0.2.3")
	client, srv, rep := startFeed(t, FeedConfig{}, first, second)
	ctx := t.Context()
	waitFor(t, srv, "shared."+testOrigin, dns.TypeA, "the first Service's IP", hasAnswers("192.0.2.1"))
	waitFor(t, srv, "b.default."+testOrigin, dns.TypeA, "the second Service under its own name", hasAnswers("192.0.2.3"))
	got := rep.of("default/b")
	if len(got) != 1 || !errors.Is(got[0], ErrHostnameConflict) {
		t.Fatalf("reported %v, want one hostname conflict", got)
	}

	// Other changes rebuild the zone without reporting the same problem again.
	if _, err := client.CoreV1().Services("default").Create(ctx, withIngress(lbService("good", nil, nil), "192.0.2.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, srv, "good.default."+testOrigin, dns.TypeA, "the new Service", hasAnswers("192.0.2.2"))
	if got := rep.of("default/b"); len(got) != 1 {
		t.Errorf("reported %v after an unrelated change, want the first report only", got)
	}
	for _, ok := range []string{"default/a", "default/good"} {
		if got := rep.of(ok); len(got) != 0 {
			t.Errorf("reported %v for %s, which has no problem", got, ok)
		}
	}
}

// TestFeedIgnoresInvalidAnnotations: an invalid TTL is not used, the rest
// of the Service is served, and the feed does not report it: the
// controller's reconcile does, from the same parse.
func TestFeedIgnoresInvalidAnnotations(t *testing.T) {
	bad := withIngress(lbService("bad", nil, map[string]string{contract.AnnotationDNSTTL: "forever"}), "192.0.2.1")
	_, srv, rep := startFeed(t, FeedConfig{}, bad)
	r := waitFor(t, srv, "bad.default."+testOrigin, dns.TypeA, "the IP despite the bad TTL", hasAnswers("192.0.2.1"))
	if ttl := r.Answer[0].Header().Ttl; ttl != testZoneConfig.DefaultTTL && ttl != contract.DefaultDNSTTL {
		t.Errorf("TTL %d, want the zone's default", ttl)
	}
	if got := rep.of("default/bad"); len(got) != 0 {
		t.Errorf("reported %v, want nothing", got)
	}
}
