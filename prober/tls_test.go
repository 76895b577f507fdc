package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// tlsTestServer is a TLS server on loopback that completes handshakes and
// then reads until the client closes.
type tlsTestServer struct {
	addr netip.AddrPort
	// sni receives the server name of each completed handshake.
	sni chan string
	// closed receives how each connection ended after its handshake: nil
	// when the client sent close_notify.
	closed chan error
}

func startTLSTestServer(t *testing.T, host string, cfg *tls.Config) *tlsTestServer {
	t.Helper()
	s := &tlsTestServer{sni: make(chan string, 16), closed: make(chan error, 16)}
	s.addr = serveTCP(t, host, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		s.sni <- tc.ConnectionState().ServerName
		_, err := io.Copy(io.Discard, tc)
		s.closed <- err
	})
	return s
}

func TestTLSProbe(t *testing.T) {
	const day = 24 * time.Hour
	now := time.Now()
	ca := newTestCA(t)
	useRoots(t, ca.Pool())
	names := []string{"server.test"}
	good := ca.Leaf(t, certOpts{DNSNames: names})
	expired := ca.Leaf(t, certOpts{DNSNames: names, NotBefore: now.Add(-30 * day), NotAfter: now.Add(-3 * day)})
	soon := ca.Leaf(t, certOpts{DNSNames: names, NotAfter: now.Add(2 * day)})
	inter := ca.Intermediate(t, certOpts{NotAfter: now.Add(30 * day)})
	chained := inter.Leaf(t, certOpts{DNSNames: names, NotAfter: now.Add(90 * day)})
	untrusted := newTestCA(t).Leaf(t, certOpts{DNSNames: names})

	tests := []struct {
		name       string
		cert       tls.Certificate
		serverALPN []string
		spec       probespec.Spec
		want       Outcome
		errPart    string
		check      func(t *testing.T, res Result, srv *tlsTestServer)
	}{
		{
			name: "verify with sni",
			cert: good,
			spec: probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test"},
			want: L6OK,
			check: func(t *testing.T, res Result, srv *tlsTestServer) {
				if got := recv(t, srv.sni, "server name"); got != "server.test" {
					t.Errorf("server saw SNI %q, want server.test", got)
				}
				if err := recv(t, srv.closed, "connection end"); err != nil {
					t.Errorf("connection ended with %v, want close_notify", err)
				}
				if !res.TLS.Verified || res.TLS.Version != "TLS 1.3" {
					t.Errorf("TLS = %+v, want verified TLS 1.3", res.TLS)
				}
				if !res.TLS.NotAfter.Equal(good.Leaf.NotAfter) || !res.TLS.ChainNotAfter.IsZero() {
					t.Errorf("NotAfter %v ChainNotAfter %v, want %v and zero", res.TLS.NotAfter, res.TLS.ChainNotAfter, good.Leaf.NotAfter)
				}
				wantDetail := "TLS 1.3, expires " + good.Leaf.NotAfter.UTC().Format(time.DateOnly) + " (90d)"
				if res.Detail != wantDetail {
					t.Errorf("Detail = %q, want %q", res.Detail, wantDetail)
				}
				if tm := res.Timings; tm.Connect <= 0 || tm.TLS < tm.Connect || tm.Total < tm.TLS {
					t.Errorf("timings %+v not increasing", tm)
				}
			},
		},
		{
			name: "verify chain without sni",
			cert: good,
			spec: probespec.Spec{Protocol: probespec.TLS, Verify: true},
			want: L6OK,
			check: func(t *testing.T, res Result, srv *tlsTestServer) {
				if got := recv(t, srv.sni, "server name"); got != "" {
					t.Errorf("server saw SNI %q, want none", got)
				}
			},
		},
		{
			name:    "name mismatch",
			cert:    good,
			spec:    probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "other.test"},
			want:    L6ERR,
			errPart: "not other.test",
		},
		{
			name:    "untrusted with sni",
			cert:    untrusted,
			spec:    probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test"},
			want:    L6ERR,
			errPart: "unknown authority",
		},
		{
			name:    "untrusted without sni",
			cert:    untrusted,
			spec:    probespec.Spec{Protocol: probespec.TLS, Verify: true},
			want:    L6ERR,
			errPart: "unknown authority",
		},
		{
			name: "untrusted not verified",
			cert: untrusted,
			spec: probespec.Spec{Protocol: probespec.TLS},
			want: L6OK,
			check: func(t *testing.T, res Result, _ *tlsTestServer) {
				if res.TLS.Verified {
					t.Errorf("TLS.Verified = true without verify")
				}
			},
		},
		{
			name:    "expired verified",
			cert:    expired,
			spec:    probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test"},
			want:    L6ERR,
			errPart: "expired",
		},
		{
			name: "expired not verified",
			cert: expired,
			spec: probespec.Spec{Protocol: probespec.TLS, SNI: "server.test"},
			want: L6OK,
			check: func(t *testing.T, res Result, _ *tlsTestServer) {
				if !res.TLS.NotAfter.Before(time.Now()) {
					t.Errorf("TLS.NotAfter = %v, want in the past", res.TLS.NotAfter)
				}
				if !strings.Contains(res.Detail, "(3d ago)") {
					t.Errorf("Detail = %q, want it to say (3d ago)", res.Detail)
				}
			},
		},
		{
			name:    "expired not verified with min-valid",
			cert:    expired,
			spec:    probespec.Spec{Protocol: probespec.TLS, MinValid: 7 * day},
			want:    L6ERR,
			errPart: "certificate expired 3d ago",
		},
		{
			name:    "expires sooner than min-valid",
			cert:    soon,
			spec:    probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test", MinValid: 7 * day},
			want:    L6ERR,
			errPart: "certificate expires in 2d, want at least 7d",
			check: func(t *testing.T, res Result, _ *tlsTestServer) {
				if res.TLS == nil {
					t.Errorf("TLS not reported for a certificate failure")
				}
			},
		},
		{
			name: "expires later than min-valid",
			cert: soon,
			spec: probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test", MinValid: day},
			want: L6OK,
		},
		{
			name: "intermediate expires first",
			cert: chained,
			spec: probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test"},
			want: L6OK,
			check: func(t *testing.T, res Result, _ *tlsTestServer) {
				if !res.TLS.ChainNotAfter.Equal(inter.Cert.NotAfter) {
					t.Errorf("ChainNotAfter = %v, want the intermediate's %v", res.TLS.ChainNotAfter, inter.Cert.NotAfter)
				}
				if !res.TLS.NotAfter.Equal(chained.Leaf.NotAfter) {
					t.Errorf("NotAfter = %v, want the leaf's %v", res.TLS.NotAfter, chained.Leaf.NotAfter)
				}
			},
		},
		{
			name:       "alpn negotiated",
			cert:       good,
			serverALPN: []string{"h2", "http/1.1"},
			spec:       probespec.Spec{Protocol: probespec.TLS, Verify: true, ALPN: []string{"h2"}},
			want:       L6OK,
			check: func(t *testing.T, res Result, _ *tlsTestServer) {
				if res.TLS.ALPN != "h2" || !strings.Contains(res.Detail, "h2") {
					t.Errorf("ALPN %q, Detail %q, want h2 in both", res.TLS.ALPN, res.Detail)
				}
			},
		},
		{
			name:    "alpn not negotiated",
			cert:    good,
			spec:    probespec.Spec{Protocol: probespec.TLS, Verify: true, ALPN: []string{"h2"}},
			want:    L6ERR,
			errPart: "server selected no ALPN protocol, offered h2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTLSTestServer(t, "127.0.0.1", &tls.Config{
				Certificates: []tls.Certificate{tc.cert},
				NextProtos:   tc.serverALPN,
			})
			res := probeOnce(t, tc.spec, Options{}, srv.addr)
			checkResult(t, res, tc.want, tc.errPart)
			if tc.check != nil {
				tc.check(t, res, srv)
			}
		})
	}
}

