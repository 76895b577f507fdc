package prober

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mariaDBOptions tune the server startMariaDB runs; zero means MariaDB's default.
type mariaDBOptions struct {
	MaxConnectErrors int
	// MaxConnections cannot go below 10: MariaDB raises smaller values.
	MaxConnections int
}

// mariaDB is a MariaDB server running in its own network namespace, so
// that it sees the test's probes coming from a non-loopback address:
// MariaDB keeps no host cache, and so never counts connect errors or blocks,
// for loopback clients.
type mariaDB struct {
	// Addr is where the server listens (inside the namespace).
	Addr netip.AddrPort
	// Client is the address the server sees the test's connections come from.
	Client netip.Addr
	// Socket is the unix socket root logs in through.
	Socket string
	// ErrorLog is the server's error log.
	ErrorLog string
	// Version is SELECT VERSION().
	Version string
	// ProbeUser and ProbePassword are a user with no grants, as the mysql
	// prober's documentation recommends.
	ProbeUser, ProbePassword string

	root   *sql.DB
	cmd    *exec.Cmd
	exited chan struct{}
	stopMu sync.Mutex
}

// mariaDBSeq numbers the servers of this test binary; server n gets the
// /30 at 198.18.200.4n, so up to 64 can run at once.
var mariaDBSeq atomic.Int32

// requireMariaDB skips the test, with the reason, when a real MariaDB cannot
// be run here. CI installs MariaDB and runs tests as root, so there (CI=true)
// a missing piece fails the test instead: the MariaDB tests must never
// silently stop running.
func requireMariaDB(t *testing.T) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"mariadbd", "mariadb-install-db", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			// Debian puts mariadbd in /usr/sbin, which may not be on PATH;
			// startMariaDB adds it.
			_, serr := os.Stat(filepath.Join("/usr/sbin", bin))
			_, berr := os.Stat(filepath.Join("/usr/bin", bin))
			if serr != nil && berr != nil {
				missing = append(missing, bin)
			}
		}
	}
	var reason string
	switch {
	case len(missing) > 0:
		reason = fmt.Sprintf("%s not installed (apt-get install mariadb-server iproute2)", strings.Join(missing, ", "))
	case os.Geteuid() != 0:
		reason = "not root: the MariaDB tests need a network namespace"
	default:
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but cannot run MariaDB: %s", reason)
	}
	t.Skipf("skipping the real-MariaDB test: %s", reason)
}

// startMariaDB starts a fresh MariaDB in a new network namespace connected
// to the test's namespace by a veth pair, creates a probe user with a
// random password, and stops and removes everything when the test ends.
func startMariaDB(t *testing.T, opts mariaDBOptions) *mariaDB {
	t.Helper()
	requireMariaDB(t)
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if !strings.Contains(":"+os.Getenv("PATH")+":", ":"+dir+":") {
			t.Setenv("PATH", os.Getenv("PATH")+":"+dir)
		}
	}
	n := int(mariaDBSeq.Add(1) - 1)
	if n >= 64 {
		t.Fatal("too many MariaDB servers in one test binary")
	}
	m := &mariaDB{
		Addr:          netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 200, byte(4*n + 2)}), 3306),
		Client:        netip.AddrFrom4([4]byte{198, 18, 200, byte(4*n + 1)}),
		ProbeUser:     "pulselb",
		ProbePassword: "pw-" + randomHex(t, 12),
		exited:        make(chan struct{}),
	}

	// A short directory: the socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "plb-my-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m.Socket = filepath.Join(dir, "mysqld.sock")
	m.ErrorLog = filepath.Join(dir, "error.log")

	m.setupNetns(t, n)

	install := exec.Command("mariadb-install-db", "--no-defaults", "--user=root",
		"--datadir="+filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}

	// MariaDB counts connect errors, and blocks, only for a client whose
	// reverse lookup gave a definite answer. In the namespace no DNS server
	// is reachable, so the lookup fails "temporarily", the host is never
	// validated and max_connect_errors would never apply: the regression
	// test below would pass whatever the prober did. With "hosts: files"
	// the lookup fails for good at once. `ip netns exec` runs the command in
	// a private mount namespace, so the bind mount hides the host's
	// nsswitch.conf from mariadbd only.
	nsswitch := filepath.Join(dir, "nsswitch.conf")
	if err := os.WriteFile(nsswitch, []byte("passwd: files\ngroup: files\nhosts: files\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--no-defaults", "--user=root",
		"--datadir=" + filepath.Join(dir, "data"),
		"--socket=" + m.Socket,
		"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
		"--port=" + fmt.Sprint(m.Addr.Port()),
		"--bind-address=" + m.Addr.Addr().String(),
		"--log-error=" + m.ErrorLog,
		"--log-warnings=2",
		"--skip-name-resolve=OFF", // the host cache needs name resolution on
		"--performance-schema=ON", // for performance_schema.host_cache
		"--innodb-buffer-pool-size=16M",
		"--skip-log-bin",
	}
	if opts.MaxConnectErrors > 0 {
		args = append(args, fmt.Sprintf("--max-connect-errors=%d", opts.MaxConnectErrors))
	}
	if opts.MaxConnections > 0 {
		args = append(args, fmt.Sprintf("--max-connections=%d", opts.MaxConnections))
	}
	out, err := os.Create(filepath.Join(dir, "mariadbd.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	m.cmd = exec.Command("ip", append([]string{"netns", "exec", m.netnsName(n), "sh", "-c",
		`mount --bind "$0" /etc/nsswitch.conf && exec "$@"`, nsswitch, "mariadbd"}, args...)...)
	m.cmd.Stdout, m.cmd.Stderr = out, out
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting mariadbd: %v", err)
	}
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() { m.stop(t) })

	m.waitReady(t, filepath.Join(dir, "mariadbd.out"))
	m.exec(t,
		"DELETE FROM mysql.global_priv WHERE User = ''",
		"FLUSH PRIVILEGES",
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", m.ProbeUser, m.ProbePassword),
	)
	if err := m.root.QueryRow("SELECT VERSION()").Scan(&m.Version); err != nil {
		t.Fatalf("reading version: %v", err)
	}
	return m
}

