package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
)

// The two clients outside the cluster: the client namespace's own address
// and a second one the scenario adds on the same link.
var (
	rangesClientA = netip.MustParseAddr("198.18.3.1")
	rangesClientB = netip.MustParseAddr("198.18.3.2")
)

// sourceRangesBound is how soon a changed allow-list must hold on every
// proxy (issue: within 2 s, no rollout, no address change).
const sourceRangesBound = 2 * time.Second

// testSourceRanges checks loadBalancerSourceRanges with pulselb's probers
// running: a Service created with ranges is published (its proxies are
// probed although the probers are outside the ranges) and serves only the
// allowed client; changing the ranges swaps the clients within 2 s on every
// proxy, with the same addresses and the same proxy pods; removing them
// opens the Service to both. svcNamespace's pods named by selector are the
// backend, on backendPort; nodeSelector keeps the proxies off the backend's
// node when set.
func testSourceRanges(ctx context.Context, t *testing.T, cs kubernetes.Interface, svcNamespace string, selector map[string]string,
	backendPort intstr.IntOrString, annotations map[string]string) {
	addClientAddress(ctx, t, rangesClientB)
	const name, port = "ranged", 8090
	svc, err := cs.CoreV1().Services(svcNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeLoadBalancer,
			Selector:                 selector,
			Ports:                    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: backendPort}},
			LoadBalancerSourceRanges: []string{rangesClientA.String() + "/32"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Services(svcNamespace).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	ingress := func() []string { return ingressIPs(ctx, cs, svcNamespace, name) }
	var addrs []string
	poll(ctx, t, 90*time.Second, "the Service with source ranges published", func() bool {
		addrs = ingress()
		return len(addrs) == 2
	})
	pods := func() []types.UID {
		var uids []types.UID
		for _, p := range listPods(ctx, t, cs, systemNamespace, contract.LabelServiceName+"="+svc.Name) {
			uids = append(uids, p.UID)
		}
		slices.Sort(uids)
		return uids
	}
	proxies := pods()
	// answers asks every published address at once, from client, and
	// returns how many answered.
	answers := func(client netip.Addr) int {
		var wg sync.WaitGroup
		var n atomic.Int32
		for _, a := range addrs {
			wg.Go(func() {
				if ok, _ := httpFrom(client, netip.AddrPortFrom(netip.MustParseAddr(a), port)); ok {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}
	served := func(client netip.Addr) (bool, error) { return answers(client) == len(addrs), nil }
	refused := func(client netip.Addr) bool { return answers(client) == 0 }
	poll(ctx, t, 10*time.Second, "client A served on every address", func() bool {
		ok, _ := served(rangesClientA)
		return ok
	})
	if !refused(rangesClientB) {
		t.Fatalf("client B, outside the ranges, was served")
	}

	// change sets the ranges and measures how long until want holds.
	change := func(ranges []string, what string, want func() bool) {
		t.Helper()
		s, err := cs.CoreV1().Services(svcNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.LoadBalancerSourceRanges = ranges
		began := time.Now()
		if _, err := cs.CoreV1().Services(svcNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A round of requests takes up to a client timeout (a refused
		// client's packets are dropped); the time that counts is when the
		// round that found want true began.
		var round time.Time
		for {
			round = time.Now()
			if want() {
				break
			}
			if time.Since(began) > sourceRangesBound {
				t.Fatalf("%s: not within %s of the change", what, sourceRangesBound)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if d := round.Sub(began); d > sourceRangesBound {
			t.Errorf("%s: %s after the change, want within %s", what, d.Round(time.Millisecond), sourceRangesBound)
		} else {
			t.Logf("%s: held for requests sent %s after the change", what, d.Round(time.Millisecond))
		}
		if got := ingress(); !slices.Equal(got, addrs) {
			t.Errorf("published addresses %v, were %v", got, addrs)
		}
		if got := pods(); !slices.Equal(got, proxies) {
			t.Errorf("proxy pods %v, were %v: the change rolled them", got, proxies)
		}
	}
	change([]string{rangesClientB.String() + "/32"}, "A refused and B served", func() bool {
		ok, _ := served(rangesClientB)
		return ok && refused(rangesClientA)
	})
	change(nil, "both served with no ranges", func() bool {
		a, _ := served(rangesClientA)
		b, _ := served(rangesClientB)
		return a && b
	})
	// Still published after all, with the same addresses: the probes kept
	// passing whatever the ranges.
	time.Sleep(3 * time.Second)
	if got := ingress(); !slices.Equal(got, addrs) {
		t.Errorf("published addresses %v after the changes, were %v", got, addrs)
	}
}

// httpFrom sends one HTTP request from client (an address of the client
// namespace) to addr and reports whether it got an answer; a refusal or a
// timeout of 500 ms is false. The connection is made on the namespace's
// thread (an http.Transport would dial from another goroutine, outside it).
func httpFrom(client netip.Addr, addr netip.AddrPort) (bool, error) {
	var conn net.Conn
	err := cluster.RunInNamespace(cluster.ClientNamespace, func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, 0)), Timeout: 500 * time.Millisecond}
		c, err := d.Dial("tcp", addr.String())
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				return nil // refused or timed out: not served
			}
			return err
		}
		conn = c
		return nil
	})
	if err != nil || conn == nil {
		return false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	req, err := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/", nil)
	if err != nil {
		return false, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return false, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}

// addClientAddress adds addr to the client namespace's link to the nodes'
// bridge until the test ends.
func addClientAddress(ctx context.Context, t *testing.T, addr netip.Addr) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "ip", "-n", cluster.ClientNamespace, "-o", "-4", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("listing client addresses: %v\n%s", err, out)
	}
	dev := ""
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && strings.HasPrefix(f[3], rangesClientA.String()+"/") {
			dev = f[1]
		}
	}
	if dev == "" {
		t.Fatalf("no link with %s in %s:\n%s", rangesClientA, cluster.ClientNamespace, out)
	}
	cidr := addr.String() + "/22"
	if out, err := exec.CommandContext(ctx, "ip", "-n", cluster.ClientNamespace, "addr", "add", cidr, "dev", dev).CombinedOutput(); err != nil &&
		!strings.Contains(string(out), "File exists") {
		t.Fatalf("adding %s: %v\n%s", cidr, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "-n", cluster.ClientNamespace, "addr", "del", cidr, "dev", dev).CombinedOutput(); err != nil {
			t.Logf("removing %s: %v\n%s", cidr, errors.Join(err, fmt.Errorf("%s", out)), out)
		}
	})
}
