package prober

// The mysql prober checks MySQL and MariaDB servers in one of two ways.
//
// With user= (and usually secret=) it logs in with go-sql-driver/mysql,
// pings and closes the session with COM_QUIT, so a healthy server logs
// nothing at all.
//
// Without credentials it completes a full handshake as probeNoUser, a user
// that should not exist, and takes "Access denied" (1045) as proof of life.
// A finished authentication, even a failed one, never counts toward the
// server's max_connect_errors; connecting and hanging up after the greeting
// does, and after max_connect_errors of those the server answers 1129 "Host
// is blocked" to every client on the probing host. So the prober never does
// a greeting-only check. The price of a credential-less probe is one "Access
// denied" warning in the server's error log per probe (when log_warnings is
// 2 or more); operators who mind should create a probe user, which needs no
// grants:
//
//	CREATE USER 'pulselb'@'%' IDENTIFIED BY '...';

import (
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"

	"github.com/pulselb/pulselb/api/probespec"
)

// probeNoUser is the user a credential-less probe logs in as. The name is
// unlikely to exist; if someone creates it the probe still reports the
// server alive.
const probeNoUser = "pulselb_probe_nonexistent"

// Capability flags of the client/server protocol that the prober uses.
const (
	mysqlClientLongPassword = 1 << 0
	mysqlClientProtocol41   = 1 << 9
	mysqlClientTransactions = 1 << 13
	mysqlClientSecureConn   = 1 << 15
	mysqlClientPluginAuth   = 1 << 19
)

const (
	mysqlDefaultAuthPlugin = "mysql_native_password"
	mysqlErrAccessDenied   = 1045
	mysqlComQuit           = 0x01
	// mysqlMaxPacket bounds what the prober reads; handshake packets are
	// far smaller, and a text protocol's first bytes read as a huge length.
	mysqlMaxPacket = 64 << 10
	// mysqlMaxAuthRoundTrips bounds auth switches before giving up.
	mysqlMaxAuthRoundTrips = 4
	// mysqlMaxServerString bounds server-supplied text in a Result.
	mysqlMaxServerString = 200
)

// mysqlGreeting is the parts of a protocol 10 server greeting
// (Initial Handshake Packet) the prober uses.
type mysqlGreeting struct {
	Protocol     byte
	Version      string
	ConnectionID uint32
	Capabilities uint32
	AuthData     []byte
	AuthPlugin   string
}

// mysqlServerError is an ERR packet: what a server sends instead of a
// greeting when it refuses a connection (1040, 1129) or after a failed
// login.
type mysqlServerError struct {
	Code    uint16
	State   string
	Message string
}

func (e *mysqlServerError) Error() string {
	return fmt.Sprintf("mysql error %d: %s", e.Code, e.Message)
}

type mysqlProber struct {
	spec probespec.Spec
	opts Options
}

// newMySQL returns the mysql prober for spec.
//
// With spec.User set it authenticates through go-sql-driver/mysql with the
// password opts.Secrets resolves for spec.Secret, pings, and sends COM_QUIT:
// a clean login and logout that leaves no line in the server's log. Wrong
// credentials (1045) or an unknown database (1049) are L7STS, since the check
// was asked to log in and could not.
//
// Without spec.User it completes a full handshake as probeNoUser and takes
// "Access denied" as proof that the server is alive. Such probes never count
// toward max_connect_errors, but each one costs an "Access denied" warning
// in the server's error log when log_warnings is 2 or more. A dedicated
// probe user is recommended; it needs no grants:
//
//	CREATE USER 'pulselb'@'%' IDENTIFIED BY '...';
//
// In both modes an ERR packet in place of the greeting (1040 "Too many
// connections", 1129 "Host is blocked") is L7STS. Note that MariaDB and
// MySQL check the ordinary max_connections limit only after authentication,
// so a credential-less probe sees 1040 only once the extra slot reserved for
// administrators is taken as well; a probe user sees it as soon as ordinary
// users do.
func newMySQL(spec probespec.Spec, opts Options) (Prober, error) {
	if spec.User == "" && spec.Secret != "" {
		return nil, errors.New("secret= needs user=")
	}
	if spec.User == "" && spec.Database != "" {
		return nil, errors.New("database= needs user=")
	}
	return &mysqlProber{spec: spec, opts: opts}, nil
}

// Probe checks the server at target.
func (p *mysqlProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	probe := p.handshake
	if p.spec.User != "" {
		probe = p.login
	}
	return timed(ctx, func(ctx context.Context, start time.Time) Result {
		return probe(ctx, target, start)
	})
}