func (m *mariaDB) netnsName(n int) string { return fmt.Sprintf("plb-my-%d-%d", os.Getpid(), n) }

// setupNetns creates namespace n and a veth pair between it and the test's
// namespace, removed when the test ends.
func (m *mariaDB) setupNetns(t *testing.T, n int) {
	t.Helper()
	ns := m.netnsName(n)
	// Interface names are limited to 15 bytes.
	host := fmt.Sprintf("plmh%d-%d", os.Getpid()%100000, n)
	peer := fmt.Sprintf("plmp%d-%d", os.Getpid()%100000, n)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() {
		// Deleting the namespace deletes the peer and with it the host end;
		// the explicit delete covers a failure between the two steps.
		_ = exec.Command("ip", "netns", "del", ns).Run()
		_ = exec.Command("ip", "link", "del", host).Run()
	})
	ip("link", "add", host, "type", "veth", "peer", "name", peer)
	ip("link", "set", peer, "netns", ns)
	ip("addr", "add", m.Client.String()+"/30", "dev", host)
	ip("link", "set", host, "up")
	ip("netns", "exec", ns, "ip", "addr", "add", m.Addr.Addr().String()+"/30", "dev", peer)
	ip("netns", "exec", ns, "ip", "link", "set", peer, "up")
	ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
}

// waitReady waits until root can log in through the socket.
func (m *mariaDB) waitReady(t *testing.T, stdout string) {
	t.Helper()
	db, err := sql.Open("mysql", "root@unix("+m.Socket+")/")
	if err != nil {
		t.Fatal(err)
	}
	// One connection, so Threads_connected counts exactly one for root.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	m.root = db
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-m.exited:
			t.Fatalf("mariadbd exited during startup\n%s\n%s", tail(stdout), tail(m.ErrorLog))
		case <-deadline.C:
			t.Fatalf("mariadbd not ready after 30s: %v\n%s", err, tail(m.ErrorLog))
		case <-tick.C:
		}
	}
}

// exec runs statements as root.
func (m *mariaDB) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := m.root.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// stop shuts the server down and waits for it to exit; it is idempotent.
func (m *mariaDB) stop(t *testing.T) {
	t.Helper()
	m.stopMu.Lock()
	defer m.stopMu.Unlock()
	if m.root != nil {
		m.root.Close()
	}
	select {
	case <-m.exited:
		return
	default:
	}
	// `ip netns exec` and sh exec mariadbd, so the process is mariadbd.
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-m.exited:
	case <-timer.C:
		_ = m.cmd.Process.Kill()
		<-m.exited
		t.Errorf("mariadbd did not shut down within 30s; killed")
	}
}

// hostCache is the performance_schema.host_cache row for one client.
type hostCache struct {
	Validated        string
	SumConnectErrors int
	HandshakeErrors  int
	// AuthErrors counts failed logins as users that exist.
	AuthErrors        int
	HostBlockedErrors int
}

// hostCache returns the server's host cache entry for m.Client.
func (m *mariaDB) hostCache(t *testing.T) (hostCache, bool) {
	t.Helper()
	var h hostCache
	err := m.root.QueryRow(`SELECT HOST_VALIDATED, SUM_CONNECT_ERRORS, COUNT_HANDSHAKE_ERRORS,
		COUNT_AUTHENTICATION_ERRORS, COUNT_HOST_BLOCKED_ERRORS
		FROM performance_schema.host_cache WHERE IP = ?`, m.Client.String()).
		Scan(&h.Validated, &h.SumConnectErrors, &h.HandshakeErrors, &h.AuthErrors, &h.HostBlockedErrors)
	if errors.Is(err, sql.ErrNoRows) {
		return h, false
	}
	if err != nil {
		t.Fatalf("reading host_cache: %v", err)
	}
	return h, true
}

// status returns a global status counter.
func (m *mariaDB) status(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := m.root.QueryRow("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = ?", name).Scan(&n); err != nil {
		t.Fatalf("reading status %s: %v", name, err)
	}
	return n
}

// waitIdle waits until only root's connection is left, so every probe's
// session has ended and written whatever it writes to the error log.
func (m *mariaDB) waitIdle(t *testing.T) {
	t.Helper()
	m.waitThreads(t, 1)
}

// waitThreads waits until the server has at most want sessions, root's
// included: a session the client has closed lingers briefly on the server.
func (m *mariaDB) waitThreads(t *testing.T, want int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n := m.status(t, "Threads_connected")
		if n <= want {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("%d connections still open after 10s", n)
		case <-tick.C:
		}
	}
}

// logSize returns the size of the server's error log.
func (m *mariaDB) logSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(m.ErrorLog)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// logLinesSince returns the error log lines written after offset.
func (m *mariaDB) logLinesSince(t *testing.T, offset int64) []string {
	t.Helper()
	f, err := os.Open(m.ErrorLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// connect opens one session to the server as user, with the driver.
func (m *mariaDB) connect(ctx context.Context, network, addr, user, password string) (*sql.Conn, *sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = network, addr
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(connector)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return conn, db, nil
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// tail returns the end of a file, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
