// Package httpserver builds every net/http server pulselb runs: standalone
// mode's dashboard and API, each role's metrics and health port, the
// proxy's health port, and the loopback servers of `pulselb check` and the
// demo. It owns the rule they share: how long a connection may take to
// send a request, to read a response and to sit idle, how large a request's
// headers may be, and how many connections a server holds at once, so that
// no port keeps connections, or the file descriptors behind them, without
// bound.
package httpserver

import (
	"context"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Defaults of Options.
const (
	// DefaultReadHeaderTimeout bounds the wait for a request's headers,
	// the first request's included.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds a handler and the writing of its response
	// from the end of the request's headers. A long-lived response (an
	// event stream) extends it before each write with
	// http.ResponseController.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection may wait for
	// its next request.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxHeaderBytes bounds a request's line and headers.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConns is how many connections a server holds at once.
	DefaultMaxConns = 256
)

// limitLogInterval is how often, at most, a server logs that it reached
// its connection limit; the counter has every occurrence.
const limitLogInterval = time.Minute

// Options configure a Server. Zero fields take the defaults above.
type Options struct {
	// Name tells the server's metrics and log lines apart from another
	// server's in the same process ("metrics", "health", "standalone").
	Name string
	// MaxConns is how many connections the server holds at once. A
	// connection beyond it is accepted and waits, unread, until one
	// closes; further ones wait in the listen backlog.
	MaxConns int
	// The timeouts and the header bound are those of http.Server; see
	// the defaults above for what each covers.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// Metrics receives the server's metrics; nil means unregistered ones
	// of its own.
	Metrics *Metrics
	// ErrorLog receives net/http's own errors (a failed TLS handshake, a
	// handler's panic); nil means the standard logger.
	ErrorLog *log.Logger
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&o.ReadTimeout, DefaultReadTimeout)
	set(&o.WriteTimeout, DefaultWriteTimeout)
	set(&o.IdleTimeout, DefaultIdleTimeout)
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	return o
}

// Server is an http.Server built by New, serving at most MaxConns
// connections at once.
type Server struct {
	srv    *http.Server
	logger klog.Logger
	name   string
	max    int
	// slots holds a token for every connection open; Accept waits for
	// room in it.
	slots   chan struct{}
	metrics *Metrics

	mu sync.Mutex
	// lastLog is when the limit was last logged, and waited how many
	// connections had to wait since.
	lastLog time.Time
	waited  int
}

// New returns a server for h with opts. ctx carries the logger and is the
// base of every request's context: cancelling it cancels the requests in
// flight.
func New(ctx context.Context, h http.Handler, opts Options) *Server {
	opts = opts.withDefaults()
	s := &Server{
		logger:  klog.FromContext(ctx),
		name:    opts.Name,
		max:     opts.MaxConns,
		slots:   make(chan struct{}, opts.MaxConns),
		metrics: opts.Metrics,
	}
	open := opts.Metrics.connections.WithLabelValues(opts.Name)
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ErrorLog:          opts.ErrorLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		// Every connection Accept returned reaches StateNew, and ends in
		// StateClosed or StateHijacked: the slot is given back there,
		// whatever the listener wraps (TLS included).
		ConnState: func(_ net.Conn, state http.ConnState) {
			switch state {
			case http.StateNew:
				open.Inc()
			case http.StateClosed, http.StateHijacked:
				open.Dec()
				<-s.slots
			}
		},
	}
	return s
}

// Serve accepts connections on ln and serves them until Shutdown or Close,
// as http.Server's Serve does; it returns http.ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(&limitListener{Listener: ln, s: s, done: make(chan struct{})})
}

// Shutdown stops accepting and waits, until ctx is done, for the requests
// in flight to finish, as http.Server's Shutdown does.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection at once.
func (s *Server) Close() error { return s.srv.Close() }

// limited counts a connection that found every slot taken, and logs so at
// most once per limitLogInterval.
func (s *Server) limited() {
	s.metrics.limited.WithLabelValues(s.name).Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waited++
	now := time.Now()
	if now.Sub(s.lastLog) < limitLogInterval {
		return
	}
	s.logger.Info("Connection limit reached; new connections wait until one closes",
		"server", s.name, "maxConnections", s.max, "waited", s.waited)
	s.lastLog, s.waited = now, 0
}

// limitListener takes a slot of its server for every connection it
// accepts, waiting while there is none. It accepts before it waits, so
// that the wait is for a client that exists: the one connection beyond
// the limit is held unread; the others stay in the kernel's backlog and
// cost no file descriptor.
type limitListener struct {
	net.Listener
	s         *Server
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.s.slots <- struct{}{}:
		return c, nil
	default:
	}
	l.s.limited()
	select {
	case l.s.slots <- struct{}{}:
		return c, nil
	case <-l.done:
		c.Close()
		return nil, net.ErrClosed
	}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}
