// Package traffic is a client that behaves like a user's: it resolves a
// Service's name through DNS like a stub resolver (answers cached for
// their TTL), sends HTTP requests one after another without a pause, each
// on a new connection to the next address of the cached answer (round
// robin), and records every request, so that a test can count what a
// planned change lost. With Options.UDP it sends datagrams to an echo
// port instead, each from a new socket, and waits for each one's echo.
package traffic

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Options configure a Client.
type Options struct {
	// Name is the DNS name of the Service.
	Name string
	// Port is the Service's port: a TCP port that answers HTTP, or with
	// UDP a UDP port that echoes datagrams.
	Port int
	// UDP sends each request as one datagram from a new socket (a new
	// source port, so a new flow through the proxies) and wants the same
	// bytes back within Timeout.
	UDP bool
	// Resolver resolves Name: a *Resolver asks DNS servers; a test may
	// give another source of addresses, such as a Service's status.
	Resolver Lookuper
	// Timeout bounds one request, connection included; default 1 s.
	Timeout time.Duration
	// MaxRequests and MaxDuration bound the run; defaults 100,000 and
	// 5 minutes.
	MaxRequests int
	MaxDuration time.Duration
	// Interval is the least time between the starts of two requests; 0:
	// none, the next request starts as soon as one ends.
	Interval time.Duration
	// Run runs the request loop, for example on a thread in another
	// network namespace (cluster.RunInNamespace); default: in place.
	Run func(func() error) error
}

// Lookuper resolves a name to the addresses a client sends to, with
// answers cached as a stub resolver caches them. The client calls it from
// its one request loop.
type Lookuper interface {
	Lookup(name string) (addrs []netip.Addr, fresh bool, err error)
}

// Request is one request the client sent.
type Request struct {
	At   time.Time     // when it started
	Took time.Duration // until it succeeded or failed
	Addr netip.Addr    // the address it went to; invalid when DNS failed
	OK   bool
	Err  string // why it failed
}

// Client sends requests until stopped. Start it with Start.
type Client struct {
	opts   Options
	cancel context.CancelFunc
	done   chan struct{}
	err    error

	mu       sync.Mutex
	requests []Request
	started  time.Time
	stopped  time.Time
}

// Start starts a client that sends requests until Stop, ctx's end, or
// its bounds.
func Start(ctx context.Context, opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.MaxRequests <= 0 {
		opts.MaxRequests = 100_000
	}
	if opts.MaxDuration <= 0 {
		opts.MaxDuration = 5 * time.Minute
	}
	if opts.Run == nil {
		opts.Run = func(f func() error) error { return f() }
	}
	ctx, cancel := context.WithTimeout(ctx, opts.MaxDuration)
	c := &Client{opts: opts, cancel: cancel, done: make(chan struct{}), started: time.Now()}
	go func() {
		defer close(c.done)
		c.err = opts.Run(func() error { c.loop(ctx); return nil })
	}()
	return c
}

func (c *Client) loop(ctx context.Context) {
	next := 0
	var pace <-chan time.Time
	if c.opts.Interval > 0 {
		t := time.NewTicker(c.opts.Interval)
		defer t.Stop()
		pace = t.C
	}
	for i := 0; i < c.opts.MaxRequests && ctx.Err() == nil; i++ {
		if pace != nil && i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-pace:
			}
		}
		start := time.Now()
		r := Request{At: start}
		addrs, _, err := c.opts.Resolver.Lookup(c.opts.Name)
		if err == nil {
			r.Addr = addrs[next%len(addrs)]
			next++
			if c.opts.UDP {
				err = c.echo(ctx, r.Addr, i)
			} else {
				err = c.get(ctx, r.Addr)
			}
		}
		r.Took, r.OK = time.Since(start), err == nil
		if err != nil && ctx.Err() != nil {
			return // cut short by Stop: not the service's failure
		}
		if err != nil {
			r.Err = err.Error()
		}
		c.mu.Lock()
		c.requests = append(c.requests, r)
		c.mu.Unlock()
	}
}

