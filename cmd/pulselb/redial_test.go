package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// closedAddr returns a loopback address that refuses connections, for
// now: it was listened on and closed.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRedial: a marked GET to an address that refuses connections waits
// there and is answered once a server listens; unmarked GETs and other
// methods fail at once, and a done context ends the wait with the dial
// error.
func TestRedial(t *testing.T) {
	addr := closedAddr(t)
	client := &http.Client{Transport: newRedial(&http.Transport{})}
	url := "http://" + addr + "/api/v1/services"
	get := func(ctx context.Context, method string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	for _, tc := range []struct {
		name   string
		ctx    context.Context
		method string
	}{
		{"unmarked GET", context.Background(), http.MethodGet},
		{"marked POST", redialing(context.Background()), http.MethodPost},
	} {
		start := time.Now()
		if _, err := get(tc.ctx, tc.method); err == nil || !dialFailed(err) {
			t.Errorf("%s: err %v, want the dial's", tc.name, err)
		}
		if took := time.Since(start); took > redialMin {
			t.Errorf("%s: failed after %s, want at once", tc.name, took)
		}
	}

	ctx, cancel := context.WithTimeout(redialing(context.Background()), 3*redialMax)
	defer cancel()
	start := time.Now()
	if _, err := get(ctx, http.MethodGet); err == nil || !dialFailed(err) {
		t.Errorf("marked GET, nothing listening: err %v, want the dial's", err)
	}
	if took := time.Since(start); took < 3*redialMax-100*time.Millisecond {
		t.Errorf("marked GET, nothing listening: gave up after %s, want the context's %s", took, 3*redialMax)
	}

	// A server that comes up while the GET waits answers it, within a
	// second and a half of listening.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "services")
	}))
	defer srv.Close()
	type answer struct {
		body string
		err  error
		at   time.Time
	}
	done := make(chan answer, 1)
	go func() {
		body, err := get(redialing(context.Background()), http.MethodGet)
		done <- answer{body, err, time.Now()}
	}()
	time.Sleep(2 * redialMax)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	srv.Listener = l
	listening := time.Now()
	srv.Start()
	select {
	case a := <-done:
		if a.err != nil || a.body != "services" {
			t.Fatalf("marked GET: %q, %v; want the server's answer", a.body, a.err)
		}
		if lag := a.at.Sub(listening); lag > redialMax*3/2+200*time.Millisecond {
			t.Errorf("answered %s after the server listened, want within %s", lag, redialMax*3/2)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("marked GET not answered 10 s after the server listened")
	}
}

// TestDialFailed: only a failure to connect counts.
func TestDialFailed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, false},
		{io.EOF, false},
		{errors.New(strings.Repeat("dial ", 2)), false},
	} {
		if got := dialFailed(tc.err); got != tc.want {
			t.Errorf("dialFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