// open dials target and reads the server greeting, recording the timings
// and server version in r. On failure it sets r.Outcome and r.Err and
// returns a nil conn. raw is the greeting packet as received.
func (p *mysqlProber) open(ctx context.Context, target netip.AddrPort, start time.Time, r *Result) (conn net.Conn, g *mysqlGreeting, raw []byte) {
	nc := connect(ctx, "tcp", p.opts, target, start, r)
	if nc == nil {
		return nil, nil, nil
	}
	// Unblock the reads when ctx is cancelled before its deadline; past the
	// greeting the caller, or the driver, watches ctx.
	defer abortOnCancel(ctx, nc)()
	fail := func(o Outcome, err error) (net.Conn, *mysqlGreeting, []byte) {
		nc.Close()
		r.Outcome, r.Err = o, err
		return nil, nil, nil
	}

	var first [1]byte
	if _, err := io.ReadFull(nc, first[:]); err != nil {
		return fail(readOutcome(err), fmt.Errorf("waiting for greeting: %w", err))
	}
	r.Timings.FirstByte = time.Since(start)
	_, payload, err := readMySQLPacket(io.MultiReader(bytes.NewReader(first[:]), nc))
	if err != nil {
		return fail(readOutcome(err), fmt.Errorf("reading greeting: %w", err))
	}
	g, err = parseMySQLGreeting(payload)
	var se *mysqlServerError
	switch {
	case errors.As(err, &se):
		return fail(L7STS, se)
	case err != nil:
		return fail(L7RSP, fmt.Errorf("parsing greeting: %w", err))
	}
	r.ServerVersion = mysqlVersion(g.Version)
	raw = make([]byte, 4+len(payload))
	putMySQLHeader(raw, len(payload), 0)
	copy(raw[4:], payload)
	return nc, g, raw
}

// login authenticates with the configured credentials through the driver.
func (p *mysqlProber) login(ctx context.Context, target netip.AddrPort, start time.Time) Result {
	var r Result
	var password string
	if p.spec.Secret != "" {
		if p.opts.Secrets == nil {
			r.Outcome, r.Err = L7STS, fmt.Errorf("resolving secret %q: %w", p.spec.Secret, ErrNoSecrets)
			return r
		}
		pw, err := p.opts.Secrets.Password(ctx, p.spec.Secret)
		if err != nil {
			r.Outcome, r.Err = L7STS, fmt.Errorf("resolving secret %q: %w", p.spec.Secret, err)
			return r
		}
		password = pw
	}

	var conn *mysqlReplayConn
	var product string
	cfg := mysql.NewConfig()
	cfg.User = p.spec.User
	cfg.Passwd = password
	cfg.DBName = p.spec.Database
	cfg.Net = "tcp"
	cfg.Addr = target.String()
	// Probers never log, and the driver would otherwise print to stderr.
	cfg.Logger = &mysql.NopLogger{}
	// A non-zero value keeps the driver from querying max_allowed_packet.
	cfg.MaxAllowedPacket = mysqlMaxPacket
	cfg.CheckConnLiveness = false
	// The dial reads and validates the greeting itself, so the driver never
	// sees a malformed one and the probe keeps the version and timings of the
	// one connection it opens.
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
		nc, g, raw := p.open(ctx, target, start, &r)
		if nc == nil {
			return nil, r.Err
		}
		product = mysqlProduct(g.Version)
		conn = &mysqlReplayConn{Conn: nc, pending: raw}
		return conn, nil
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		r.Outcome, r.Err = L7RSP, fmt.Errorf("configuring driver: %w", err)
		return r
	}

	dc, err := connector.Connect(ctx)
	if err != nil {
		if r.Outcome != OutcomeUnknown { // open failed and said why
			return r
		}
		r.Outcome, r.Err = p.driverFailure(ctx, "logging in", conn, err)
		return r
	}
	// Close sends COM_QUIT, so the server ends the session without an
	// "Aborted connection" warning.
	defer dc.Close()
	if pinger, ok := dc.(driver.Pinger); ok {
		if err := pinger.Ping(ctx); err != nil {
			r.Outcome, r.Err = p.driverFailure(ctx, "pinging", conn, err)
			return r
		}
	}
	r.Outcome, r.Detail = L7OK, product+" authenticated"
	return r
}

// driverFailure classifies an error from the driver after the greeting.
func (p *mysqlProber) driverFailure(ctx context.Context, what string, conn *mysqlReplayConn, err error) (Outcome, error) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		se := &mysqlServerError{Code: me.Number, Message: printable(me.Message)}
		if me.SQLState != [5]byte{} {
			se.State = string(me.SQLState[:])
		}
		return L7STS, se
	}
	// At the deadline the driver closes the connection itself, so what the
	// connection saw would read "use of closed network connection".
	if ctx.Err() != nil {
		return L7TOUT, fmt.Errorf("%s as %q: %w", what, p.spec.User, ctx.Err())
	}
	// The driver reports a broken connection as ErrInvalidConn; the cause
	// is what the connection saw.
	if conn != nil && conn.err != nil {
		return readOutcome(conn.err), fmt.Errorf("%s as %q: %w", what, p.spec.User, conn.err)
	}
	return L7RSP, fmt.Errorf("%s as %q: %w", what, p.spec.User, err)
}

