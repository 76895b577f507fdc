package prober

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// httpSeen is what the test server saw of one request.
type httpSeen struct {
	method, host, path string
	// remoteIP is the client's address; table tests leave it out.
	remoteIP string
}

// httpTestServer is an httptest server on loopback with handlers for every
// case the http tests need.
type httpTestServer struct {
	srv  *httptest.Server
	addr netip.AddrPort
	// seen receives every request the server answers.
	seen chan httpSeen
	// sni receives the server name of every TLS ClientHello.
	sni chan string
	// conns counts accepted connections.
	conns atomic.Int32
}

// startHTTPTestServer starts a server on host (an IP), with TLS when cert
// is not nil. Handlers that hang return when the test ends.
func startHTTPTestServer(t *testing.T, host string, cert *tls.Certificate) *httpTestServer {
	t.Helper()
	s := &httpTestServer{seen: make(chan httpSeen, 64), sni: make(chan string, 64)}
	release := make(chan struct{})
	hang := func(r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-App", "pulselb-1.2")
		fmt.Fprint(w, "hello from pulselb")
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusFound)
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "final page")
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		hang(r)
	})
	mux.HandleFunc("/hang-body", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "partial")
		w.(http.Flusher).Flush()
		hang(r)
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = c.Close()
		}
	})
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.seen <- httpSeen{method: r.Method, host: r.Host, path: r.URL.Path, remoteIP: remoteIP(r.RemoteAddr)}:
		default:
		}
		mux.ServeHTTP(w, r)
	})

	srv := httptest.NewUnstartedServer(record)
	if host != "127.0.0.1" {
		ln, _ := listenTCP(t, host)
		_ = srv.Listener.Close()
		srv.Listener = ln
	}
	// Failed handshakes are what several tests provoke; keep them quiet.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if cert != nil {
		srv.TLS = &tls.Config{
			Certificates: []tls.Certificate{*cert},
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				select {
				case s.sni <- hello.ServerName:
				default:
				}
				return nil, nil
			},
		}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	// Registered after srv.Close, so it runs first and lets Close return.
	t.Cleanup(func() { close(release) })
	s.srv = srv
	s.addr = netip.MustParseAddrPort(srv.Listener.Addr().String())
	return s
}

