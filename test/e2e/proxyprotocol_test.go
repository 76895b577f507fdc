package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
	"github.com/pulselb/pulselb/test/cluster"
)

// clientAddressCase says where testClientAddress makes its Service.
type clientAddressCase struct {
	// namespace, selector and backendPort name the echo backend, which
	// answers with the client it sees.
	namespace   string
	selector    map[string]string
	backendPort intstr.IntOrString
	annotations map[string]string
	// version is the PROXY protocol version of the header port: v1 or v2.
	version string
	// policy and families, when set, are the Service's ipFamilyPolicy
	// and ipFamilies; its 2 proxy nodes publish an address in each family.
	policy   corev1.IPFamilyPolicy
	families []corev1.IPFamily
}

// testClientAddress checks pulselb.io/proxy-protocol on the harness: a
// Service with one port that sends a PROXY protocol header (tc.version) and
// one that does not, both to the echo backend. The Service is published and
// Healthy: its http probes pass through the relay, which gives them a
// header like any client's. Through every published address, in each of
// its IP families, the header port shows the client namespace's own address
// of that family and the other port answers too, from the proxy's; the
// ConfigValid condition says which port the relay carries. Then
// sessionAffinity ClientIP, which the proxies cannot honour per client, is
// reported (ConfigValid False, an InvalidSpec Event) while the Service
// stays published.
func testClientAddress(ctx context.Context, t *testing.T, cs kubernetes.Interface, tc clientAddressCase) {
	const name, ppPort, plainPort = "client-address", 8093, 8094
	svcNamespace := tc.namespace
	ann := map[string]string{
		contract.AnnotationProxyProtocolPrefix + "pp": tc.version,
		// An HTTP probe reads an answer: the backend must have taken the
		// header the relay wrote on the probe's connection.
		contract.AnnotationProbe: "http",
	}
	for k, v := range tc.annotations {
		ann[k] = v
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: tc.selector,
			Ports: []corev1.ServicePort{
				{Name: "pp", Port: ppPort, TargetPort: tc.backendPort},
				{Name: "plain", Port: plainPort, TargetPort: tc.backendPort},
			},
			IPFamilies: tc.families,
		},
	}
	if tc.policy != "" {
		svc.Spec.IPFamilyPolicy = &tc.policy
	}
	if _, err := cs.CoreV1().Services(svcNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Services(svcNamespace).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	published := 2 * max(1, len(tc.families))
	var addrs []string
	// Healthy True: published because its probes pass, not failing open.
	poll(ctx, t, 90*time.Second, "the Service with proxy-protocol published and Healthy", func() bool {
		addrs = ingressIPs(ctx, cs, svcNamespace, name)
		s, err := cs.CoreV1().Services(svcNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		c := findCondition(s.Status.Conditions, status.ConditionHealthy)
		return len(addrs) == published && c != nil && c.Status == metav1.ConditionTrue
	})
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		client := rangesClientA
		if ip.Is6() {
			client = netip.MustParseAddr(cluster.ClientIP6)
		}
		var body string
		var err error
		poll(ctx, t, 10*time.Second, "an answer on "+a+" port pp", func() bool {
			body, err = httpBodyFrom(client, netip.AddrPortFrom(ip, ppPort))
			return err == nil
		})
		seen := "client=" + net.JoinHostPort(client.String(), "")
		if !strings.Contains(body, seen) {
			t.Errorf("%s port %d: the backend saw %q, want %q: the client's own address", a, ppPort, strings.TrimSpace(body), seen)
		}
		body, err = httpBodyFrom(client, netip.AddrPortFrom(ip, plainPort))
		if err != nil {
			t.Errorf("%s port %d (no header): %v", a, plainPort, err)
		} else if !strings.Contains(body, "client=") || strings.Contains(body, seen) {
			t.Errorf("%s port %d (no header): the backend saw %q, want the proxy's address", a, plainPort, strings.TrimSpace(body))
		}
	}
	svc, err := cs.CoreV1().Services(svcNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("the userspace relay carries TCP:%d with a PROXY protocol %s header; iptables rules carry TCP:%d", ppPort, tc.version, plainPort)
	if c := findCondition(svc.Status.Conditions, status.ConditionConfigValid); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, want) {
		t.Errorf("ConfigValid %+v, want True saying %q", c, want)
	}

	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	if _, err := cs.CoreV1().Services(svcNamespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 15*time.Second, "ConfigValid False for sessionAffinity ClientIP, and an InvalidSpec Event", func() bool {
		s, err := cs.CoreV1().Services(svcNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		c := findCondition(s.Status.Conditions, status.ConditionConfigValid)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, `spec.sessionAffinity="ClientIP"`) &&
			countEvents(ctx, t, cs, svcNamespace, name, "InvalidSpec") > 0
	})
	if got := ingressIPs(ctx, cs, svcNamespace, name); len(got) != len(addrs) {
		t.Errorf("published %v with sessionAffinity ClientIP, was %v: a reported setting must not unpublish the Service", got, addrs)
	}
}

// httpBodyFrom sends one HTTP GET from client (an address of the client
// namespace) to addr and returns the answer's body.
func httpBodyFrom(client netip.Addr, addr netip.AddrPort) (string, error) {
	var conn net.Conn
	err := cluster.RunInNamespace(cluster.ClientNamespace, func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, 0)), Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", addr.String())
		conn = c
		return err
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	head, body, ok := strings.Cut(string(b), "\r\n\r\n")
	if !ok || !strings.Contains(strings.SplitN(head, "\r\n", 2)[0], " 200 ") {
		return "", fmt.Errorf("not a 200 answer: %q", b)
	}
	return body, nil
}