// get sends one GET on a new connection and wants a 200 answer.
func (c *Client) get(ctx context.Context, addr netip.Addr) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(addr, uint16(c.opts.Port)).String())
	if err != nil {
		return err
	}
	// Closed with a reset once the answer is read: no TIME_WAIT state on
	// either side, so that a long run reuses no port a backend still
	// remembers, as a new connection through the proxies' MASQUERADE
	// otherwise would.
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetLinger(0)
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", c.opts.Name); err != nil {
		return fmt.Errorf("sending request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("reading response: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("reading body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// echo sends datagram number seq from a new socket and wants it echoed.
func (c *Client) echo(ctx context.Context, addr netip.Addr, seq int) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", netip.AddrPortFrom(addr, uint16(c.opts.Port)).String())
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	msg := fmt.Sprintf("pulselb-traffic %s %d", c.opts.Name, seq)
	if _, err := conn.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sending datagram: %w", err)
	}
	buf := make([]byte, len(msg)+64)
	n, err := conn.Read(buf)
	if err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if string(buf[:n]) != msg {
		return fmt.Errorf("echo %q, want %q", buf[:n], msg)
	}
	return nil
}

// Stop stops the client and returns its report.
func (c *Client) Stop() (Report, error) {
	c.cancel()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped.IsZero() {
		c.stopped = time.Now()
	}
	return newReport(c.requests, c.started, c.stopped), c.err
}

// Sent returns how many requests the client has sent so far, and how
// many of them succeeded.
func (c *Client) Sent() (sent, ok int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.requests {
		if r.OK {
			ok++
		}
	}
	return len(c.requests), ok
}

// Report sums up a client's run.
type Report struct {
	Sent, Failed int
	// LongestGap is the longest time without a successful request: between
	// two successes, or from the start to the first or the last to the end.
	LongestGap time.Duration
	Duration   time.Duration
	// Requests are every request, in order.
	Requests []Request
}

func newReport(reqs []Request, start, end time.Time) Report {
	r := Report{Sent: len(reqs), Duration: end.Sub(start), Requests: reqs}
	last := start
	for _, q := range reqs {
		if !q.OK {
			r.Failed++
			continue
		}
		r.LongestGap = max(r.LongestGap, q.At.Add(q.Took).Sub(last))
		last = q.At.Add(q.Took)
	}
	r.LongestGap = max(r.LongestGap, end.Sub(last))
	return r
}

// Failures returns up to n failed requests, the first ones.
func (r Report) Failures(n int) []Request {
	var out []Request
	for _, q := range r.Requests {
		if !q.OK && len(out) < n {
			out = append(out, q)
		}
	}
	return out
}

// ByAddr counts the requests per address: sent and failed.
func (r Report) ByAddr() map[netip.Addr][2]int {
	out := map[netip.Addr][2]int{}
	for _, q := range r.Requests {
		c := out[q.Addr]
		c[0]++
		if !q.OK {
			c[1]++
		}
		out[q.Addr] = c
	}
	return out
}

// String is a one-line summary.
func (r Report) String() string {
	rate := 0.0
	if r.Duration > 0 {
		rate = float64(r.Sent) / r.Duration.Seconds()
	}
	return fmt.Sprintf("%d sent, %d failed, longest gap %s, %s at %s/s", r.Sent, r.Failed,
		r.LongestGap.Round(time.Millisecond), r.Duration.Round(time.Millisecond), strconv.FormatFloat(rate, 'f', 0, 64))
}

// WaitSucceeding waits until the client has had n successful requests.
func (c *Client) WaitSucceeding(ctx context.Context, n int) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, ok := c.Sent(); ok >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			_, ok := c.Sent()
			return fmt.Errorf("waiting for %d successful requests: %d so far: %w", n, ok, ctx.Err())
		case <-c.done:
			_, ok := c.Sent()
			return fmt.Errorf("waiting for %d successful requests: the client stopped after %d", n, ok)
		case <-t.C:
		}
	}
}