// remoteIP returns the IP of a host:port address.
func remoteIP(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

// lastSeen returns the last request the server answered so far.
func (s *httpTestServer) lastSeen(t *testing.T) httpSeen {
	t.Helper()
	var last httpSeen
	for {
		select {
		case last = <-s.seen:
		default:
			if last.method == "" {
				t.Fatalf("server saw no request")
			}
			return last
		}
	}
}

func TestHTTPProbe(t *testing.T) {
	srv := startHTTPTestServer(t, "127.0.0.1", nil)
	only := func(codes ...int) probespec.StatusSet {
		var s probespec.StatusSet
		for _, c := range codes {
			s = append(s, probespec.StatusRange{Min: c, Max: c})
		}
		return s
	}
	tests := []struct {
		name    string
		spec    probespec.Spec
		want    Outcome
		errPart string
		detail  string
		seen    *httpSeen
	}{
		{
			name:   "defaults",
			spec:   probespec.Spec{Protocol: probespec.HTTP},
			want:   L7OK,
			detail: "HTTP 200",
			seen:   &httpSeen{method: "GET", host: srv.addr.String(), path: "/"},
		},
		{
			name:    "failing status",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Path: "/fail"},
			want:    L7STS,
			errPart: "HTTP 503, want 200-399",
		},
		{
			name:   "status list accepts 404",
			spec:   probespec.Spec{Protocol: probespec.HTTP, Path: "/missing", Status: only(200, 404)},
			want:   L7OK,
			detail: "HTTP 404",
		},
		{
			name:    "status list rejects 503",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Path: "/fail", Status: only(200, 404)},
			want:    L7STS,
			errPart: "HTTP 503, want 200,404",
		},
		{
			name: "body matches",
			spec: probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`from pulse`)},
			want: L7OK,
		},
		{
			name:    "body does not match",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`^ready$`)},
			want:    L7RSP,
			errPart: `body does not match "^ready$"`,
		},
		{
			name: "header matches",
			spec: probespec.Spec{Protocol: probespec.HTTP, Headers: []probespec.HeaderMatch{
				{Name: "content-type", Value: regexp.MustCompile(`^text/plain`)},
				{Name: "X-App", Value: regexp.MustCompile(`^pulselb-1\.`)},
			}},
			want: L7OK,
		},
		{
			name:    "header does not match",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Headers: []probespec.HeaderMatch{{Name: "x-app", Value: regexp.MustCompile(`^other`)}}},
			want:    L7RSP,
			errPart: `header X-App does not match "^other"`,
		},
		{
			name:    "header absent",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Headers: []probespec.HeaderMatch{{Name: "X-Ready", Value: regexp.MustCompile(`.`)}}},
			want:    L7RSP,
			errPart: "header X-Ready missing",
		},
		{
			name: "host header",
			spec: probespec.Spec{Protocol: probespec.HTTP, Host: "app.example", Path: "/final?x=1"},
			want: L7OK,
			seen: &httpSeen{method: "GET", host: "app.example", path: "/final"},
		},
		{
			name:   "head",
			spec:   probespec.Spec{Protocol: probespec.HTTP, Method: "HEAD"},
			want:   L7OK,
			detail: "HTTP 200",
			seen:   &httpSeen{method: "HEAD", host: srv.addr.String(), path: "/"},
		},
		{
			name:   "redirect not followed is in 200-399",
			spec:   probespec.Spec{Protocol: probespec.HTTP, Path: "/redirect"},
			want:   L7OK,
			detail: "HTTP 302",
			seen:   &httpSeen{method: "GET", host: srv.addr.String(), path: "/redirect"},
		},
		{
			name:    "redirect not followed fails status 200",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Path: "/redirect", Status: only(200)},
			want:    L7STS,
			errPart: "HTTP 302, want 200",
		},
		{
			name:   "redirect followed keeps host",
			spec:   probespec.Spec{Protocol: probespec.HTTP, Path: "/redirect", Host: "app.example", Follow: true, Status: only(200), Body: regexp.MustCompile("^final page$")},
			want:   L7OK,
			detail: "HTTP 200",
			seen:   &httpSeen{method: "GET", host: "app.example", path: "/final"},
		},
		{
			name:    "redirect loop",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Path: "/loop", Follow: true},
			want:    L7RSP,
			errPart: "stopped after 10 redirects",
		},
		{
			name:    "closed without answer",
			spec:    probespec.Spec{Protocol: probespec.HTTP, Path: "/close"},
			want:    L7RSP,
			errPart: "reading response",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := probeOnce(t, tc.spec, Options{}, srv.addr)
			t.Logf("%v: %s", res.Outcome, res.Message())
			checkResult(t, res, tc.want, tc.errPart)
			if tc.detail != "" && res.Detail != tc.detail {
				t.Errorf("Detail = %q, want %q", res.Detail, tc.detail)
			}
			if tc.seen != nil {
				got := srv.lastSeen(t)
				got.remoteIP = ""
				if got != *tc.seen {
					t.Errorf("server saw %+v, want %+v", got, *tc.seen)
				}
			}
			if res.TLS != nil {
				t.Errorf("TLS = %+v for plain http", res.TLS)
			}
			if tm := res.Timings; res.Up() && (tm.Connect <= 0 || tm.TLS != 0 || tm.FirstByte < tm.Connect || tm.Total < tm.FirstByte) {
				t.Errorf("timings %+v: want 0 < Connect <= FirstByte <= Total and no TLS", tm)
			}
		})
	}
}

