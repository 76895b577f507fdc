package prober

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
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
			spec := MustParse(tt.spec)
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
			spec := MustParse(tt.spec)
			spec.Timeout = time.Second
			res := probeOnce(t, spec, Options{}, target)
			if res.Outcome != tt.want {
				t.Errorf("outcome %s (%v), want %s", res.Outcome, res.Err, tt.want)
			}
		})
	}
}

func TestParseProxyProtocolOption(t *testing.T) {
	for _, tt := range []struct {
		spec    string
		want    ProxyProtocol
		errHas  string
		canonic string
	}{
		{spec: "tcp proxy-protocol=v1", want: ProxyV1, canonic: "tcp proxy-protocol=v1"},
		{spec: "https path=/x proxy-protocol=v2", want: ProxyV2, canonic: "https path=/x proxy-protocol=v2"},
		{spec: "mysql proxy-protocol=v2 user=probe", want: ProxyV2, canonic: "mysql user=probe proxy-protocol=v2"},
		{spec: "tcp proxy-protocol=v3", errHas: `option proxy-protocol="v3": want v1 or v2`},
		{spec: "tcp proxy-protocol=V2", errHas: "want v1 or v2"},
		{spec: "tcp proxy-protocol=", errHas: "want v1 or v2"},
		{spec: "udp proxy-protocol=v2", errHas: `option "proxy-protocol" does not apply to udp`},
		{spec: "dns proxy-protocol=v2", errHas: `option "proxy-protocol" does not apply to dns`},
		{spec: "tcp proxy-protocol=v1 proxy-protocol=v2", errHas: "given twice"},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			s, err := Parse(tt.spec)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || !errors.Is(err, ErrSpec) {
					t.Fatalf("error %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.ProxyProtocol != tt.want || s.String() != tt.canonic {
				t.Errorf("ProxyProtocol %s, String %q; want %s, %q", s.ProxyProtocol, s.String(), tt.want, tt.canonic)
			}
		})
	}
}