func TestTLSProbeBrokenServers(t *testing.T) {
	closedPort := func(t *testing.T) netip.AddrPort { return closedTCPPort(t, "127.0.0.1") }
	silent := func(t *testing.T) netip.AddrPort {
		return serveTCP(t, "127.0.0.1", func(c net.Conn) {
			_, _ = io.Copy(io.Discard, c)
		})
	}
	garbage := func(t *testing.T) netip.AddrPort {
		return serveTCP(t, "127.0.0.1", func(c net.Conn) {
			// Read the ClientHello first so closing does not reset the
			// connection before the client sees the garbage.
			_, _ = c.Read(make([]byte, 4096))
			_, _ = c.Write([]byte("220 not tls here\r\n"))
		})
	}
	tests := []struct {
		name    string
		server  func(t *testing.T) netip.AddrPort
		want    Outcome
		errPart string
	}{
		{"closed port", closedPort, L4CON, "connecting"},
		{"silent server", silent, L6TOUT, "tls handshake"},
		{"garbage", garbage, L6ERR, "tls handshake"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := probeOnce(t, probespec.Spec{Protocol: probespec.TLS}, Options{}, tc.server(t))
			checkResult(t, res, tc.want, tc.errPart)
			if res.TLS != nil {
				t.Errorf("TLS = %+v after a failed handshake", res.TLS)
			}
		})
	}
}