func TestHTTPProbeTimeouts(t *testing.T) {
	srv := startHTTPTestServer(t, "127.0.0.1", nil)
	closed := closedTCPPort(t, "127.0.0.1")
	tests := []struct {
		name    string
		path    string
		target  netip.AddrPort
		want    Outcome
		errPart string
	}{
		{"no response headers", "/hang", srv.addr, L7TOUT, "waiting for response headers"},
		{"body never ends", "/hang-body", srv.addr, L7TOUT, "reading body"},
		{"closed port", "/", closed, L4CON, "connecting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := probeOnce(t, probespec.Spec{Protocol: probespec.HTTP, Path: tc.path}, Options{}, tc.target)
			t.Logf("%v: %s", res.Outcome, res.Message())
			checkResult(t, res, tc.want, tc.errPart)
		})
	}
}

func TestHTTPProbeNewConnectionEachProbe(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.Leaf(t, certOpts{DNSNames: []string{"app.example"}})
	for _, proto := range []probespec.Protocol{probespec.HTTP, probespec.HTTPS} {
		t.Run(string(proto), func(t *testing.T) {
			var c *tls.Certificate
			if proto == probespec.HTTPS {
				c = &cert
			}
			srv := startHTTPTestServer(t, "127.0.0.1", c)
			p, err := New(probespec.Spec{Protocol: proto}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			const probes = 3
			for range probes {
				if res := p.Probe(t.Context(), srv.addr); res.Outcome != L7OK {
					t.Fatalf("outcome = %v (%v), want L7OK", res.Outcome, res.Message())
				}
			}
			// ConnState(StateNew) runs before the server reads the request,
			// so every connection is counted once its probe has an answer.
			if n := srv.conns.Load(); n != probes {
				t.Errorf("server accepted %d connections for %d probes, want one each", n, probes)
			}
		})
	}
}

func TestHTTPSProbe(t *testing.T) {
	const day = 24 * time.Hour
	now := time.Now()
	ca := newTestCA(t)
	useRoots(t, ca.Pool())
	names := []string{"app.example", "sni.example"}
	good := ca.Leaf(t, certOpts{DNSNames: names})
	expired := ca.Leaf(t, certOpts{DNSNames: names, NotBefore: now.Add(-30 * day), NotAfter: now.Add(-day)})
	soon := ca.Leaf(t, certOpts{DNSNames: names, NotAfter: now.Add(3 * day)})
	untrusted := newTestCA(t).Leaf(t, certOpts{DNSNames: names})

	tests := []struct {
		name    string
		cert    tls.Certificate
		spec    probespec.Spec
		want    Outcome
		errPart string
	}{
		{
			name: "not verified",
			cert: untrusted,
			spec: probespec.Spec{Protocol: probespec.HTTPS},
			want: L7OK,
		},
		{
			name:    "untrusted",
			cert:    untrusted,
			spec:    probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "app.example"},
			want:    L6ERR,
			errPart: "unknown authority",
		},
		{
			name: "verified against host",
			cert: good,
			spec: probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "app.example"},
			want: L7OK,
		},
		{
			name: "sni overrides host",
			cert: good,
			spec: probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "app.example", SNI: "sni.example"},
			want: L7OK,
		},
		{
			name:    "name mismatch",
			cert:    good,
			spec:    probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "other.example"},
			want:    L6ERR,
			errPart: "not other.example",
		},
		{
			name: "verified chain without a name",
			cert: good,
			spec: probespec.Spec{Protocol: probespec.HTTPS, Verify: true},
			want: L7OK,
		},
		{
			name:    "expired",
			cert:    expired,
			spec:    probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "app.example"},
			want:    L6ERR,
			errPart: "expired",
		},
		{
			name:    "expires sooner than min-valid",
			cert:    soon,
			spec:    probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "app.example", MinValid: 7 * day},
			want:    L6ERR,
			errPart: "certificate expires in 3d, want at least 7d",
		},
		{
			name: "expires later than min-valid",
			cert: soon,
			spec: probespec.Spec{Protocol: probespec.HTTPS, Verify: true, Host: "app.example", MinValid: 2 * day},
			want: L7OK,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startHTTPTestServer(t, "127.0.0.1", &tc.cert)
			res := probeOnce(t, tc.spec, Options{}, srv.addr)
			t.Logf("%v: %s", res.Outcome, res.Message())
			checkResult(t, res, tc.want, tc.errPart)
			wantSNI := tc.spec.SNI
			if wantSNI == "" {
				wantSNI = tc.spec.Host
			}
			if got := recv(t, srv.sni, "ClientHello"); got != wantSNI {
				t.Errorf("server saw SNI %q, want %q", got, wantSNI)
			}
			if res.Outcome == L6ERR && tc.spec.MinValid == 0 {
				return // the handshake failed: no certificate to report
			}
			if res.TLS == nil {
				t.Fatalf("TLS not reported")
			}
			if res.TLS.Version != "TLS 1.3" || res.TLS.Verified != tc.spec.Verify || !res.TLS.NotAfter.Equal(tc.cert.Leaf.NotAfter) {
				t.Errorf("TLS = %+v, want TLS 1.3, verified %v, NotAfter %v", res.TLS, tc.spec.Verify, tc.cert.Leaf.NotAfter)
			}
			if tm := res.Timings; res.Up() && (tm.Connect <= 0 || tm.TLS < tm.Connect || tm.FirstByte < tm.TLS || tm.Total < tm.FirstByte) {
				t.Errorf("timings %+v: want 0 < Connect <= TLS <= FirstByte <= Total", tm)
			}
			if res.Up() && tc.spec.Host != "" {
				if got := srv.lastSeen(t).host; got != tc.spec.Host {
					t.Errorf("server saw Host %q, want %q", got, tc.spec.Host)
				}
			}
		})
	}
}

