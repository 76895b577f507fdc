package prober

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// testSecrets resolves secret names from a map.
type testSecrets map[string]string

func (s testSecrets) Password(_ context.Context, name string) (string, error) {
	pw, ok := s[name]
	if !ok {
		return "", fmt.Errorf("secret %q not found", name)
	}
	return pw, nil
}

// testGreeting builds a protocol 10 greeting as MySQL 5.7+ and MariaDB send it.
func testGreeting(version string, caps uint32, plugin string) []byte {
	b := []byte{10}
	b = append(b, version...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 42)
	b = append(b, "abcdefgh"...) // scramble part 1
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(caps))
	b = append(b, 33)   // character set
	b = append(b, 2, 0) // status
	b = binary.LittleEndian.AppendUint16(b, uint16(caps>>16))
	b = append(b, 21) // auth data length
	b = append(b, make([]byte, 10)...)
	b = append(b, "ijklmnopqrst"...) // scramble part 2
	b = append(b, 0)
	b = append(b, plugin...)
	return append(b, 0)
}

const testCaps = mysqlClientLongPassword | mysqlClientProtocol41 | mysqlClientTransactions |
	mysqlClientSecureConn | mysqlClientPluginAuth

// A greeting captured from MariaDB 10.11.19 (Debian 12).
var mariaDBGreeting = []byte("\n5.5.5-10.11.19-MariaDB-0+deb12u1\x00\t\x00\x00\x00g[tX8N`w\x00\xfe\xf7\x08\x02\x00\xff\x81\x15" +
	"\x00\x00\x00\x00\x00\x00\x1d\x00\x00\x00V+nlUA(CYsZa\x00mysql_native_password\x00")

