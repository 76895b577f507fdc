package dnsexport

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenUDP opens n UDP sockets on addr with SO_REUSEPORT, so the kernel
// spreads queries over n reading goroutines.
func listenUDP(addr string, n int) ([]*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	var conns []*net.UDPConn
	for range max(n, 1) {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("listening on udp %s: %w", addr, err)
		}
		c := pc.(*net.UDPConn)
		// A larger receive buffer absorbs bursts; the kernel caps it at
		// net.core.rmem_max, and a failure only leaves the default.
		_ = c.SetReadBuffer(1 << 20)
		conns = append(conns, c)
	}
	return conns, nil
}
