package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/pulselb/pulselb/httpserver"
	"github.com/pulselb/pulselb/prober/loopback"
)

var hostAddrs = []struct {
	name string
	addr netip.Addr
}{
	{"a", netip.MustParseAddr("127.0.0.11")},
	{"b", netip.MustParseAddr("127.0.0.12")},
	{"c", netip.MustParseAddr("127.0.0.13")},
}

// ports are the ports every demo host listens on.
type ports struct{ http, tcp, udp uint16 }

// host is one loopback host with its three backends.
type host struct {
	name string
	addr netip.Addr

	mu      sync.Mutex
	httpSrv *httpserver.Server
	tcp     net.Listener
	udp     net.PacketConn
}

// startHosts picks ports free on all three addresses and starts the
// hosts' backends on them.
func startHosts(ctx context.Context) (ports, []*host, error) {
	var lastErr error
	for range 20 {
		hosts := make([]*host, len(hostAddrs))
		for i, h := range hostAddrs {
			hosts[i] = &host{name: h.name, addr: h.addr}
		}
		p, err := pickPorts()
		if err == nil {
			for _, h := range hosts {
				if err = h.listen(ctx, p); err != nil {
					break
				}
			}
		}
		if err == nil {
			return p, hosts, nil
		}
		for _, h := range hosts {
			h.stop()
		}
		lastErr = err
		if errors.Is(err, errNoLoopbackAlias) {
			break
		}
	}
	return ports{}, nil, lastErr
}

var errNoLoopbackAlias = errors.New("cannot bind the demo's loopback addresses; on Linux all of 127.0.0.0/8 is loopback, elsewhere add aliases for 127.0.0.11 to 127.0.0.13")

// pickPorts asks the kernel for free ports on the first host address.
func pickPorts() (ports, error) {
	first := hostAddrs[0].addr.String()
	var p ports
	for _, dst := range []*uint16{&p.http, &p.tcp} {
		ln, err := net.Listen("tcp", net.JoinHostPort(first, "0"))
		if err != nil {
			return p, fmt.Errorf("%w: %w", errNoLoopbackAlias, err)
		}
		*dst = uint16(ln.Addr().(*net.TCPAddr).Port)
		defer ln.Close()
	}
	pc, err := net.ListenPacket("udp", net.JoinHostPort(first, "0"))
	if err != nil {
		return p, fmt.Errorf("%w: %w", errNoLoopbackAlias, err)
	}
	p.udp = uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	pc.Close()
	return p, nil
}

// listen starts the host's HTTP backend, TCP echo and UDP echo.
func (h *host) listen(ctx context.Context, p ports) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := func(port uint16) string { return netip.AddrPortFrom(h.addr, port).String() }
	httpLn, err := net.Listen("tcp", at(p.http))
	if err != nil {
		return fmt.Errorf("host %s: %w", h.name, err)
	}
	tcp, err := net.Listen("tcp", at(p.tcp))
	if err != nil {
		httpLn.Close()
		return fmt.Errorf("host %s: %w", h.name, err)
	}
	udp, err := net.ListenPacket("udp", at(p.udp))
	if err != nil {
		httpLn.Close()
		tcp.Close()
		return fmt.Errorf("host %s: %w", h.name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "ok from host %s\n", h.name) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from host %s (%s)\n", h.name, h.addr)
	})
	h.httpSrv = httpserver.New(ctx, mux, httpserver.Options{Name: "demo", ErrorLog: log.New(io.Discard, "", 0)})
	h.tcp, h.udp = tcp, udp
	srv := h.httpSrv
	go func() { _ = srv.Serve(httpLn) }()
	go loopback.EchoTCP(tcp)
	go loopback.EchoUDP(udp)
	return nil
}

// stop closes the host's listeners, as a host that went away.
func (h *host) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.httpSrv != nil {
		_ = h.httpSrv.Close()
		h.httpSrv = nil
	}
	if h.tcp != nil {
		h.tcp.Close()
		h.tcp = nil
	}
	if h.udp != nil {
		h.udp.Close()
		h.udp = nil
	}
}