func TestHTTPSProbeBrokenServers(t *testing.T) {
	plain := startHTTPTestServer(t, "127.0.0.1", nil)
	silent := serveTCP(t, "127.0.0.1", func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	tests := []struct {
		name    string
		target  netip.AddrPort
		want    Outcome
		errPart string
	}{
		{"plain http server", plain.addr, L6ERR, "tls handshake"},
		{"silent server", silent, L6TOUT, "tls handshake"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := probeOnce(t, probespec.Spec{Protocol: probespec.HTTPS}, Options{}, tc.target)
			t.Logf("%v: %s", res.Outcome, res.Message())
			checkResult(t, res, tc.want, tc.errPart)
		})
	}
}

// overHTTPAndHTTPS runs f as a subtest over http, and over https with a
// certificate for name from a CA the probes trust.
func overHTTPAndHTTPS(t *testing.T, name string, f func(t *testing.T, proto probespec.Protocol, cert *tls.Certificate)) {
	t.Helper()
	ca := newTestCA(t)
	useRoots(t, ca.Pool())
	cert := ca.Leaf(t, certOpts{DNSNames: []string{name}})
	t.Run(string(probespec.HTTP), func(t *testing.T) { f(t, probespec.HTTP, nil) })
	t.Run(string(probespec.HTTPS), func(t *testing.T) { f(t, probespec.HTTPS, &cert) })
}

func TestHTTPProbeIPv6(t *testing.T) {
	overHTTPAndHTTPS(t, "app.example", func(t *testing.T, proto probespec.Protocol, cert *tls.Certificate) {
		srv := startHTTPTestServer(t, "::1", cert)
		spec := probespec.Spec{Protocol: proto, Verify: true, Host: "app.example", Body: regexp.MustCompile("pulselb")}
		res := probeOnce(t, spec, Options{}, srv.addr)
		checkResult(t, res, L7OK, "")
		if got := srv.lastSeen(t).host; got != "app.example" {
			t.Errorf("server saw Host %q, want app.example", got)
		}
		if !strings.HasPrefix(srv.addr.String(), "[::1]:") {
			t.Errorf("server listens on %v, want [::1]", srv.addr)
		}
	})
}

