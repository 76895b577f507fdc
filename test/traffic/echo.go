package traffic

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// EchoConn is a long-lived TCP connection to an echo backend (the
// harness' pulselb-echo echoes what is not HTTP or TLS), for checking that
// a connection open across a change survives it.
type EchoConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// DialEcho connects to addr, from inside run (see Options.Run; nil: in
// place), and checks one exchange.
func DialEcho(ctx context.Context, run func(func() error) error, addr netip.AddrPort) (*EchoConn, error) {
	if run == nil {
		run = func(f func() error) error { return f() }
	}
	var conn net.Conn
	err := run(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	e := &EchoConn{conn: conn, r: bufio.NewReader(conn)}
	if err := e.Exchange("hello", 2*time.Second); err != nil {
		conn.Close()
		return nil, err
	}
	return e, nil
}

// Exchange sends msg and a newline and wants it echoed within timeout.
func (e *EchoConn) Exchange(msg string, timeout time.Duration) error {
	_ = e.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(e.conn, "%s\n", msg); err != nil {
		return fmt.Errorf("sending on %s: %w", e.conn.RemoteAddr(), err)
	}
	line, err := e.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the echo on %s: %w", e.conn.RemoteAddr(), err)
	}
	if line != msg+"\n" {
		return fmt.Errorf("echo on %s = %q, want %q", e.conn.RemoteAddr(), line, msg+"\n")
	}
	return nil
}

// Close closes the connection.
func (e *EchoConn) Close() error { return e.conn.Close() }
