package dashboard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulselb/pulselb/httpserver"
)

// serveDashboard serves d on a loopback port with pulselb's HTTP server
// built with opts, until the test ends, and returns its URL.
func serveDashboard(t *testing.T, d *Dashboard, opts httpserver.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New(t.Context(), d, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		d.Close() // end the streams first, or Close waits for them
		_ = srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// TestEventsOutliveServerTimeouts: an event stream stays open across the
// server's read, write and idle timeouts, which bound every other request.
func TestEventsOutliveServerTimeouts(t *testing.T) {
	const timeout = 100 * time.Millisecond
	d := newTestDashboard(Options{KeepAlive: 20 * time.Millisecond})
	url := serveDashboard(t, d, httpserver.Options{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, IdleTimeout: timeout})
	_, events := openEvents(t, t.Context(), url)
	if v := events.nextVersion(t); v != 0 {
		t.Fatalf("first version %d", v)
	}
	start := time.Now()
	keepAlives := 0
	for time.Since(start) < 10*timeout {
		typ, _, err := events.next()
		if err != nil {
			t.Fatalf("the stream ended after %v (server timeouts %v): %v", time.Since(start).Round(time.Millisecond), timeout, err)
		}
		if typ == ":" {
			keepAlives++
		}
	}
	if d.Clients() != 1 {
		t.Errorf("%d clients, want 1", d.Clients())
	}
	t.Logf("%d keep-alives in %v through a server with %v timeouts", keepAlives, 10*timeout, timeout)
}

// clock is a test's clock, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestNonReadingClientsGiveWay fills every event stream place with
// clients that send a request and never read, and checks that each new
// client still gets a stream, ending a non-reader's.
func TestNonReadingClientsGiveWay(t *testing.T) {
	const places = 3
	clk := &clock{now: testNow}
	d := newTestDashboard(Options{MaxClients: places, KeepAlive: time.Hour, Now: clk.Now})
	url := serveDashboard(t, d, httpserver.Options{})

	silent := make([]net.Conn, places)
	for i := range silent {
		c, err := net.Dial("tcp", url[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", PathEvents); err != nil {
			t.Fatal(err)
		}
		silent[i] = c
	}
	waitFor(t, "every place taken", func() bool { return d.Clients() == places })

	// A new client while the silent ones are young is refused, as before.
	if resp, _ := openEvents(t, t.Context(), url); resp.StatusCode != 503 {
		t.Fatalf("a client with every place taken for 0s: %d, want 503", resp.StatusCode)
	}
	clk.add(DefaultEvictAfter)
	for i := range places {
		resp, events := openEvents(t, t.Context(), url)
		if resp.StatusCode != 200 {
			t.Fatalf("new client %d with every place held %v by a client that reads nothing: %s, want a stream", i+1, DefaultEvictAfter, resp.Status)
		}
		if v := events.nextVersion(t); v != 0 {
			t.Fatalf("new client %d: first version %d", i+1, v)
		}
	}
	if got := testutil.ToFloat64(d.opts.Metrics.sseEvicted); got != places {
		t.Errorf("sse_evicted_total = %v, want %d", got, places)
	}
	if d.Clients() != places {
		t.Errorf("%d clients, want %d", d.Clients(), places)
	}
	// Each silent client's stream was ended: what it never read ends
	// with the response's last chunk.
	for i, c := range silent {
		if err := readUntil(c, []byte("\r\n0\r\n\r\n"), time.Now().Add(5*time.Second)); err != nil {
			t.Errorf("silent client %d: %v", i+1, err)
		}
	}
}

// readUntil reads c until what it has read ends with end.
func readUntil(c net.Conn, end []byte, deadline time.Time) error {
	_ = c.SetReadDeadline(deadline)
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.HasSuffix(got, end) {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("the stream is still open: %q", got)
		case errors.Is(err, io.EOF):
			return fmt.Errorf("the connection closed before the stream ended: %q", got)
		case err != nil:
			return err
		}
	}
	return nil
}