func TestHTTPProbeLocalAddr(t *testing.T) {
	// All of 127.0.0.0/8 is loopback on Linux, so a probe bound to
	// 127.0.0.2 reaches a server on 127.0.0.1 from that address.
	srv := startHTTPTestServer(t, "127.0.0.1", nil)
	p, err := New(probespec.Spec{Protocol: probespec.HTTP}, Options{LocalAddr: netip.MustParseAddr("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Probe(t.Context(), srv.addr)
	if res.Outcome != L7OK {
		t.Skipf("cannot probe from 127.0.0.2 here: %v", res.Message())
	}
	if got := srv.lastSeen(t).remoteIP; got != "127.0.0.2" {
		t.Errorf("server saw the probe from %s, want 127.0.0.2", got)
	}
}

// httpRawServer answers every connection with response, written as is
// after the request headers arrived, and closes. It sends each request it
// read to requests.
func httpRawServer(t *testing.T, response string, requests chan<- string) netip.AddrPort {
	t.Helper()
	return serveTCP(t, "127.0.0.1", func(c net.Conn) {
		var req []byte
		buf := make([]byte, 1024)
		for !strings.Contains(string(req), "\r\n\r\n") {
			n, err := c.Read(buf)
			req = append(req, buf[:n]...)
			if err != nil {
				return
			}
		}
		if requests != nil {
			select {
			case requests <- string(req):
			default:
			}
		}
		_, _ = io.WriteString(c, response)
	})
}

func TestHTTPProbeWireFormats(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name     string
		response string
		spec     probespec.Spec
		want     Outcome
		errPart  string
		detail   string
	}{
		{
			name:     "chunked body",
			response: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
			spec:     probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`^hello world$`)},
			want:     L7OK,
			detail:   "HTTP 200",
		},
		{
			name:     "100 continue before the answer",
			response: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			spec:     probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`^ok$`)},
			want:     L7OK,
			detail:   "HTTP 200",
		},
		{
			name:     "103 early hints before a failing answer",
			response: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
			spec:     probespec.Spec{Protocol: probespec.HTTP},
			want:     L7STS,
			errPart:  "HTTP 503, want 200-399",
		},
		{
			name:     "only informational responses",
			response: strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 8),
			spec:     probespec.Spec{Protocol: probespec.HTTP},
			want:     L7RSP,
			errPart:  "unexpected EOF",
		},
		{
			name:     "body without length read to close",
			response: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nno length given",
			spec:     probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`^no length given$`)},
			want:     L7OK,
		},
		{
			name:     "HTTP/1.0 server",
			response: "HTTP/1.0 200 OK\r\n\r\nold server",
			spec:     probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`^old server$`)},
			want:     L7OK,
			detail:   "HTTP 200",
		},
		{
			name:     "only the first 64 KiB of the body is read",
			response: "HTTP/1.1 200 OK\r\nContent-Length: 102400\r\n\r\n" + big,
			spec:     probespec.Spec{Protocol: probespec.HTTP, Body: regexp.MustCompile(`y`)},
			want:     L7RSP,
			errPart:  "(65536 bytes read)",
		},
		{
			name:     "chunked body cut short",
			response: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
			spec:     probespec.Spec{Protocol: probespec.HTTP},
			want:     L7RSP,
			errPart:  "reading body",
		},
		{
			name:     "status line cut short",
			response: "HTTP/1.1 200",
			spec:     probespec.Spec{Protocol: probespec.HTTP},
			want:     L7RSP,
			errPart:  "reading response",
		},
		{
			name:     "not HTTP",
			response: "SSH-2.0-OpenSSH_9.6\r\n\r\n",
			spec:     probespec.Spec{Protocol: probespec.HTTP},
			want:     L7RSP,
			errPart:  "malformed HTTP",
		},
		{
			name:     "closed without answer",
			response: "",
			spec:     probespec.Spec{Protocol: probespec.HTTP},
			want:     L7RSP,
			errPart:  "server closed the connection",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := httpRawServer(t, tc.response, nil)
			res := probeOnce(t, tc.spec, Options{}, addr)
			t.Logf("%v: %s", res.Outcome, res.Message())
			checkResult(t, res, tc.want, tc.errPart)
			if tc.detail != "" && res.Detail != tc.detail {
				t.Errorf("Detail = %q, want %q", res.Detail, tc.detail)
			}
			if tm := res.Timings; res.Up() && (tm.Connect <= 0 || tm.FirstByte < tm.Connect || tm.Total < tm.FirstByte) {
				t.Errorf("timings %+v: want 0 < Connect <= FirstByte <= Total", tm)
			}
		})
	}
}

