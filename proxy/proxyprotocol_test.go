package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
)

// specV2Signature opens every version 2 header (proxy-protocol.txt, 2.2).
var specV2Signature = []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

// TestClientHeader checks the header the relay writes against the
// specification: version 1's examples (section 2.1: "PROXY TCP4
// 192.168.0.1 192.168.0.11 56324 443", and its longest line, all TCP6
// ffff), and version 2's layout (section 2.2: signature, 0x21 for version
// 2 PROXY, 0x11 TCP over IPv4 or 0x21 TCP over IPv6, the address block's
// length, source and destination addresses, then source and destination
// ports, all in network byte order).
func TestClientHeader(t *testing.T) {
	ffff := "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"
	v2 := func(famProto byte, length uint16, block ...byte) []byte {
		out := append(append([]byte{}, specV2Signature...), 0x21, famProto, byte(length>>8), byte(length))
		return append(out, block...)
	}
	tests := []struct {
		name          string
		v             HeaderVersion
		client, local string
		want          []byte
	}{
		{"v1 IPv4, the specification's example", HeaderV1, "192.168.0.1:56324", "192.168.0.11:443",
			[]byte("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n")},
		{"v1 IPv6, the specification's longest line", HeaderV1, ffff, ffff,
			[]byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n")},
		{"v1 IPv6 documentation addresses", HeaderV1, "[2001:db8::1]:40000", "[2001:db8::2]:80",
			[]byte("PROXY TCP6 2001:db8::1 2001:db8::2 40000 80\r\n")},
		{"v2 IPv4", HeaderV2, "192.168.0.1:56324", "192.168.0.11:443",
			v2(0x11, 12, 192, 168, 0, 1, 192, 168, 0, 11, 0xDC, 0x04, 0x01, 0xBB)},
		{"v2 IPv6", HeaderV2, "[2001:db8::1]:40000", "[2001:db8::2]:80",
			v2(0x21, 36,
				0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
				0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
				0x9C, 0x40, 0x00, 0x50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := clientHeader(tt.v, netip.MustParseAddrPort(tt.client), netip.MustParseAddrPort(tt.local))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("header\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestClientHeaderReadsBack checks the header against go-proxyproto, the
// parser servers written in Go use: for addresses of both families and the
// edges of the port range, the parser reads back the client and the local
// address, and the header is no longer than maxHeaderLen.
func TestClientHeaderReadsBack(t *testing.T) {
	addrs := []struct{ client, local string }{
		{"192.0.2.1:1", "198.51.100.7:65535"},
		{"10.0.0.255:65535", "10.0.0.1:80"},
		{"[2001:db8::1]:40000", "[2001:db8:ffff::2]:443"},
		{"[::1]:2", "[fe80::1]:1"},
		{"[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"},
	}
	for _, v := range []HeaderVersion{HeaderV1, HeaderV2} {
		for _, a := range addrs {
			client, local := netip.MustParseAddrPort(a.client), netip.MustParseAddrPort(a.local)
			h, err := appendHeader([]byte("prefix"), v, client, local)
			if err != nil {
				t.Fatalf("%v %v → %v: %v", v, client, local, err)
			}
			if string(h[:6]) != "prefix" {
				t.Fatalf("%v %v → %v: the header overwrote what it was appended to: %q", v, client, local, h)
			}
			h = h[6:]
			if len(h) > maxHeaderLen {
				t.Errorf("%v %v → %v: %d bytes, more than maxHeaderLen %d", v, client, local, len(h), maxHeaderLen)
			}
			got, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(append(h, "data"...))))
			if err != nil {
				t.Fatalf("%v %v → %v: go-proxyproto cannot read %q: %v", v, client, local, h, err)
			}
			src, dst, ok := got.TCPAddrs()
			if got.Version != byte(v) || !got.Command.IsProxy() || !ok || src.AddrPort() != client || dst.AddrPort() != local {
				t.Errorf("%v %v → %v: go-proxyproto reads version %d %v → %v", v, client, local, got.Version, src, dst)
			}
		}
	}
	if _, err := clientHeader(HeaderNone, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2")); err == nil {
		t.Error("a header with no version: no error")
	}
	if _, err := clientHeader(HeaderV2, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.2:2")); err == nil {
		t.Error("a header with no client address: no error")
	}
}

func TestParseProxyProtocol(t *testing.T) {
	tests := []struct {
		in     string
		want   map[Port]HeaderVersion
		errHas string
	}{
		{"", nil, ""},
		{"TCP:443=v2, tcp:25=v1", map[Port]HeaderVersion{{TCP, 443}: HeaderV2, {TCP, 25}: HeaderV1}, ""},
		{"TCP:443", nil, `proxy-protocol port "TCP:443": want PROTOCOL:PORT=VERSION`},
		{"TCP:443=v3", nil, `version "v3": want v1 or v2`},
		{"UDP:53=v2", nil, "the PROXY protocol is for TCP ports only"},
		{"TCP:0=v2", nil, `"0" is not a number from 1 to 65535`},
		{"TCP:443=v2,TCP:443=v1", nil, "TCP:443 listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseProxyProtocol(tt.in)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestNewChecksProxyProtocol(t *testing.T) {
	base := Config{ClusterIPs: []netip.Addr{netip.MustParseAddr("198.19.0.10")}, Ports: []Port{{TCP, 80}, {UDP, 53}}}
	for _, tt := range []struct {
		name   string
		pp     map[Port]HeaderVersion
		errHas string
	}{
		{"a port of the list", map[Port]HeaderVersion{{TCP, 80}: HeaderV2}, ""},
		{"not one of the ports", map[Port]HeaderVersion{{TCP, 81}: HeaderV2}, "TCP:81 is not one of the ports"},
		{"a UDP port", map[Port]HeaderVersion{{UDP, 53}: HeaderV1}, "UDP:53 is not a TCP port"},
		{"no version", map[Port]HeaderVersion{{TCP, 80}: HeaderNone}, "TCP:80 has no version"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.ClusterIPs = append([]netip.Addr(nil), base.ClusterIPs...)
			cfg.ProxyProtocol = tt.pp
			_, err := New(cfg, nil)
			if tt.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrProxyProtocol) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("error %v, want ErrProxyProtocol containing %q", err, tt.errHas)
			}
		})
	}
}

// TestUserspaceProxyProtocol relays on loopback, without root: the backend
// of a header port reads (with go-proxyproto, as servers do) the client's
// own address and port and the address it connected to, before the
// client's bytes; the backend of the other port gets the bytes alone.
func TestUserspaceProxyProtocol(t *testing.T) {
	type seen struct {
		header *proxyproto.Header
		data   string
		err    error
	}
	got := make(chan seen, 2)
	backend := func(c *net.TCPConn) {
		r := bufio.NewReader(c)
		var s seen
		if b, _ := r.Peek(1); len(b) == 1 && (b[0] == 'P' || b[0] == '\r') {
			s.header, s.err = proxyproto.Read(r)
		}
		line, err := r.ReadString('\n')
		s.data = line
		if s.err == nil {
			s.err = err
		}
		got <- s
		_, _ = io.WriteString(c, "ok\n")
	}
	ppPort, plainPort := tcpBackend(t, backend), tcpBackend(t, backend)
	for _, v := range []HeaderVersion{HeaderV1, HeaderV2} {
		t.Run(v.String(), func(t *testing.T) {
			cfg := userspaceConfig(Port{TCP, ppPort}, Port{TCP, plainPort})
			cfg.ProxyProtocol = map[Port]HeaderVersion{{TCP, ppPort}: v}
			startProxy(t, cfg)
			for _, port := range []uint16{ppPort, plainPort} {
				c, err := dialFrom(allowedAddr, netip.AddrPortFrom(proxyAddr, port))
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c, "hello\n"); err != nil {
					t.Fatal(err)
				}
				answer, _ := bufio.NewReader(c).ReadString('\n')
				client := tcpAddrPort(c.LocalAddr())
				c.Close()
				s := <-got
				if s.err != nil || s.data != "hello\n" || answer != "ok\n" {
					t.Fatalf("port %d: backend read %q (%v), client got %q", port, s.data, s.err, answer)
				}
				if port == plainPort {
					if s.header != nil {
						t.Errorf("port %d without the option sent a header: %+v", port, s.header)
					}
					continue
				}
				if s.header == nil || s.header.Version != byte(v) || !s.header.Command.IsProxy() {
					t.Fatalf("port %d: header %+v, want a version %d PROXY header", port, s.header, v)
				}
				src, dst, ok := s.header.TCPAddrs()
				if !ok || src.AddrPort() != client || dst.AddrPort() != netip.AddrPortFrom(proxyAddr, port) {
					t.Errorf("header says %v → %v, want the client %v → %v", src, dst, client, netip.AddrPortFrom(proxyAddr, port))
				}
			}
		})
	}
}

// TestProxyProtocolHeaderWithFirstBytes checks that the header and what the
// client sent before the backend's connection was up reach the backend in
// one segment, and that a backend that speaks first is not kept waiting
// for a client that sends nothing.
func TestProxyProtocolHeaderWithFirstBytes(t *testing.T) {
	const request = "GET / HTTP/1.1\r\nHost: example.org\r\n\r\n"
	type seen struct {
		data     string
		segments uint32 // data segments the backend received
		err      error
	}
	got := make(chan seen, 1)
	port := tcpBackend(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(c)
		var s seen
		if _, s.err = proxyproto.Read(r); s.err == nil {
			buf := make([]byte, len(request))
			_, s.err = io.ReadFull(r, buf)
			s.data = string(buf)
		}
		raw, err := c.SyscallConn()
		var ierr error
		if err == nil {
			err = raw.Control(func(fd uintptr) {
				var info *unix.TCPInfo
				if info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); ierr == nil {
					s.segments = info.Data_segs_in
				}
			})
		}
		if s.err == nil {
			s.err = errors.Join(err, ierr)
		}
		got <- s
	})
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(proxyAddr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRelay{
		ln: ln, port: Port{TCP, port}, header: HeaderV2,
		backend:     func(netip.Addr) netip.AddrPort { return netip.AddrPortFrom(clusterIP, port) },
		dialTimeout: time.Second, metrics: NewMetrics(), conns: map[*net.TCPConn]*relayedConn{}, served: make(chan struct{}),
	}
	// The client's request is in the relay's socket before the relay
	// accepts it, as it is when the backend's handshake takes longer than
	// the client's first write.
	c, err := dialFrom(allowedAddr, tcpAddrPort(ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	go r.serve(ctx)
	defer r.shutdown(time.Second)
	s := <-got
	c.Close()
	if s.err != nil || s.data != request {
		t.Fatalf("backend read %q, %v; want the request after the header", s.data, s.err)
	}
	if s.segments != 1 {
		t.Errorf("the header and the request came in %d segments, want 1", s.segments)
	}

	// A backend that greets first, as SMTP and MySQL servers do.
	greeting := tcpBackend(t, func(c *net.TCPConn) {
		if _, err := proxyproto.Read(bufio.NewReader(c)); err == nil {
			_, _ = io.WriteString(c, "220 ready\r\n")
		}
	})
	cfg := userspaceConfig(Port{TCP, greeting})
	cfg.ProxyProtocol = map[Port]HeaderVersion{{TCP, greeting}: HeaderV2}
	startProxy(t, cfg)
	quiet, err := dialFrom(allowedAddr, netip.AddrPortFrom(proxyAddr, greeting))
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	_ = quiet.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(quiet).ReadString('\n')
	if err != nil || line != "220 ready\r\n" {
		t.Errorf("a client that sends nothing got %q, %v; want the backend's greeting", line, err)
	}
}
