// Package loopback owns throwaway servers on 127.0.0.1 to probe: one per
// probe protocol for `pulselb check --serve`, so a user can try a probe
// spec without a server of their own, and the TCP and UDP echoes the
// demo's hosts run.
package loopback

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/httpserver"
)

// Server is a running loopback server.
type Server struct {
	// Addr is where the server listens.
	Addr netip.AddrPort
	// Roots holds the self-signed certificate of a tls or https server,
	// for a client to trust; it is nil for the other protocols.
	Roots *x509.CertPool
	close func()
}

// Close stops the server.
func (s *Server) Close() { s.close() }

// Serve starts a server on 127.0.0.1 for spec's protocol: tcp, udp and
// tls echo what they receive; http and https answer 200 "ok" on every
// path; dns answers A 127.0.0.1 and AAAA ::1 for every name. Other
// protocols (mysql) have no built-in server and return an error.
func Serve(ctx context.Context, spec probespec.Spec) (*Server, error) {
	switch spec.Protocol {
	case probespec.TCP, probespec.TLS:
		ln, roots, err := listenTCP(spec.Protocol == probespec.TLS, spec.ALPN)
		if err != nil {
			return nil, err
		}
		go EchoTCP(ln)
		return &Server{Addr: addrOf(ln.Addr()), Roots: roots, close: func() { ln.Close() }}, nil
	case probespec.UDP:
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		go EchoUDP(pc)
		return &Server{Addr: addrOf(pc.LocalAddr()), close: func() { pc.Close() }}, nil
	case probespec.HTTP, probespec.HTTPS:
		ln, roots, err := listenTCP(spec.Protocol == probespec.HTTPS, nil)
		if err != nil {
			return nil, err
		}
		srv := httpserver.New(ctx, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		}), httpserver.Options{
			Name: "loopback",
			// A probe that rejects the certificate aborts the handshake;
			// that is the point of the probe, not a server error to print.
			ErrorLog: log.New(io.Discard, "", 0),
		})
		go func() { _ = srv.Serve(ln) }()
		return &Server{Addr: addrOf(ln.Addr()), Roots: roots, close: func() { srv.Close() }}, nil
	case probespec.DNS:
		pc, ln, err := listenUDPAndTCP()
		if err != nil {
			return nil, err
		}
		h := dns.HandlerFunc(answerLoopback)
		udp := &dns.Server{PacketConn: pc, Handler: h}
		tcp := &dns.Server{Listener: ln, Handler: h}
		go func() { _ = udp.ActivateAndServe() }()
		go func() { _ = tcp.ActivateAndServe() }()
		return &Server{Addr: addrOf(pc.LocalAddr()), close: func() {
			_ = udp.Shutdown()
			_ = tcp.Shutdown()
		}}, nil
	default:
		return nil, fmt.Errorf("no built-in %s server; point pulselb check at a real one", spec.Protocol)
	}
}

// listenUDPAndTCP listens on one port of 127.0.0.1 for both UDP and TCP, as
// a DNS server does. The kernel picks a free UDP port, which another
// process may hold for TCP; then it tries another, a bounded number of times.
func listenUDPAndTCP() (net.PacketConn, net.Listener, error) {
	const attempts = 20
	var err error
	for range attempts {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("no port of 127.0.0.1 free for both UDP and TCP in %d attempts: %w", attempts, err)
}

// listenTCP listens on a free port of 127.0.0.1, behind TLS with a
// self-signed certificate offering alpn when secure; then it also returns a
// pool holding that certificate.
func listenTCP(secure bool, alpn []string) (net.Listener, *x509.CertPool, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil || !secure {
		return ln, nil, err
	}
	cfg, roots, err := selfSignedTLS()
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	cfg.NextProtos = alpn
	return tls.NewListener(ln, cfg), roots, nil
}

func addrOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort()
	case *net.UDPAddr:
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// EchoTCP accepts connections on ln and sends back what each receives,
// for at most 30 seconds a connection, until ln is closed.
func EchoTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(c, c)
		}()
	}
}

// EchoUDP sends every datagram pc receives back to its sender until pc is
// closed.
func EchoUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

func answerLoopback(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Rrtype: q.Qtype, Ttl: 5}
		switch q.Qtype {
		case dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1)})
		case dns.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IPv6loopback})
		}
	}
	_ = w.WriteMsg(m)
}

// selfSignedTLS returns a server config with a fresh one-day certificate
// for 127.0.0.1 and localhost, and a pool holding that certificate.
func selfSignedTLS() (*tls.Config, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "pulselb check --serve"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, errors.Join(errors.New("creating a self-signed certificate"), err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the self-signed certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}, roots, nil
}
