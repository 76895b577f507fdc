package prober

import (
	"fmt"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/pulselb/pulselb/api/probespec"
)

// healthHeader is the header a probe sends first on its connection. A
// probe relays no client, so it says so: version 2's LOCAL command, which
// the specification reserves for health checks, and version 1's UNKNOWN.
// A receiver then uses the connection's own addresses.
func healthHeader(v probespec.ProxyProtocol) []byte {
	var h proxyproto.Header
	switch v {
	case probespec.ProxyV1:
		h = proxyproto.Header{Version: 1, Command: proxyproto.PROXY, TransportProtocol: proxyproto.UNSPEC}
	case probespec.ProxyV2:
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
