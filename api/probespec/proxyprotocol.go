package probespec

import "errors"

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
	return ProxyNone, errors.New("want v1 or v2 (the PROXY protocol version the backend accepts)")
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
