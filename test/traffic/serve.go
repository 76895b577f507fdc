package traffic

import "net"

// Serve hands each connection ln accepts to handle, in a goroutine of its
// own, and closes the connection when handle returns, until ln is closed.
// A nil handle closes each connection at once: a port that only accepts,
// as a TCP probe or a connect test needs.
func Serve(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if handle != nil {
				handle(c)
			}
		}()
	}
}
