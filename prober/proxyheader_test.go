package prober

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/pulselb/pulselb/api/probespec"
)

// The health-check headers, written out from the specification
// (haproxy.org, proxy-protocol.txt): version 1's "PROXY UNKNOWN" line
// (section 2.1) and version 2's 12-byte signature, version 2 with the
// LOCAL command (0x20), family and protocol UNSPEC (0x00) and no address
// block (length 0) (section 2.2).
var (
	wantV1Health = []byte("PROXY UNKNOWN\r\n")
	wantV2Health = []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x20, 0x00, 0x00, 0x00}
)

// TestProbeSendsProxyHeader checks the bytes a probe with proxy-protocol=
// sends first, for every protocol that takes the option, and that a probe
// without it sends none.
func TestProbeSendsProxyHeader(t *testing.T) {
	for _, tt := range []struct {
		spec string
		want []byte
	}{
		{"tcp proxy-protocol=v1", wantV1Health},
		{"tcp proxy-protocol=v2", wantV2Health},
		{"http proxy-protocol=v2", wantV2Health},
		{"tls proxy-protocol=v1", wantV1Health},
		{"mysql proxy-protocol=v2", wantV2Health},
		{"tcp send=hello", []byte("hello")},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			got := make(chan []byte, 1)
			target := serveTCP(t, "127.0.0.1", func(c net.Conn) {
				b := make([]byte, len(tt.want))
				n, _ := io.ReadFull(c, b)
				got <- b[:n]
			})
			spec := probespec.MustParse(tt.spec)
			spec.Timeout = 300 * time.Millisecond
			probeOnce(t, spec, Options{}, target)
			select {
			case b := <-got:
				if !bytes.Equal(b, tt.want) {
					t.Errorf("server read %q first, want %q", b, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the server saw no connection")
			}
		})
	}
}

// TestProbeOfServerRequiringProxyHeader probes an HTTP server that refuses
// connections without a PROXY protocol header (go-proxyproto's listener
// with the REQUIRE policy; proxy's integration tests use HAProxy and
// nginx): with the option it is Up, without it Down.
func TestProbeOfServerRequiringProxyHeader(t *testing.T) {
	ln, target := listenTCP(t, "127.0.0.1")
	pl := &proxyproto.Listener{Listener: ln, ConnPolicy: func(proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
		return proxyproto.REQUIRE, nil
	}}
	srv := &http.Server{ReadHeaderTimeout: 2 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(pl) }()
	t.Cleanup(func() { _ = srv.Close() })

	for _, tt := range []struct {
		spec string
		want Outcome
	}{
		{"http proxy-protocol=v1", L7OK},
		{"http proxy-protocol=v2", L7OK},
		{"http", L7RSP},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			spec := probespec.MustParse(tt.spec)
			spec.Timeout = time.Second
			res := probeOnce(t, spec, Options{}, target)
			if res.Outcome != tt.want {
				t.Errorf("outcome %s (%v), want %s", res.Outcome, res.Err, tt.want)
			}
		})
	}
}
