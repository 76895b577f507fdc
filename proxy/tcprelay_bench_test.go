package proxy

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"
)

// headerEcho reads a PROXY protocol header, as a backend configured for one
// does, then echoes until the client's FIN.
func headerEcho(c *net.TCPConn) {
	r := bufio.NewReader(c)
	if _, err := proxyproto.Read(r); err != nil {
		return
	}
	_, _ = io.Copy(c, r)
	_ = c.CloseWrite()
}

// benchRelay starts a userspace relay on loopback in front of an echo
// backend, with header v (HeaderNone for none), and returns the relayed
// address.
func benchRelay(b *testing.B, v HeaderVersion) netip.AddrPort {
	b.Helper()
	backend := echo
	if v != HeaderNone {
		backend = headerEcho
	}
	port := tcpBackend(b, backend)
	cfg := userspaceConfig(Port{TCP, port})
	// Clients dial from the loopback address the kernel picks: binding a
	// source address first (dialFrom) makes each bind search the ports held
	// by earlier connections' TIME_WAIT, which soon costs more than the relay.
	cfg.SourceRanges = SourceRanges{netip.MustParsePrefix("127.0.0.0/8")}
	if v != HeaderNone {
		cfg.ProxyProtocol = map[Port]HeaderVersion{{TCP, port}: v}
	}
	startProxy(b, cfg)
	return netip.AddrPortFrom(proxyAddr, port)
}

// BenchmarkTCPRelayConnection measures the relay's per-connection path:
// each operation opens a connection through the relay, sends one byte,
// reads its echo and closes, as the connections-per-second case of
// test/bench/proxy does.
func BenchmarkTCPRelayConnection(b *testing.B) {
	for _, v := range []HeaderVersion{HeaderNone, HeaderV1, HeaderV2} {
		b.Run("header="+v.String(), func(b *testing.B) {
			target := benchRelay(b, v)
			buf := []byte{1}
			b.ReportAllocs()
			for b.Loop() {
				oneByteConnection(b, target, buf)
			}
		})
	}
}

// BenchmarkTCPRelayRoundTrip measures a 1-byte request and its answer over
// one relayed connection.
func BenchmarkTCPRelayRoundTrip(b *testing.B) {
	for _, v := range []HeaderVersion{HeaderNone, HeaderV2} {
		b.Run("header="+v.String(), func(b *testing.B) {
			c, err := dial(benchRelay(b, v))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := []byte{1}
			for b.Loop() {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDirectConnection(b *testing.B) {
	target := netip.AddrPortFrom(clusterIP, tcpBackend(b, echo))
	buf := []byte{1}
	for b.Loop() {
		oneByteConnection(b, target, buf)
	}
}

// oneByteConnection opens a connection to target, sends buf's byte, reads
// the echo back into buf and closes.
func oneByteConnection(b *testing.B, target netip.AddrPort, buf []byte) {
	c, err := dial(target)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(buf); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
}

func dial(target netip.AddrPort) (*net.TCPConn, error) {
	return net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(target))
}
