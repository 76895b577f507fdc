// Command pulselb-echo is the backend the test cluster's kubelet simulator
// runs for container images that are not pulselb. On every TCP port it
// answers HTTP requests with its name, terminates TLS (self-signed) and
// echoes anything else; on every UDP port it echoes datagrams.
//
// A connection may start with a PROXY protocol header (version 1 or 2), as
// pulselb's proxies send one for a port with pulselb.io/proxy-protocol: the
// answer's client= is then the address the header carries, the client's
// own, rather than the proxy's. A header with version 2's LOCAL or version
// 1's UNKNOWN (a health check's) leaves the connection's address.
//
// GET /health answers 200 "ok", or 503 once /health/fail was requested and
// until /health/pass is: tests point readiness and liveness probes at it
// and flip it from inside the pod.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pulselb-echo:", err)
		os.Exit(1)
	}
}

func run() error {
	name := flag.String("name", "", "name to answer HTTP requests with (default the hostname)")
	tcpPorts := flag.String("tcp", "", "comma-separated TCP ports")
	udpPorts := flag.String("udp", "", "comma-separated UDP ports")
	flag.Parse()
	if *name == "" {
		*name, _ = os.Hostname()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cert, err := selfSigned(*name)
	if err != nil {
		return err
	}
	s := &server{name: *name, tls: &tls.Config{Certificates: []tls.Certificate{cert}}}
	errc := make(chan error, 1)
	for _, p := range split(*tcpPorts) {
		l, err := net.Listen("tcp", ":"+p)
		if err != nil {
			return fmt.Errorf("listening on tcp port %s: %w", p, err)
		}
		defer l.Close()
		go func() { errc <- s.serveTCP(l) }()
	}
	for _, p := range split(*udpPorts) {
		c, err := net.ListenPacket("udp", ":"+p)
		if err != nil {
			return fmt.Errorf("listening on udp port %s: %w", p, err)
		}
		defer c.Close()
		go func() { errc <- serveUDP(c) }()
	}
	fmt.Fprintf(os.Stderr, "pulselb-echo: %s serving tcp [%s] udp [%s]\n", *name, *tcpPorts, *udpPorts)
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

type server struct {
	name      string
	tls       *tls.Config
	unhealthy atomic.Bool
}

func (s *server) serveTCP(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accepting: %w", err)
		}
		go s.handle(c, false)
	}
}

// handle sniffs the first bytes: TLS handshake, HTTP request, or echo.
func (s *server) handle(c net.Conn, inTLS bool) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	conn := &peekedConn{Conn: c, r: br}
	if !inTLS && (first[0] == 'P' || first[0] == 0x0D) {
		if head, _ := br.Peek(12); isProxyHeader(head) {
			h, err := proxyproto.Read(br)
			if err != nil {
				return
			}
			if src, _, ok := h.TCPAddrs(); ok && h.Command.IsProxy() {
				conn.remote = src
			}
			if _, err := br.Peek(1); err != nil {
				return
			}
		}
	}
	if first, _ = br.Peek(1); len(first) == 1 && first[0] == 0x16 && !inTLS {
		tc := tls.Server(conn, s.tls)
		if err := tc.Handshake(); err != nil {
			return
		}
		s.handle(tc, true)
		return
	}
	if head, _ := br.Peek(4); isHTTP(string(head)) {
		srv := &http.Server{Handler: http.HandlerFunc(s.answer), ReadHeaderTimeout: 10 * time.Second}
		_ = srv.Serve(&oneConnListener{c: conn})
		return
	}
	_, _ = io.Copy(c, br)
}

func isHTTP(head string) bool {
	for _, m := range []string{"GET ", "HEAD", "POST", "PUT ", "DELE", "OPTI", "PATC"} {
		if head == m {
			return true
		}
	}
	return false
}

func (s *server) answer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	switch r.URL.Path {
	case "/health":
		if s.unhealthy.Load() {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		return
	case "/health/fail", "/health/pass":
		s.unhealthy.Store(r.URL.Path == "/health/fail")
		fmt.Fprintf(w, "health: unhealthy=%v\n", s.unhealthy.Load())
		return
	}
	host, _ := os.Hostname()
	fmt.Fprintf(w, "name=%s host=%s client=%s path=%s\n", s.name, host, r.RemoteAddr, r.URL.Path)
}

func serveUDP(c net.PacketConn) error {
	buf := make([]byte, 65536)
	for {
		n, addr, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("reading datagram: %w", err)
		}
		_, _ = c.WriteTo(buf[:n], addr)
	}
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
	// remote, when set, is the client a PROXY protocol header named.
	remote net.Addr
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *peekedConn) RemoteAddr() net.Addr {
	if p.remote != nil {
		return p.remote
	}
	return p.Conn.RemoteAddr()
}

// isProxyHeader reports whether head, a connection's first 12 bytes, starts
// a PROXY protocol header: version 1's "PROXY " or version 2's signature.
func isProxyHeader(head []byte) bool {
	return bytes.HasPrefix(head, []byte("PROXY ")) || bytes.Equal(head, []byte("\r\n\r\n\x00\r\nQUIT\n"))
}

// oneConnListener serves one connection to an http.Server, then reports
// closed once that connection is done.
type oneConnListener struct {
	c    net.Conn
	done chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.c == nil {
		if l.done != nil {
			<-l.done
		}
		return nil, net.ErrClosed
	}
	c := l.c
	l.c = nil
	l.done = make(chan struct{})
	return &closeNotifyConn{Conn: c, done: l.done}, nil
}

func (l *oneConnListener) Close() error { return nil }

func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }

type closeNotifyConn struct {
	net.Conn
	done   chan struct{}
	closed bool
}

func (c *closeNotifyConn) Close() error {
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	return c.Conn.Close()
}

func selfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "pulselb-echo"},
		DNSNames:     []string{"pulselb-echo", strings.ReplaceAll(name, "/", ".")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, errors.Join(errors.New("creating certificate"), err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
