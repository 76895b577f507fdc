package proxy

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	proxyproto "github.com/pires/go-proxyproto"
)

// HeaderVersion is the PROXY protocol version a port's relay writes in
// front of every connection to the backend, so the backend learns the
// client's address and port; HeaderNone writes nothing.
type HeaderVersion uint8

// The PROXY protocol versions (haproxy.org's proxy-protocol.txt): version 1
// is a line of text, version 2 a binary block; backends name them
// "proxy_protocol" (nginx, either), "accept-proxy" (HAProxy, either),
// "proxyProtocol" (Traefik, either).
const (
	HeaderNone HeaderVersion = iota
	HeaderV1
	HeaderV2
)

// String returns "v1", "v2" or "none", as the flag writes them.
func (v HeaderVersion) String() string {
	switch v {
	case HeaderV1:
		return "v1"
	case HeaderV2:
		return "v2"
	}
	return "none"
}

// ParseProxyProtocol parses the --proxy-protocol list, such as
// "TCP:80=v2,TCP:8443=v1": the ports whose relay sends a PROXY protocol
// header, and its version. An empty string means none. Only TCP ports can
// carry a header: the protocol describes a stream, and a UDP datagram has
// nowhere to put one that a backend would look for.
func ParseProxyProtocol(s string) (map[Port]HeaderVersion, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[Port]HeaderVersion{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		port, version, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("proxy-protocol port %q: want PROTOCOL:PORT=VERSION, such as TCP:443=v2", item)
		}
		p, err := parsePort(strings.TrimSpace(port))
		if err != nil {
			return nil, fmt.Errorf("proxy-protocol port %q: %w", item, err)
		}
		if p.Protocol != TCP {
			return nil, fmt.Errorf("proxy-protocol port %q: the PROXY protocol is for TCP ports only", item)
		}
		var v HeaderVersion
		switch strings.TrimSpace(version) {
		case "v1":
			v = HeaderV1
		case "v2":
			v = HeaderV2
		default:
			return nil, fmt.Errorf("proxy-protocol port %q: version %q: want v1 or v2", item, version)
		}
		if _, dup := out[p]; dup {
			return nil, fmt.Errorf("proxy-protocol port %q: %s listed twice", item, p)
		}
		out[p] = v
	}
	return out, nil
}

// checkProxyProtocol checks that every port with a header is a TCP port of
// cfg.Ports.
func checkProxyProtocol(cfg *Config) error {
	for _, p := range slices.SortedFunc(maps.Keys(cfg.ProxyProtocol), comparePorts) {
		switch {
		case !slices.Contains(cfg.Ports, p):
			return fmt.Errorf("%w: %s is not one of the ports", ErrProxyProtocol, p)
		case p.Protocol != TCP:
			return fmt.Errorf("%w: %s is not a TCP port", ErrProxyProtocol, p)
		case cfg.ProxyProtocol[p] != HeaderV1 && cfg.ProxyProtocol[p] != HeaderV2:
			return fmt.Errorf("%w: %s has no version", ErrProxyProtocol, p)
		}
	}
	return nil
}

// clientHeader returns the header that tells the backend about a relayed
// connection from client to local, the address it arrived at (in a proxy
// pod the pod's address: the node's hostPort DNAT happened before it).
func clientHeader(v HeaderVersion, client, local netip.AddrPort) ([]byte, error) {
	h := proxyproto.HeaderProxyFromAddrs(byte(v), net.TCPAddrFromAddrPort(client), net.TCPAddrFromAddrPort(local))
	return h.Format()
}

// relayedPorts returns the ports a userspace relay serves in iptables mode:
// those that send a PROXY protocol header, which a DNAT rule cannot write.
func (p *Proxy) relayedPorts() []Port {
	var out []Port
	for _, port := range p.cfg.Ports {
		if p.cfg.ProxyProtocol[port] != HeaderNone {
			out = append(out, port)
		}
	}
	return out
}

// ruledPorts returns the ports iptables mode forwards with rules.
func (p *Proxy) ruledPorts() []Port {
	var out []Port
	for _, port := range p.cfg.Ports {
		if p.cfg.ProxyProtocol[port] == HeaderNone {
			out = append(out, port)
		}
	}
	return out
}
