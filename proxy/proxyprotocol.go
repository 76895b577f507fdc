package proxy

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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
	return appendHeader(nil, v, client, local)
}

// v2Signature opens every version 2 header (proxy-protocol.txt, 2.2).
var v2Signature = [12]byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

// maxHeaderLen is the longest header appendHeader writes: version 1's
// longest line (proxy-protocol.txt, 2.1); version 2 over IPv6 takes 52.
const maxHeaderLen = 107

// appendHeader appends clientHeader's header to dst. It is the relay's own
// code rather than a library's because it runs for every connection and
// writes into the buffer that carries the client's first bytes: no
// allocation, no copy. Addresses of two families (which a dual-stack
// socket does not give after unmapping) are both written as IPv6.
func appendHeader(dst []byte, v HeaderVersion, client, local netip.AddrPort) ([]byte, error) {
	src, dstAddr := client.Addr().Unmap(), local.Addr().Unmap()
	if !src.IsValid() || !dstAddr.IsValid() {
		return nil, fmt.Errorf("PROXY protocol header: no address for %v → %v", client, local)
	}
	ipv4 := src.Is4() && dstAddr.Is4()
	if !ipv4 {
		src, dstAddr = netip.AddrFrom16(src.As16()), netip.AddrFrom16(dstAddr.As16())
	}
	switch v {
	case HeaderV1:
		dst = append(dst, "PROXY TCP6 "...)
		if ipv4 {
			dst[len(dst)-2] = '4'
		}
		dst = src.AppendTo(dst)
		dst = append(dst, ' ')
		dst = dstAddr.AppendTo(dst)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(client.Port()), 10)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(local.Port()), 10)
		return append(dst, '\r', '\n'), nil
	case HeaderV2:
		// Version 2, command PROXY; TCP over IPv4 (0x11) or IPv6 (0x21),
		// then the address block's length.
		dst = append(dst, v2Signature[:]...)
		if ipv4 {
			dst = append(dst, 0x21, 0x11, 0, 12)
		} else {
			dst = append(dst, 0x21, 0x21, 0, 36)
		}
		if ipv4 {
			a, b := src.As4(), dstAddr.As4()
			dst = append(append(dst, a[:]...), b[:]...)
		} else {
			a, b := src.As16(), dstAddr.As16()
			dst = append(append(dst, a[:]...), b[:]...)
		}
		dst = binary.BigEndian.AppendUint16(dst, client.Port())
		return binary.BigEndian.AppendUint16(dst, local.Port()), nil
	}
	return nil, fmt.Errorf("PROXY protocol header: no version %d", v)
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
