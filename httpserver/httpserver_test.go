package httpserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// short is the timeout the tests set: long enough for a loaded machine
// to answer a request, short enough to keep the tests fast.
const short = 300 * time.Millisecond

// within is how long a test waits for what short should bring about.
const within = 3 * time.Second

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })

// serve serves h with opts on a loopback port until the test ends and
// returns its address.
func serve(t *testing.T, ctx context.Context, h http.Handler, opts Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(ctx, h, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends a GET with extra header lines on c and returns the response
// with its body read.
func get(c net.Conn, r *bufio.Reader, header string) (*http.Response, string, error) {
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: test\r\n%s\r\n", header); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// closedBy waits until the server closes c, at most until deadline, and
// returns when that was; an error means c was still open.
func closedBy(c net.Conn, deadline time.Time) (time.Time, error) {
	_ = c.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return time.Time{}, errors.New("still open")
	}
	// EOF (nil) or a reset: the server closed it.
	return time.Now(), nil
}

// TestQuietConnectionsAreClosed opens connections that go quiet at each
// stage of a request and checks the server closes every one of them.
func TestQuietConnectionsAreClosed(t *testing.T) {
	const conns = 50
	readBody := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})
	tests := []struct {
		name string
		// send is written on every connection, then nothing more.
		send string
		opts Options
	}{
		{"idle after a request", "GET / HTTP/1.1\r\nHost: test\r\n\r\n", Options{IdleTimeout: short}},
		{"silent from the start", "", Options{ReadHeaderTimeout: short}},
		{"headers unfinished", "GET / HTTP/1.1\r\nHost: te", Options{ReadHeaderTimeout: short}},
		{"body never sent", "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\n", Options{ReadTimeout: short}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serve(t, t.Context(), readBody, tt.opts)
			cs := make([]net.Conn, conns)
			for i := range cs {
				cs[i] = dial(t, addr)
				if _, err := io.WriteString(cs[i], tt.send); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			var slowest time.Duration
			open := 0
			for _, c := range cs {
				at, err := closedBy(c, start.Add(within))
				if err != nil {
					open++
					continue
				}
				slowest = max(slowest, at.Sub(start))
			}
			if open > 0 {
				t.Fatalf("%d of %d connections still open %v after the %v timeout", open, conns, within, short)
			}
			t.Logf("%d connections closed, the last %v after the test started waiting", conns, slowest)
		})
	}
}

// TestWriteTimeout checks that a client that stops reading a response
// does not hold the handler beyond the write timeout.
func TestWriteTimeout(t *testing.T) {
	returned := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				returned <- err
				return
			}
		}
	})
	addr := serve(t, t.Context(), h, Options{WriteTimeout: short})
	c := dial(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-returned:
		t.Logf("the handler's write failed: %v", err)
	case <-time.After(within):
		t.Fatalf("a response nobody reads still being written %v after the %v write timeout", within, short)
	}
}

func TestHeaderBytes(t *testing.T) {
	tests := []struct {
		name     string
		opts     Options
		header   int
		wantCode int
	}{
		{"default limit, small header", Options{}, 1 << 10, http.StatusOK},
		{"default limit, 100 KiB header", Options{}, 100 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"4 KiB limit, 16 KiB header", Options{MaxHeaderBytes: 4 << 10}, 16 << 10, http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serve(t, t.Context(), okHandler, tt.opts)
			c := dial(t, addr)
			resp, _, err := get(c, bufio.NewReader(c), "X-Big: "+strings.Repeat("a", tt.header)+"\r\n")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantCode {
				t.Errorf("a %d-byte header: %s, want %d", tt.header, resp.Status, tt.wantCode)
			}
		})
	}
}

// waitFor waits until cond holds, at most within.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConnectionCap fills the server's connections with clients that say
// nothing and checks that the next one waits, is counted and logged once,
// and is served as soon as a connection closes.
func TestConnectionCap(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	m := NewMetrics()
	addr := serve(t, ctx, okHandler, Options{Name: "test", MaxConns: 2, Metrics: m})
	limited := func() float64 { return testutil.ToFloat64(m.limited.WithLabelValues("test")) }
	open := func() float64 { return testutil.ToFloat64(m.connections.WithLabelValues("test")) }

	quiet := []net.Conn{dial(t, addr), dial(t, addr)}
	waitFor(t, "two connections open", func() bool { return open() == 2 })

	// The third waits, while the two hold the server's connections.
	next := dial(t, addr)
	nextR := bufio.NewReader(next)
	waitFor(t, "the third connection counted as limited", func() bool { return limited() == 1 })
	_ = next.SetDeadline(time.Now().Add(short))
	if resp, _, err := get(next, nextR, ""); err == nil {
		t.Fatalf("a third connection with two allowed was served: %s", resp.Status)
	}
	// Served once one of the two leaves.
	quiet[0].Close()
	_ = next.SetDeadline(time.Now().Add(within))
	if resp, body, err := get(next, nextR, ""); err != nil || body != "ok\n" {
		t.Fatalf("after a connection closed, the waiting one got %v %q, %v", resp, body, err)
	}

	// A fourth, while the third is kept alive: counted again, but logged
	// once a minute only.
	fourth := dial(t, addr)
	waitFor(t, "the fourth connection counted as limited", func() bool { return limited() == 2 })
	quiet[1].Close()
	_ = fourth.SetDeadline(time.Now().Add(within))
	if _, body, err := get(fourth, bufio.NewReader(fourth), ""); err != nil || body != "ok\n" {
		t.Fatalf("the fourth connection got %q, %v", body, err)
	}
	if got := open(); got != 2 {
		t.Errorf("pulselb_http_connections = %v, want 2", got)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(logs, "Connection limit reached"); n != 1 {
		t.Errorf("logged the limit %d times, want once:\n%s", n, logs)
	}
}

// TestCloseWhileAtCap checks that closing a server whose connections are
// all taken also ends the connection waiting for one.
func TestCloseWhileAtCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	srv := New(t.Context(), okHandler, Options{Name: "test", MaxConns: 1, Metrics: m})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	dial(t, ln.Addr().String())
	waiting := dial(t, ln.Addr().String())
	waitFor(t, "the second connection counted as limited", func() bool {
		return testutil.ToFloat64(m.limited.WithLabelValues("test")) == 1
	})
	_ = srv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	case <-time.After(within):
		t.Fatal("Serve still running after Close")
	}
	if _, err := closedBy(waiting, time.Now().Add(within)); err != nil {
		t.Errorf("the connection waiting for a slot: %v", err)
	}
}

// TestEveryServerIsBuiltHere: no package of the module builds an
// http.Server of its own, so that every port pulselb serves HTTP on has
// the timeouts and the connection cap of New.
func TestEveryServerIsBuiltHere(t *testing.T) {
	root := ".."
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root: %v", err)
	}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			switch e.Name() {
			// test/ is a module of its own; this package is the home.
			case ".git", "testdata", "test", "httpserver":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var typ ast.Expr
			switch n := n.(type) {
			case *ast.CompositeLit:
				typ = n.Type
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "new" && len(n.Args) == 1 {
					typ = n.Args[0]
				}
			}
			if sel, ok := typ.(*ast.SelectorExpr); ok && sel.Sel.Name == "Server" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "http" {
					t.Errorf("%s builds an http.Server of its own; use httpserver.New", path)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
