package prober

import (
	"fmt"

	proxyproto "github.com/pires/go-proxyproto"
)

// ProxyProtocol is the PROXY protocol version a probe speaks: a backend
// behind such a port (HAProxy's accept-proxy, nginx's proxy_protocol,
// Traefik's proxyProtocol) drops a connection that does not start with a
// header, so a probe without one would find it down.
type ProxyProtocol uint8

// PROXY protocol versions. ProxyNone sends no header.
const (
	ProxyNone ProxyProtocol = iota
	ProxyV1
	ProxyV2
)

// ParseProxyProtocol reads "v1" or "v2", the values of the probe option
// proxy-protocol= and of the pulselb.io/proxy-protocol annotation.
func ParseProxyProtocol(s string) (ProxyProtocol, error) {
	switch s {
	case "v1":
		return ProxyV1, nil
	case "v2":
		return ProxyV2, nil
	}
	return ProxyNone, fmt.Errorf("want v1 or v2 (the PROXY protocol version the backend accepts)")
}

// String returns "v1", "v2", or "none".
func (v ProxyProtocol) String() string {
	switch v {
	case ProxyV1:
		return "v1"
	case ProxyV2:
		return "v2"
	}
	return "none"
}

// healthHeader is the header a probe sends first on its connection. A
// probe relays no client, so it says so: version 2's LOCAL command, which
// the specification reserves for health checks, and version 1's UNKNOWN.
// A receiver then uses the connection's own addresses.
func (v ProxyProtocol) healthHeader() []byte {
	var h proxyproto.Header
	switch v {
	case ProxyV1:
		h = proxyproto.Header{Version: 1, Command: proxyproto.PROXY, TransportProtocol: proxyproto.UNSPEC}
	case ProxyV2:
		h = proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}
	default:
		return nil
	}
	b, err := h.Format()
	if err != nil {
		// Both headers carry no address: formatting them cannot fail.
		panic(fmt.Sprintf("formatting a PROXY %s health-check header: %v", v, err))
	}
	return b
}
