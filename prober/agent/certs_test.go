package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
)

// selfSigned returns a certificate for 127.0.0.1 valid until notAfter.
func selfSigned(t *testing.T, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "agent-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// acceptAndClose accepts connections on a loopback port and closes them at
// once, until the test ends.
func acceptAndClose(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, func(c net.Conn) { c.Close() })
}

// serveTLS accepts connections on a loopback port, completes a TLS
// handshake with cert and closes them, until the test ends.
func serveTLS(t *testing.T, cert tls.Certificate) net.Listener {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, func(c net.Conn) {
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = c.(*tls.Conn).Handshake()
		}()
	})
}

// serve hands every connection ln accepts to handle until the test ends.
func serve(t *testing.T, ln net.Listener, handle func(net.Conn)) net.Listener {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	return ln
}

// TestRunReportsCertNotAfter runs the agent against loopback tls, https and
// tcp servers on node n1, probed from n2: the tls and https results carry
// the served certificate's expiry, kept while the target is down; the tcp
// result carries none.
func TestRunReportsCertNotAfter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	tlsCert := selfSigned(t, time.Now().Add(40*24*time.Hour))
	httpsCert := selfSigned(t, time.Now().Add(90*24*time.Hour))
	tlsLn := serveTLS(t, tlsCert)
	httpsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	httpsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{httpsCert}}
	httpsSrv.StartTLS()
	defer httpsSrv.Close()
	tcpLn := acceptAndClose(t)

	type target struct {
		name, probe string
		addr        net.Addr
		notAfter    time.Time // zero: no certificate
		stop        func()
	}
	targets := []target{
		{"tls", "tls verify=false", tlsLn.Addr(), tlsCert.Leaf.NotAfter, func() { tlsLn.Close() }},
		{"https", "https verify=false path=/", httpsSrv.Listener.Addr(), httpsCert.Leaf.NotAfter, httpsSrv.Close},
		{"tcp", "tcp", tcpLn.Addr(), time.Time{}, func() { tcpLn.Close() }},
	}
	objs := []runtime.Object{node("n1", "127.0.0.1", ""), node("n2", "127.0.0.2", ""), proberPod("n1"), proberPod("n2")}
	keys := map[string]string{}
	for _, tg := range targets {
		port := int32(netip.MustParseAddrPort(tg.addr.String()).Port())
		svc := service(tg.name, map[string]string{contract.AnnotationProbe: tg.probe, contract.AnnotationProbeInterval: "100ms",
			contract.AnnotationRise: "1", contract.AnnotationFall: "1"},
			corev1.ServicePort{Name: "p", Port: port, Protocol: corev1.ProtocolTCP})
		objs = append(objs, svc, proxyPod(svc, "n1"))
		keys[tg.name] = contract.TargetKey("shop/"+tg.name, "TCP", port, "n1")
	}
	a, reports := newAgent(t, ctx, "n2", Config{
		BeaconPort:       1, // nothing listens: the beacon is not under test
		MinWriteInterval: 20 * time.Millisecond,
		Scheduler:        prober.Config{Interval: 100 * time.Millisecond, Rise: 1, Fall: 1},
	}, objs...)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	waitAll := func(what string, state v1alpha1.State) *v1alpha1.ProbeReport {
		t.Helper()
		return waitReport(t, ctx, reports, "n2", what, func(r *v1alpha1.ProbeReport) bool {
			got := resultsByTarget(r)
			for _, key := range keys {
				if res := got[key]; res == nil || res.State != state {
					return false
				}
			}
			return true
		})
	}
	check := func(r *v1alpha1.ProbeReport, when string) {
		t.Helper()
		got := resultsByTarget(r)
		for _, tg := range targets {
			res := got[keys[tg.name]]
			switch {
			case tg.notAfter.IsZero() && res.CertNotAfter != nil:
				t.Errorf("%s, %s: certNotAfter %v, want none", when, tg.name, res.CertNotAfter)
			case !tg.notAfter.IsZero() && (res.CertNotAfter == nil || !res.CertNotAfter.Time.Equal(tg.notAfter)):
				t.Errorf("%s, %s: certNotAfter %v, want %v (outcome %s)", when, tg.name, res.CertNotAfter, tg.notAfter, res.Outcome)
			}
		}
	}
	check(waitAll("targets Up", v1alpha1.StateUp), "up")
	for _, tg := range targets {
		tg.stop()
	}
	check(waitAll("targets Down", v1alpha1.StateDown), "down")

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