func TestMySQLParseGreeting(t *testing.T) {
	valid := testGreeting("8.0.36", testCaps, "caching_sha2_password")
	noNUL := testGreeting("5.6.1", testCaps, "mysql_native_password")
	noNUL = noNUL[:len(noNUL)-1]
	tests := []struct {
		name        string
		in          []byte
		wantVersion string
		wantPlugin  string
		wantErr     string
		wantCode    uint16
	}{
		{name: "MariaDB", in: mariaDBGreeting, wantVersion: "5.5.5-10.11.19-MariaDB-0+deb12u1", wantPlugin: "mysql_native_password"},
		{name: "MySQL 8", in: valid, wantVersion: "8.0.36", wantPlugin: "caching_sha2_password"},
		{name: "plugin name ends with the packet", in: noNUL, wantVersion: "5.6.1", wantPlugin: "mysql_native_password"},
		{name: "control characters dropped", in: testGreeting("8.0\x1b[31m\n", testCaps, "x"), wantVersion: "8.0[31m", wantPlugin: "x"},
		{name: "empty", in: nil, wantErr: "empty greeting"},
		{name: "protocol 9", in: append([]byte{9}, valid[1:]...), wantErr: "unsupported protocol version 9"},
		{name: "text", in: []byte("SSH-2.0-OpenSSH_9.2\r\n"), wantErr: "unsupported protocol version 83"},
		{name: "unterminated version", in: []byte("\n8.0.36"), wantErr: "unterminated server version"},
		{name: "truncated after version", in: valid[:len("8.0.36")+2+10], wantErr: "truncated greeting"},
		{name: "truncated scramble", in: valid[:len(valid)-len("caching_sha2_password")-6], wantErr: "truncated greeting"},
		{name: "pre-4.1 server", in: testGreeting("4.0.1", testCaps&^mysqlClientProtocol41, ""), wantErr: "protocol 4.1"},
		{name: "ERR 1129 before handshake", in: append([]byte{0xff, 0x69, 0x04}, "Host '198.18.200.1' is blocked because of many connection errors"...), wantCode: 1129, wantErr: "mysql error 1129: Host '198.18.200.1' is blocked"},
		{name: "ERR 1040 before handshake", in: append([]byte{0xff, 0x10, 0x04}, "Too many connections"...), wantCode: 1040, wantErr: "mysql error 1040: Too many connections"},
		{name: "truncated ERR", in: []byte{0xff, 0x10}, wantErr: "truncated error packet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := parseMySQLGreeting(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				var se *mysqlServerError
				if got := errors.As(err, &se); got != (tt.wantCode != 0) || got && se.Code != tt.wantCode {
					t.Errorf("err = %#v, want server error code %d", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if g.Version != tt.wantVersion || g.AuthPlugin != tt.wantPlugin {
				t.Errorf("version %q plugin %q, want %q %q", g.Version, g.AuthPlugin, tt.wantVersion, tt.wantPlugin)
			}
			if len(g.AuthData) != 20 {
				t.Errorf("scramble is %d bytes, want 20", len(g.AuthData))
			}
		})
	}
}

// TestMySQLParseGreetingPrefixes checks that no truncation of a valid
// greeting is accepted: an accepted greeting is handed to the driver, which
// indexes into it without checking lengths.
func TestMySQLParseGreetingPrefixes(t *testing.T) {
	for _, full := range [][]byte{mariaDBGreeting, testGreeting("8.0.36", testCaps, "caching_sha2_password")} {
		g, err := parseMySQLGreeting(full)
		if err != nil {
			t.Fatal(err)
		}
		// The plugin name may end with the packet, so cuts inside it are fine.
		pluginStart := len(full) - len(g.AuthPlugin) - 1
		for i := range pluginStart {
			if _, err := parseMySQLGreeting(full[:i]); err == nil {
				t.Errorf("%s greeting cut to %d of %d bytes accepted", g.Version, i, len(full))
			}
		}
	}
}

func TestMySQLParseError(t *testing.T) {
	tests := []struct {
		name      string
		in        []byte
		wantCode  uint16
		wantState string
		wantMsg   string
	}{
		{"with SQL state", append([]byte{0xff, 0x15, 0x04}, "#28000Access denied for user 'x'@'y'"...), 1045, "28000", "Access denied for user 'x'@'y'"},
		{"without SQL state", append([]byte{0xff, 0x10, 0x04}, "Too many connections"...), 1040, "", "Too many connections"},
		{"hash but too short for a state", append([]byte{0xff, 0x10, 0x04}, "#080"...), 1040, "", "#080"},
		{"no message", []byte{0xff, 0x10, 0x04}, 1040, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := parseMySQLError(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if e.Code != tt.wantCode || e.State != tt.wantState || e.Message != tt.wantMsg {
				t.Errorf("got %+v, want code %d state %q message %q", e, tt.wantCode, tt.wantState, tt.wantMsg)
			}
		})
	}
	for _, in := range [][]byte{nil, {0xff}, {0xff, 1}, {0x00, 1, 2, 3}} {
		if _, err := parseMySQLError(in); err == nil {
			t.Errorf("parseMySQLError(%x) accepted", in)
		}
	}
}

func TestMySQLProduct(t *testing.T) {
	tests := []struct{ in, wantVersion, wantProduct string }{
		{"5.5.5-10.11.19-MariaDB-0+deb12u1", "10.11.19-MariaDB-0+deb12u1", "MariaDB 10.11.19"},
		{"11.4.2-MariaDB", "11.4.2-MariaDB", "MariaDB 11.4.2"},
		{"8.0.36", "8.0.36", "MySQL 8.0.36"},
		{"8.0.36-0ubuntu0.22.04.1", "8.0.36-0ubuntu0.22.04.1", "MySQL 8.0.36"},
		{"5.5.5-custom", "5.5.5-custom", "MySQL 5.5.5"},
		{"", "", "MySQL"},
	}
	for _, tt := range tests {
		if got := mysqlVersion(tt.in); got != tt.wantVersion {
			t.Errorf("mysqlVersion(%q) = %q, want %q", tt.in, got, tt.wantVersion)
		}
		if got := mysqlProduct(tt.in); got != tt.wantProduct {
			t.Errorf("mysqlProduct(%q) = %q, want %q", tt.in, got, tt.wantProduct)
		}
	}
}

func TestMySQLNew(t *testing.T) {
	tests := []struct {
		name    string
		spec    probespec.Spec
		wantErr bool
	}{
		{"no credentials", probespec.Spec{Protocol: probespec.MySQL}, false},
		{"user only", probespec.Spec{Protocol: probespec.MySQL, User: "u"}, false},
		{"user, secret and database", probespec.Spec{Protocol: probespec.MySQL, User: "u", Secret: "s", Database: "d"}, false},
		{"secret without user", probespec.Spec{Protocol: probespec.MySQL, Secret: "s"}, true},
		{"database without user", probespec.Spec{Protocol: probespec.MySQL, Database: "d"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.spec, Options{})
			if (err != nil) != tt.wantErr {
				t.Errorf("New() error = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

var testOKPacket = []byte{0x00, 0, 0, 2, 0, 0, 0}

// fakeLogin greets, reads the handshake response, and answers with replies
// in turn, each after reading the client's next packet.
func fakeLogin(replies ...[]byte) func(net.Conn) {
	return func(c net.Conn) {
		if writeMySQLPacket(c, 0, testGreeting("8.0.36-fake", testCaps, "mysql_native_password")) != nil {
			return
		}
		for _, reply := range replies {
			seq, _, err := readMySQLPacket(c)
			if err != nil {
				return
			}
			if writeMySQLPacket(c, seq+1, reply) != nil {
				return
			}
		}
		// Answer COM_PING until COM_QUIT or close.
		for {
			_, cmd, err := readMySQLPacket(c)
			if err != nil || len(cmd) == 0 || cmd[0] == mysqlComQuit {
				return
			}
			_ = writeMySQLPacket(c, 1, testOKPacket)
		}
	}
}

// fakeSilentAfterGreeting greets and then never answers.
func fakeSilentAfterGreeting(c net.Conn) {
	if writeMySQLPacket(c, 0, testGreeting("8.0.36", testCaps, "mysql_native_password")) == nil {
		_, _ = io.Copy(io.Discard, c)
	}
}

func TestMySQLFakeServer(t *testing.T) {
	denied := append([]byte{0xff, 0x15, 0x04}, "#28000Access denied for user"...)
	authSwitch := append([]byte{0xfe}, "caching_sha2_password\x00abcdefghijklmnopqrst\x00"...)
	blocked := append([]byte{0xff, 0x69, 0x04}, "Host '127.0.0.1' is blocked because of many connection errors"...)
	tooMany := append([]byte{0xff, 0x10, 0x04}, "Too many connections"...)
	const password = "s3cret-pw"
	anon := probespec.Spec{Protocol: probespec.MySQL}
	creds := probespec.Spec{Protocol: probespec.MySQL, User: "probe", Secret: "db"}

	tests := []struct {
		name       string
		spec       probespec.Spec
		handle     func(net.Conn)
		want       Outcome
		wantDetail string
		wantErr    string
	}{
		{"no greeting", anon, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }, L7TOUT, "", "waiting for greeting"},
		{"no greeting, with credentials", creds, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }, L7TOUT, "", "waiting for greeting"},
		{"closed without greeting", anon, func(net.Conn) {}, L7RSP, "", "EOF"},
		{"closed without greeting, with credentials", creds, func(net.Conn) {}, L7RSP, "", "EOF"},
		{"garbage", anon, func(c net.Conn) { _, _ = c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n")) }, L7RSP, "", "too large"},
		{"truncated greeting, with credentials", creds, func(c net.Conn) {
			_ = writeMySQLPacket(c, 0, testGreeting("8.0.36", testCaps, "mysql_native_password")[:20])
		}, L7RSP, "", "truncated greeting"},
		{"host blocked", anon, func(c net.Conn) { _ = writeMySQLPacket(c, 0, blocked) }, L7STS, "", "mysql error 1129: Host '127.0.0.1' is blocked"},
		{"host blocked, with credentials", creds, func(c net.Conn) { _ = writeMySQLPacket(c, 0, blocked) }, L7STS, "", "mysql error 1129"},
		{"too many connections", anon, func(c net.Conn) { _ = writeMySQLPacket(c, 0, tooMany) }, L7STS, "", "mysql error 1040: Too many connections"},
		{"access denied", anon, fakeLogin(denied), L7OK, "MySQL 8.0.36 (access denied as expected)", ""},
		{"access denied, with credentials", creds, fakeLogin(denied), L7STS, "", "mysql error 1045"},
		{"auth switch then access denied", anon, fakeLogin(authSwitch, denied), L7OK, "MySQL 8.0.36 (access denied as expected)", ""},
		{"user exists", anon, fakeLogin(testOKPacket), L7OK, "MySQL 8.0.36 (user pulselb_probe_nonexistent exists)", ""},
		{"authenticated", creds, fakeLogin(testOKPacket), L7OK, "MySQL 8.0.36 authenticated", ""},
		{"other error", anon, fakeLogin(append([]byte{0xff, 0x51, 0x04}, "#HY000Server shutdown in progress"...)), L7STS, "", "mysql error 1105"},
		{"no authentication result", anon, fakeSilentAfterGreeting, L7TOUT, "", "reading authentication result"},
		{"no authentication result, with credentials", creds, fakeSilentAfterGreeting, L7TOUT, "", "logging in"},
		{"closed after handshake response", anon, func(c net.Conn) {
			_ = writeMySQLPacket(c, 0, testGreeting("8.0.36", testCaps, "mysql_native_password"))
			_, _, _ = readMySQLPacket(c)
		}, L7RSP, "", "reading authentication result"},
		{"closed after handshake response, with credentials", creds, func(c net.Conn) {
			_ = writeMySQLPacket(c, 0, testGreeting("8.0.36", testCaps, "mysql_native_password"))
			_, _, _ = readMySQLPacket(c)
		}, L7RSP, "", "logging in"},
	}
	onLoopbacks(t, "tcp", func(t *testing.T, host string) {
		t.Parallel()
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				target := serveTCP(t, host, tt.handle)
				r := probeOnce(t, tt.spec, Options{Secrets: testSecrets{"db": password}}, target)
				checkMySQLResult(t, r, tt.want, tt.wantErr, password)
				if tt.wantDetail != "" && r.Detail != tt.wantDetail {
					t.Errorf("Detail = %q, want %q", r.Detail, tt.wantDetail)
				}
			})
		}
	})
}

// TestMySQLFakeServerHandshake checks what the credential-less probe sends:
// a well-formed HandshakeResponse41 for probeNoUser, an empty answer to an
// auth switch, and COM_QUIT after an unexpected OK.
func TestMySQLFakeServerHandshake(t *testing.T) {
	type packet struct {
		seq     byte
		payload []byte
	}
	got := make(chan packet, 10)
	target := serveTCP(t, "127.0.0.1", func(c net.Conn) {
		_ = writeMySQLPacket(c, 0, testGreeting("8.0.36", testCaps, "caching_sha2_password"))
		replies := [][]byte{append([]byte{0xfe}, "mysql_native_password\x00abcdefghijklmnopqrst\x00"...), testOKPacket}
		for i := 0; ; i++ {
			seq, payload, err := readMySQLPacket(c)
			if err != nil {
				close(got)
				return
			}
			got <- packet{seq, payload}
			if i < len(replies) {
				_ = writeMySQLPacket(c, seq+1, replies[i])
			}
		}
	})
	p, err := New(probespec.Spec{Protocol: probespec.MySQL}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if r := p.Probe(ctx, target); r.Outcome != L7OK {
		t.Fatalf("Outcome = %v (%v), want L7OK", r.Outcome, r.Err)
	}

	var packets []packet
	for pk := range got {
		packets = append(packets, pk)
	}
	if len(packets) != 3 {
		t.Fatalf("server got %d packets, want handshake response, switch answer, COM_QUIT: %v", len(packets), packets)
	}
	resp := packets[0]
	caps := binary.LittleEndian.Uint32(resp.payload)
	want := []byte(probeNoUser + "\x00\x00caching_sha2_password\x00")
	if resp.seq != 1 || caps&(mysqlClientProtocol41|mysqlClientSecureConn|mysqlClientPluginAuth) == 0 ||
		len(resp.payload) != 32+len(want) || string(resp.payload[32:]) != string(want) {
		t.Errorf("handshake response seq %d caps %#x payload %q", resp.seq, caps, resp.payload)
	}
	if sw := packets[1]; sw.seq != 3 || len(sw.payload) != 0 {
		t.Errorf("auth switch answer seq %d payload %q, want seq 3 and empty", sw.seq, sw.payload)
	}
	if quit := packets[2]; quit.seq != 0 || string(quit.payload) != "\x01" {
		t.Errorf("last packet seq %d payload %q, want COM_QUIT", quit.seq, quit.payload)
	}
}

func TestMySQLRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	for _, spec := range []probespec.Spec{{Protocol: probespec.MySQL}, {Protocol: probespec.MySQL, User: "u"}} {
		p, err := New(spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		r := p.Probe(ctx, target)
		cancel()
		checkMySQLResult(t, r, L4CON, "connecting", "")
	}
}

// checkMySQLResult checks that password appears nowhere in r, that Err is
// set exactly when the outcome is down, and then the outcome and wantErr
// as checkResult does.
func checkMySQLResult(t *testing.T, r Result, want Outcome, wantErr, password string) {
	t.Helper()
	t.Logf("%v: %s", r.Outcome, r.Message())
	if password != "" {
		all := fmt.Sprintf("%+v %q %q %q", r, r.Message(), r.Detail, r.ServerVersion)
		if r.Err != nil {
			all += r.Err.Error() + fmt.Sprintf("%#v", r.Err)
		}
		if strings.Contains(all, password) {
			t.Errorf("result contains the password: %s", all)
		}
	}
	if (r.Err != nil) == r.Up() {
		t.Errorf("Err = %v with outcome %v", r.Err, r.Outcome)
	}
	if r.Timings.Total <= 0 {
		t.Errorf("Timings.Total = %v", r.Timings.Total)
	}
	checkResult(t, r, want, wantErr)
}

// probeMySQL runs one probe of m with spec.
func probeMySQL(t *testing.T, m *mariaDB, spec probespec.Spec, opts Options) Result {
	t.Helper()
	spec.Protocol = probespec.MySQL
	p, err := New(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return p.Probe(ctx, m.Addr)
}

// greetingOnly connects, reads the greeting and hangs up: the check the
// prober must never do. It returns the server's ERR code instead of a
// greeting, or 0.
func greetingOnly(t *testing.T, m *mariaDB) uint16 {
	t.Helper()
	c, err := net.DialTimeout("tcp", m.Addr.String(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	_, payload, err := readMySQLPacket(c)
	if err != nil {
		t.Fatalf("reading greeting: %v", err)
	}
	var se *mysqlServerError
	if _, err := parseMySQLGreeting(payload); errors.As(err, &se) {
		return se.Code
	} else if err != nil {
		t.Fatalf("parsing greeting: %v", err)
	}
	return 0
}

func countLines(lines []string, substr string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// TestMySQLMariaDB probes a real MariaDB that blocks a host after 5 connect
// errors, from a non-loopback address so the host cache applies.
func TestMySQLMariaDB(t *testing.T) {
	m := startMariaDB(t, mariaDBOptions{MaxConnectErrors: 5})
	t.Logf("MariaDB %s at %s, probing from %s", m.Version, m.Addr, m.Client)
	m.exec(t,
		"CREATE DATABASE app",
		fmt.Sprintf("GRANT SELECT ON app.* TO '%s'@'%%'", m.ProbeUser),
		// With a grant on it, a missing database is 1049, not 1044.
		fmt.Sprintf("GRANT SELECT ON missing.* TO '%s'@'%%'", m.ProbeUser),
	)
	wrong := "wrong-" + randomHex(t, 8)
	secrets := Options{Secrets: testSecrets{"probe": m.ProbePassword, "wrong": wrong}}
	good := probespec.Spec{User: m.ProbeUser, Secret: "probe"}

	t.Run("cases", func(t *testing.T) {
		tests := []struct {
			name       string
			spec       probespec.Spec
			opts       Options
			want       Outcome
			wantDetail string
			wantErr    string
			wantIs     error
		}{
			{name: "alive without credentials", spec: probespec.Spec{}, opts: secrets, want: L7OK, wantDetail: "(access denied as expected)"},
			{name: "right password", spec: good, opts: secrets, want: L7OK, wantDetail: " authenticated"},
			{name: "right password and database", spec: probespec.Spec{User: m.ProbeUser, Secret: "probe", Database: "app"}, opts: secrets, want: L7OK, wantDetail: " authenticated"},
			{name: "wrong password", spec: probespec.Spec{User: m.ProbeUser, Secret: "wrong"}, opts: secrets, want: L7STS, wantErr: "mysql error 1045: Access denied"},
			{name: "unknown user", spec: probespec.Spec{User: "nobody", Secret: "probe"}, opts: secrets, want: L7STS, wantErr: "mysql error 1045"},
			{name: "unknown database", spec: probespec.Spec{User: m.ProbeUser, Secret: "probe", Database: "missing"}, opts: secrets, want: L7STS, wantErr: "mysql error 1049"},
			{name: "database without grant", spec: probespec.Spec{User: m.ProbeUser, Secret: "probe", Database: "mysql"}, opts: secrets, want: L7STS, wantErr: "mysql error 1044"},
			{name: "no secret source", spec: good, opts: Options{}, want: L7STS, wantIs: ErrNoSecrets},
			{name: "unknown secret", spec: probespec.Spec{User: m.ProbeUser, Secret: "nope"}, opts: secrets, want: L7STS, wantErr: `secret "nope" not found`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := probeMySQL(t, m, tt.spec, tt.opts)
				checkMySQLResult(t, r, tt.want, tt.wantErr, m.ProbePassword)
				checkMySQLResult(t, r, tt.want, tt.wantErr, wrong)
				if tt.wantIs != nil && !errors.Is(r.Err, tt.wantIs) {
					t.Errorf("Err = %v, want errors.Is %v", r.Err, tt.wantIs)
				}
				if !strings.Contains(r.Detail, tt.wantDetail) {
					t.Errorf("Detail = %q, want it to contain %q", r.Detail, tt.wantDetail)
				}
				if r.Up() {
					if !strings.Contains(r.ServerVersion, "MariaDB") || r.ServerVersion != m.Version {
						t.Errorf("ServerVersion = %q, want %q", r.ServerVersion, m.Version)
					}
					if !strings.HasPrefix(r.Detail, mysqlProduct(m.Version)+" ") {
						t.Errorf("Detail = %q, want it to start with %q", r.Detail, mysqlProduct(m.Version))
					}
					if r.Timings.Connect <= 0 || r.Timings.FirstByte < r.Timings.Connect || r.Timings.Total < r.Timings.FirstByte {
						t.Errorf("Timings = %+v", r.Timings)
					}
				}
			})
		}
	})

	t.Run("error log", func(t *testing.T) {
		m.waitIdle(t)
		off := m.logSize(t)
		for range 20 {
			if r := probeMySQL(t, m, good, secrets); r.Outcome != L7OK {
				t.Fatalf("Outcome = %v (%v)", r.Outcome, r.Err)
			}
		}
		m.waitIdle(t)
		lines := m.logLinesSince(t, off)
		if n := countLines(lines, "[Warning]") + countLines(lines, "Aborted connection"); n != 0 {
			t.Errorf("20 probes with credentials wrote %d warnings to the server log:\n%s", n, strings.Join(lines, "\n"))
		}

		// The trade-off the documentation states: without credentials,
		// each probe is one "Access denied" warning.
		off = m.logSize(t)
		for range 5 {
			if r := probeMySQL(t, m, probespec.Spec{}, Options{}); r.Outcome != L7OK {
				t.Fatalf("Outcome = %v (%v)", r.Outcome, r.Err)
			}
		}
		m.waitIdle(t)
		lines = m.logLinesSince(t, off)
		if n := countLines(lines, "Access denied for user '"+probeNoUser+"'"); n != 5 {
			t.Errorf("5 probes without credentials wrote %d Access denied warnings, want 5:\n%s", n, strings.Join(lines, "\n"))
		}
		if n := countLines(lines, "Aborted connection"); n != 0 {
			t.Errorf("probes without credentials wrote %d Aborted connection warnings:\n%s", n, strings.Join(lines, "\n"))
		}
	})

	// The regression test: a probe that hangs up after the greeting blocks
	// the probing host after max_connect_errors probes.
	t.Run("1000 probes without credentials never count toward max_connect_errors", func(t *testing.T) {
		const probes, workers = 1000, 4
		deniedBefore := m.status(t, "Access_denied_errors")
		start := time.Now()
		p, err := New(probespec.Spec{Protocol: probespec.MySQL}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		var mu sync.Mutex
		outcomes := map[Outcome]int{}
		var firstErr error
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range probes / workers {
					pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
					r := p.Probe(pctx, m.Addr)
					pcancel()
					mu.Lock()
					outcomes[r.Outcome]++
					if firstErr == nil && r.Err != nil {
						firstErr = r.Err
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("%d probes in %v: %v", probes, time.Since(start).Round(time.Millisecond), outcomes)
		if outcomes[L7OK] != probes {
			t.Errorf("outcomes %v, want %d L7OK; first error: %v", outcomes, probes, firstErr)
		}
		h, ok := m.hostCache(t)
		if !ok {
			t.Fatalf("no host_cache entry for %s: the test cannot see connect errors", m.Client)
		}
		t.Logf("host_cache for %s: %+v", m.Client, h)
		// A validated entry is what makes connect errors count at all.
		if h.Validated != "YES" {
			t.Errorf("host_cache %+v: want HOST_VALIDATED YES", h)
		}
		// Every probe finished authentication. (COUNT_AUTHENTICATION_ERRORS
		// counts only users that exist.)
		if denied := m.status(t, "Access_denied_errors") - deniedBefore; denied != probes {
			t.Errorf("Access_denied_errors grew by %d, want %d", denied, probes)
		}
		if h.SumConnectErrors != 0 || h.HandshakeErrors != 0 || h.HostBlockedErrors != 0 {
			t.Errorf("host_cache %+v: want no connect, handshake or blocked errors", h)
		}
		if r := probeMySQL(t, m, probespec.Spec{}, Options{}); r.Outcome != L7OK {
			t.Errorf("final probe: %v (%v), want L7OK", r.Outcome, r.Err)
		}
	})

	t.Run("host blocked", func(t *testing.T) {
		// What a greeting-only check does: after max_connect_errors of them
		// every client on this host is refused.
		blockedAfter := 0
		for i := 1; i <= 20 && blockedAfter == 0; i++ {
			switch code := greetingOnly(t, m); code {
			case 0:
			case 1129:
				blockedAfter = i - 1
			default:
				t.Fatalf("greeting-only connection %d: server error %d", i, code)
			}
		}
		if blockedAfter == 0 {
			t.Fatal("20 greeting-only connections did not get the host blocked")
		}
		t.Logf("host blocked after %d greeting-only connections", blockedAfter)
		for _, spec := range []probespec.Spec{{}, good} {
			r := probeMySQL(t, m, spec, secrets)
			checkMySQLResult(t, r, L7STS, "mysql error 1129: Host '"+m.Client.String()+"' is blocked", m.ProbePassword)
			if r.ServerVersion != "" {
				t.Errorf("ServerVersion = %q from a server that sent no greeting", r.ServerVersion)
			}
		}
		m.exec(t, "FLUSH HOSTS")
		if r := probeMySQL(t, m, probespec.Spec{}, Options{}); r.Outcome != L7OK {
			t.Errorf("after FLUSH HOSTS: %v (%v), want L7OK", r.Outcome, r.Err)
		}
	})

	t.Run("server stopped", func(t *testing.T) {
		m.stop(t)
		for _, spec := range []probespec.Spec{{}, good} {
			r := probeMySQL(t, m, spec, secrets)
			checkMySQLResult(t, r, L4CON, "connecting", m.ProbePassword)
		}
	})
}

// TestMySQLMariaDBTooManyConnections fills a real MariaDB's connection slots.
func TestMySQLMariaDBTooManyConnections(t *testing.T) {
	const maxConns = 10 // MariaDB's minimum
	m := startMariaDB(t, mariaDBOptions{MaxConnections: maxConns})
	secrets := Options{Secrets: testSecrets{"probe": m.ProbePassword}}
	good := probespec.Spec{User: m.ProbeUser, Secret: "probe"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Hold sessions as the probe user until the server says 1040; root's
	// own session counts too.
	got1040 := false
	for i := 0; i <= maxConns && !got1040; i++ {
		conn, db, err := m.connect(ctx, "tcp", m.Addr.String(), m.ProbeUser, m.ProbePassword)
		if err != nil {
			if !strings.Contains(err.Error(), "1040") {
				t.Fatalf("holding connection %d: %v", i, err)
			}
			got1040 = true
			break
		}
		t.Cleanup(func() {
			conn.Close()
			db.Close()
		})
	}
	if !got1040 {
		t.Fatalf("%d connections held without a 1040", maxConns+1)
	}

	// The ordinary slots are full. MariaDB checks them after authentication,
	// so a probe user sees 1040, while a credential-less probe is denied
	// access first and still finds the server alive.
	m.waitThreads(t, maxConns)
	r := probeMySQL(t, m, good, secrets)
	checkMySQLResult(t, r, L7STS, "mysql error 1040: Too many connections", m.ProbePassword)
	m.waitThreads(t, maxConns)
	if r := probeMySQL(t, m, probespec.Spec{}, Options{}); r.Outcome != L7OK {
		t.Errorf("credential-less probe with the ordinary slots full: %v (%v), want L7OK", r.Outcome, r.Err)
	}

	// Take the slot MariaDB keeps for administrators: now it refuses every
	// connection with an ERR packet in place of the greeting.
	m.waitThreads(t, maxConns)
	admin, adminDB, err := m.connect(ctx, "unix", m.Socket, "root", "")
	if err != nil {
		t.Fatalf("taking the extra administrator slot: %v", err)
	}
	defer adminDB.Close()
	defer admin.Close()
	for _, spec := range []probespec.Spec{{}, good} {
		r := probeMySQL(t, m, spec, secrets)
		checkMySQLResult(t, r, L7STS, "mysql error 1040: Too many connections", m.ProbePassword)
		if r.ServerVersion != "" {
			t.Errorf("ServerVersion = %q from a server that sent no greeting", r.ServerVersion)
		}
	}
}