func TestHTTPProbeRequest(t *testing.T) {
	requests := make(chan string, 1)
	addr := httpRawServer(t, "HTTP/1.1 204 No Content\r\n\r\n", requests)
	res := probeOnce(t, probespec.Spec{Protocol: probespec.HTTP, Method: "POST", Path: "/health?full=1", Host: "app.example:8080"}, Options{}, addr)
	checkResult(t, res, L7OK, "")
	req := recv(t, requests, "request")
	for _, line := range []string{
		"POST /health?full=1 HTTP/1.1\r\n",
		"\r\nHost: app.example:8080\r\n",
		"\r\nUser-Agent: pulselb-probe\r\n",
		// Without it a server may keep the connection open for a next
		// request that never comes.
		"\r\nConnection: close\r\n",
		"\r\nContent-Length: 0\r\n",
	} {
		if !strings.Contains(req, line) {
			t.Errorf("request %q lacks %q", req, line)
		}
	}
}

// httpRedirectServer answers every request with a 302 to location.
func httpRedirectServer(t *testing.T, location string, cert *tls.Certificate) netip.AddrPort {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, location, http.StatusFound)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

func TestHTTPProbeRedirectToOtherHost(t *testing.T) {
	overHTTPAndHTTPS(t, "sni.example", func(t *testing.T, proto probespec.Protocol, cert *tls.Certificate) {
		final := startHTTPTestServer(t, "127.0.0.1", cert)
		// localhost is a name, so the probe resolves it; it may name
		// ::1 first, where nothing listens, before 127.0.0.1.
		finalHost := fmt.Sprintf("localhost:%d", final.addr.Port())
		start := httpRedirectServer(t, fmt.Sprintf("%s://%s/final", proto, finalHost), cert)
		spec := probespec.Spec{Protocol: proto, Host: "app.example", Follow: true, Status: probespec.StatusSet{{Min: 200, Max: 200}},
			Body: regexp.MustCompile("^final page$")}
		if proto == probespec.HTTPS {
			spec.Verify, spec.SNI = true, "sni.example"
		}
		res := probeOnce(t, spec, Options{}, start)
		checkResult(t, res, L7OK, "")
		// An absolute Location names its host, so the Host header follows it.
		if got := final.lastSeen(t); got.host != finalHost || got.path != "/final" {
			t.Errorf("final server saw %+v, want Host %s and /final", got, finalHost)
		}
		if proto == probespec.HTTPS {
			if got := recv(t, final.sni, "ClientHello"); got != "sni.example" {
				t.Errorf("final server saw SNI %q, want the configured sni.example", got)
			}
			if res.TLS == nil || !res.TLS.Verified {
				t.Errorf("TLS = %+v, want the final hop's verified certificate", res.TLS)
			}
		}
	})
}

func TestHTTPProbeRedirectToClosedHost(t *testing.T) {
	closed := closedTCPPort(t, "127.0.0.1")
	start := httpRedirectServer(t, fmt.Sprintf("http://%s/", closed), nil)
	res := probeOnce(t, probespec.Spec{Protocol: probespec.HTTP, Follow: true}, Options{}, start)
	checkResult(t, res, L4CON, "connecting")
}