func TestTLSProbeIPv6(t *testing.T) {
	ca := newTestCA(t)
	useRoots(t, ca.Pool())
	srv := startTLSTestServer(t, "::1", &tls.Config{
		Certificates: []tls.Certificate{ca.Leaf(t, certOpts{DNSNames: []string{"server.test"}})},
	})
	res := probeOnce(t, probespec.Spec{Protocol: probespec.TLS, Verify: true, SNI: "server.test"}, Options{}, srv.addr)
	checkResult(t, res, L6OK, "")
	if got := recv(t, srv.sni, "server name"); got != "server.test" {
		t.Errorf("server saw SNI %q, want server.test", got)
	}
}

func TestTLSProbeCancel(t *testing.T) {
	// The context has no deadline, so the probe gets DefaultTimeout; being
	// cancelled must still end it at once.
	addr := serveTCP(t, "127.0.0.1", func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	p, err := New(probespec.Spec{Protocol: probespec.TLS}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	res := p.Probe(ctx, addr)
	if took := time.Since(start); took > DefaultTimeout/2 {
		t.Errorf("cancelled probe took %v", took)
	}
	if res.Outcome != L6ERR && res.Outcome != L6TOUT {
		t.Errorf("outcome = %v (%v), want L6ERR or L6TOUT", res.Outcome, res.Err)
	}
	if !errors.Is(res.Err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", res.Err)
	}
}

func TestTLSApproxDuration(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		d    time.Duration
		want string
	}{
		{89*day + 3*time.Hour, "89d"},
		{2*day - 2*time.Second, "2d"},
		{3*day + 4*time.Hour, "3d4h"},
		{5*time.Hour + 30*time.Minute, "5h30m"},
		{5 * time.Hour, "5h"},
		{90 * time.Second, "1m30s"},
		{1500 * time.Millisecond, "2s"},
	}
	for _, tc := range tests {
		if got := ApproxDuration(tc.d); got != tc.want {
			t.Errorf("ApproxDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestTLSProbeLocalAddr(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.Leaf(t, certOpts{DNSNames: []string{"server.test"}})
	from := make(chan string, 1)
	addr := serveTCP(t, "127.0.0.1", func(c net.Conn) {
		from <- remoteIP(c.RemoteAddr().String())
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		_, _ = io.Copy(io.Discard, tc)
	})
	p, err := New(probespec.Spec{Protocol: probespec.TLS}, Options{LocalAddr: netip.MustParseAddr("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Probe(t.Context(), addr)
	if res.Outcome == L4CON || res.Outcome == L4UNREACH {
		t.Skipf("cannot probe from 127.0.0.2 here: %v", res.Message())
	}
	checkResult(t, res, L6OK, "")
	if got := recv(t, from, "connection"); got != "127.0.0.2" {
		t.Errorf("server saw the probe from %s, want 127.0.0.2", got)
	}
}