// handshake authenticates as probeNoUser with an empty password and takes
// "Access denied" as proof of life.
func (p *mysqlProber) handshake(ctx context.Context, target netip.AddrPort, start time.Time) Result {
	var r Result
	conn, g, _ := p.open(ctx, target, start, &r)
	if conn == nil {
		return r
	}
	defer conn.Close()
	// Unblock the reads when ctx is cancelled before its deadline.
	defer abortOnCancel(ctx, conn)()
	product := mysqlProduct(g.Version)

	fail := func(o Outcome, err error) Result {
		r.Outcome, r.Err = o, err
		return r
	}
	if g.Capabilities&mysqlClientProtocol41 == 0 || g.Capabilities&mysqlClientSecureConn == 0 {
		return fail(L7RSP, errors.New("server does not support protocol 4.1 authentication"))
	}
	seq := byte(1)
	if err := writeMySQLPacket(conn, seq, mysqlHandshakeResponse(g, probeNoUser)); err != nil {
		return fail(readOutcome(err), fmt.Errorf("sending handshake response: %w", err))
	}
	for range mysqlMaxAuthRoundTrips {
		s, payload, err := readMySQLPacket(conn)
		if err != nil {
			return fail(readOutcome(err), fmt.Errorf("reading authentication result: %w", err))
		}
		seq = s
		if len(payload) == 0 {
			return fail(L7RSP, errors.New("empty authentication result"))
		}
		switch payload[0] {
		case 0x00: // OK: someone created the user; log out cleanly.
			_ = writeMySQLPacket(conn, 0, []byte{mysqlComQuit})
			r.Outcome, r.Detail = L7OK, fmt.Sprintf("%s (user %s exists)", product, probeNoUser)
			return r
		case 0xff:
			// The server closes the connection after an ERR, so there is no
			// COM_QUIT to send.
			se, err := parseMySQLError(payload)
			if err != nil {
				return fail(L7RSP, fmt.Errorf("parsing authentication result: %w", err))
			}
			if se.Code == mysqlErrAccessDenied {
				r.Outcome, r.Detail = L7OK, product+" (access denied as expected)"
				return r
			}
			return fail(L7STS, se)
		case 0xfe:
			// AuthSwitchRequest: whatever the method, an empty password's
			// answer is empty; a malformed answer would be a handshake error,
			// which counts toward max_connect_errors.
			if err := writeMySQLPacket(conn, seq+1, nil); err != nil {
				return fail(readOutcome(err), fmt.Errorf("answering auth switch: %w", err))
			}
		default:
			return fail(L7RSP, fmt.Errorf("unexpected authentication packet 0x%02x", payload[0]))
		}
	}
	return fail(L7RSP, errors.New("too many authentication round trips"))
}

// mysqlHandshakeResponse builds a HandshakeResponse41 for user with an
// empty password, announcing the server's own authentication method so the
// server has no reason to switch. An empty password because its answer is
// empty under every method: a scramble of the wrong length for the method
// is a handshake error, which counts toward max_connect_errors.
func mysqlHandshakeResponse(g *mysqlGreeting, user string) []byte {
	caps := uint32(mysqlClientLongPassword | mysqlClientProtocol41 | mysqlClientTransactions | mysqlClientSecureConn)
	plugin := ""
	if g.Capabilities&mysqlClientPluginAuth != 0 {
		caps |= mysqlClientPluginAuth
		plugin = g.AuthPlugin
		if plugin == "" {
			plugin = mysqlDefaultAuthPlugin
		}
	}
	b := binary.LittleEndian.AppendUint32(nil, caps)
	b = binary.LittleEndian.AppendUint32(b, 1<<24-1) // max packet size
	b = append(b, 33)                                // utf8_general_ci
	b = append(b, make([]byte, 23)...)
	b = append(b, user...)
	b = append(b, 0)
	b = append(b, 0) // auth response length: empty password
	if caps&mysqlClientPluginAuth != 0 {
		b = append(b, plugin...)
		b = append(b, 0)
	}
	return b
}