func TestHTTPProbeCancel(t *testing.T) {
	srv := startHTTPTestServer(t, "127.0.0.1", nil)
	p, err := New(probespec.Spec{Protocol: probespec.HTTP, Path: "/hang"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Cancel once the server holds the request, so the probe is blocked
	// reading the answer.
	go func() {
		<-srv.seen
		cancel()
	}()
	start := time.Now()
	res := p.Probe(ctx, srv.addr)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("cancelled probe took %v", took)
	}
	if res.Outcome == L7TOUT || res.Err == nil || !strings.Contains(res.Err.Error(), "context canceled") {
		t.Errorf("cancelled probe: %v (%v), want a cancellation rather than a timeout", res.Outcome, res.Err)
	}
}

// TestHTTPProbeDeadlineBoundsAnswer checks that a probe's deadline bounds
// every part of reading and checking the answer: headers or a body that
// trickle in past it, and a body regex whose matching would outlast it.
func TestHTTPProbeDeadlineBoundsAnswer(t *testing.T) {
	// trickle writes head, then one byte of fill every 5 ms until the
	// client goes away.
	trickle := func(head string) netip.AddrPort {
		return serveTCP(t, "127.0.0.1", func(c net.Conn) {
			_, _ = c.Read(make([]byte, 4096))
			if _, err := io.WriteString(c, head); err != nil {
				return
			}
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		})
	}
	// large answers 10 MB of "a" at once.
	large := serveTCP(t, "127.0.0.1", func(c net.Conn) {
		_, _ = c.Read(make([]byte, 4096))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n")
		_, _ = c.Write(bytes.Repeat([]byte("a"), 10<<20))
	})
	// costly is within Parse's size limit (253 instructions), and still
	// takes far longer than costlyTimeout over 64 KiB of "a": about 0.2 s
	// without the race detector, several seconds with it.
	costly := probespec.MustParse(`http body="[a-z]{250}b"`).Body
	tests := []struct {
		name    string
		target  netip.AddrPort
		body    *regexp.Regexp
		errPart string
	}{
		{"header line trickles", trickle("HTTP/1.1 200 OK\r\nX-Slow: "), nil, "waiting for response headers"},
		{"header names trickle", trickle("HTTP/1.1 200 OK\r\n"), nil, "waiting for response headers"},
		{"status line trickles", trickle("HTTP/1.1 200 "), nil, "waiting for response headers"},
		{"body trickles", trickle("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"), nil, "reading body"},
		// On a starved machine reading 64 KiB over loopback can itself
		// outlast costlyTimeout; the deadline bounds either step, and
		// TestMatchByDeadline shows the matching alone is bounded.
		{"costly body regex on a large body", large, costly, "ing body"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := probespec.Spec{Protocol: probespec.HTTP, Body: tc.body}
			if tc.body != nil {
				spec.Timeout = costlyTimeout
			}
			res := probeOnce(t, spec, Options{}, tc.target)
			t.Logf("%v after %v: %s", res.Outcome, res.Timings.Total, res.Message())
			checkResult(t, res, L7TOUT, tc.errPart)
		})
	}
}

// TestMatchByDeadline: a costly body expression over the largest body the
// prober reads stops at the deadline with the context's error, whatever the
// machine's load (no I/O in the way), and a cheap one matches in full.
func TestMatchByDeadline(t *testing.T) {
	costly := probespec.MustParse(`http body="[a-z]{250}b"`).Body
	body := bytes.Repeat([]byte("a"), httpBodyLimit)
	ctx, cancel := context.WithTimeout(t.Context(), costlyTimeout)
	defer cancel()
	start := time.Now()
	matched, err := matchBy(ctx, costly, probespec.RegexpInsts(costly), body)
	took := time.Since(start)
	if matched || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("matchBy = %v, %v after %v; want the deadline's error", matched, err, took)
	}
	// The deadline is checked every few thousand steps: well within a
	// second even with the race detector on a loaded machine, where the
	// whole match takes several seconds.
	if took > costlyTimeout+time.Second {
		t.Errorf("matchBy stopped %v after the start, want about %v", took, costlyTimeout)
	}
	cheap := probespec.MustParse(`http body="a+"`).Body
	if matched, err := matchBy(t.Context(), cheap, probespec.RegexpInsts(cheap), body[:1024]); !matched || err != nil {
		t.Errorf("cheap match = %v, %v; want true, nil", matched, err)
	}
}
