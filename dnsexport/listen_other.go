//go:build !linux

package dnsexport

import (
	"fmt"
	"net"
)

// listenUDP opens one UDP socket on addr; n is ignored without SO_REUSEPORT.
func listenUDP(addr string, n int) ([]*net.UDPConn, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on udp %s: %w", addr, err)
	}
	return []*net.UDPConn{pc.(*net.UDPConn)}, nil
}