// readMySQLPacket reads one packet of the client/server protocol.
func readMySQLPacket(r io.Reader) (seq byte, payload []byte, err error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	if n > mysqlMaxPacket {
		return 0, nil, fmt.Errorf("packet of %d bytes is too large for a handshake", n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h[3], payload, nil
}

// writeMySQLPacket writes payload as one packet with sequence number seq.
func writeMySQLPacket(w io.Writer, seq byte, payload []byte) error {
	b := make([]byte, 4+len(payload))
	putMySQLHeader(b, len(payload), seq)
	copy(b[4:], payload)
	_, err := w.Write(b)
	return err
}

func putMySQLHeader(b []byte, n int, seq byte) {
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), seq
}

// parseMySQLGreeting parses a server greeting. An ERR packet in its place
// is returned as a *mysqlServerError. Only complete protocol 4.1 greetings
// are accepted, so whatever is accepted is also safe to hand to the driver.
func parseMySQLGreeting(b []byte) (*mysqlGreeting, error) {
	if len(b) == 0 {
		return nil, errors.New("empty greeting")
	}
	if b[0] == 0xff {
		return nil, errOrServerError(parseMySQLError(b))
	}
	if b[0] != 10 {
		return nil, fmt.Errorf("unsupported protocol version %d", b[0])
	}
	g := &mysqlGreeting{Protocol: b[0]}
	end := indexZero(b, 1)
	if end < 0 {
		return nil, errors.New("truncated greeting: unterminated server version")
	}
	g.Version = printable(string(b[1:end]))
	p := b[end+1:]
	// connection id 4, auth data part 1 8, filler 1, capabilities 2,
	// character set 1, status 2, capabilities 2, auth data length 1,
	// reserved 10.
	const fixed = 4 + 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10
	if len(p) < fixed {
		return nil, fmt.Errorf("truncated greeting: %d bytes after the version, want at least %d", len(p), fixed)
	}
	g.ConnectionID = binary.LittleEndian.Uint32(p)
	g.AuthData = append([]byte(nil), p[4:12]...)
	g.Capabilities = uint32(binary.LittleEndian.Uint16(p[13:])) | uint32(binary.LittleEndian.Uint16(p[18:]))<<16
	if g.Capabilities&mysqlClientProtocol41 == 0 {
		return nil, errors.New("server does not support protocol 4.1")
	}
	authLen := int(p[20])
	p = p[fixed:]
	if g.Capabilities&mysqlClientSecureConn != 0 {
		n := max(13, authLen-8)
		if len(p) < n {
			return nil, fmt.Errorf("truncated greeting: %d bytes of scramble, want %d", len(p), n)
		}
		g.AuthData = append(g.AuthData, p[:n-1]...) // the last byte is a NUL
		p = p[n:]
	}
	if g.Capabilities&mysqlClientPluginAuth != 0 {
		// Some 5.5 and 5.6 servers end the name with the packet, not a NUL.
		if end := indexZero(p, 0); end >= 0 {
			p = p[:end]
		}
		g.AuthPlugin = printable(string(p))
	}
	return g, nil
}

// parseMySQLError parses an ERR packet. Before the handshake the server does
// not know the client speaks protocol 4.1 and leaves out the SQL state.
func parseMySQLError(b []byte) (*mysqlServerError, error) {
	if len(b) < 3 || b[0] != 0xff {
		return nil, errors.New("truncated error packet")
	}
	e := &mysqlServerError{Code: binary.LittleEndian.Uint16(b[1:])}
	msg := b[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		e.State, msg = string(msg[1:6]), msg[6:]
	}
	e.Message = printable(string(msg))
	return e, nil
}

func errOrServerError(e *mysqlServerError, err error) error {
	if err != nil {
		return err
	}
	return e
}

func indexZero(b []byte, from int) int {
	if i := bytes.IndexByte(b[from:], 0); i >= 0 {
		return from + i
	}
	return -1
}

// printable makes a server-supplied string safe for status reports: control
// and invalid characters dropped, length bounded.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > mysqlMaxServerString {
		s = strings.ToValidUTF8(s[:mysqlMaxServerString], "")
	}
	return s
}

// mysqlVersion drops the "5.5.5-" that MariaDB puts in front of its version
// for the sake of old replication clients.
func mysqlVersion(v string) string {
	if rest, ok := strings.CutPrefix(v, "5.5.5-"); ok && strings.Contains(rest, "MariaDB") {
		return rest
	}
	return v
}

// mysqlProduct names the server for Detail, as in "MariaDB 10.11.6".
func mysqlProduct(version string) string {
	v := mysqlVersion(version)
	name := "MySQL"
	if strings.Contains(v, "MariaDB") {
		name = "MariaDB"
	}
	if i := strings.IndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	if v == "" {
		return name
	}
	return name + " " + v
}

// mysqlReplayConn hands the driver the greeting the prober already read,
// then the rest of the connection, and remembers the first error the
// connection saw so a failure can be classified by its cause.
type mysqlReplayConn struct {
	net.Conn
	pending []byte
	err     error
}

func (c *mysqlReplayConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(b)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

func (c *mysqlReplayConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}
