package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"sync"
	"time"
)

// httpBodyLimit is how much of a response body is read and matched.
const httpBodyLimit = 64 << 10

// httpMaxRedirects bounds how many redirects follow=true follows.
const httpMaxRedirects = 10

// errTooManyRedirects ends a redirect chain longer than httpMaxRedirects.
var errTooManyRedirects = fmt.Errorf("stopped after %d redirects", httpMaxRedirects)

// defaultStatus is the accepted status set when a spec gives none.
var defaultStatus = StatusSet{{200, 399}}

// httpProber sends one HTTP request per probe over a new connection.
type httpProber struct {
	client *http.Client
	tls    bool
	verify bool
	ref    *url.URL
	method string
	host   string
	status StatusSet
	spec   Spec
}

// newHTTP builds the http and https prober. Its one client never pools
// connections, so the Transport is shared by every probe of the prober.
func newHTTP(spec Spec, opts Options) (Prober, error) {
	path := spec.Path
	if path == "" {
		path = "/"
	}
	ref, err := url.Parse(path)
	if err != nil || ref.IsAbs() || ref.Host != "" {
		return nil, fmt.Errorf("path %q is not an absolute path", path)
	}
	method := spec.Method
	if method == "" {
		method = http.MethodGet
	}
	// Checking here keeps a bad method or path a spec error rather than a
	// failure of every probe.
	if _, err := http.NewRequest(method, "http://127.0.0.1"+ref.String(), nil); err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	status := spec.Status
	if len(status) == 0 {
		status = defaultStatus
	}
	d := dialer("tcp", opts)
	tr := &http.Transport{
		// No Proxy: a probe tests the target, never a proxy from the environment.
		DialContext: d.DialContext,
		// Every probe must open its own connection: a pooled one would
		// hide a port that stopped accepting connections.
		DisableKeepAlives: true,
	}
	if spec.Protocol == HTTPS {
		// With neither sni= nor host= the server name is the target IP:
		// crypto/tls sends no SNI for it, and clientTLSConfig verifies the
		// chain alone, as the tls probe does.
		sni := spec.SNI
		if sni == "" {
			sni = spec.Host
		}
		tr.TLSClientConfig = clientTLSConfig(sni, spec.Verify, []string{"http/1.1"})
	}
	client := &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !spec.Follow {
				return http.ErrUseLastResponse
			}
			if len(via) >= httpMaxRedirects {
				return errTooManyRedirects
			}
			return nil
		},
	}
	return &httpProber{
		client: client,
		tls:    spec.Protocol == HTTPS,
		verify: spec.Verify,
		ref:    ref,
		method: method,
		host:   spec.Host,
		status: status,
		spec:   spec,
	}, nil
}

// httpTrace records, for the connection of the latest request (the last
// redirect hop), which phases finished and when. Its hooks may run after
// Probe returned, because net/http finishes or cancels an abandoned dial in
// the background, so the state is behind mu.
type httpTrace struct {
	start time.Time
	mu    sync.Mutex
	state traceState
}

// traceState is what an httpTrace saw.
type traceState struct {
	timings    Timings
	connected  bool
	tlsStarted bool
	tlsDone    bool
	dialErr    error
	tlsErr     error
}

func (h *httpTrace) clientTrace() *httptrace.ClientTrace {
	update := func(f func(st *traceState, since time.Duration)) {
		since := time.Since(h.start)
		h.mu.Lock()
		defer h.mu.Unlock()
		f(&h.state, since)
	}
	return &httptrace.ClientTrace{
		GetConn: func(string) {
			update(func(st *traceState, _ time.Duration) {
				*st = traceState{timings: st.timings}
			})
		},
		ConnectDone: func(_, _ string, err error) {
			update(func(st *traceState, since time.Duration) {
				if err != nil {
					st.dialErr = err
					return
				}
				st.connected, st.timings.Connect = true, since
			})
		},
		TLSHandshakeStart: func() {
			update(func(st *traceState, _ time.Duration) { st.tlsStarted = true })
		},
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			update(func(st *traceState, since time.Duration) {
				if err != nil {
					st.tlsErr = err
					return
				}
				st.tlsDone, st.timings.TLS = true, since
			})
		},
		GotFirstResponseByte: func() {
			update(func(st *traceState, since time.Duration) { st.timings.FirstByte = since })
		},
	}
}

// snapshot returns what the trace saw so far.
func (h *httpTrace) snapshot() traceState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Probe sends the spec's request to target with the spec's Host header and
// checks the certificate (https), the status, the headers and the first
// 64 KiB of the body.
func (p *httpProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	start := time.Now()
	trace := &httpTrace{start: start}
	res := p.probe(httptrace.WithClientTrace(ctx, trace.clientTrace()), target, trace)
	snap := trace.snapshot()
	res.Timings = snap.timings
	res.Timings.Total = time.Since(start)
	return res
}

func (p *httpProber) probe(ctx context.Context, target netip.AddrPort, trace *httpTrace) Result {
	var res Result
	u := *p.ref
	u.Scheme = "http"
	if p.tls {
		u.Scheme = "https"
	}
	u.Host = target.String()
	req, err := http.NewRequestWithContext(ctx, p.method, u.String(), nil)
	if err != nil {
		// The path and method were checked when the prober was built, so
		// only a target that makes no URL gets here: nothing can connect.
		res.Outcome, res.Err = L4UNREACH, fmt.Errorf("building request: %w", err)
		return res
	}
	if p.host != "" {
		req.Host = p.host
	}
	req.Header.Set("User-Agent", "pulselb-probe")

	resp, err := p.client.Do(req)
	if err != nil {
		return p.requestFailed(err, trace.snapshot())
	}
	// Closing without draining is fine: keep-alives are off, so the
	// connection is closed either way.
	defer func() { _ = resp.Body.Close() }()

	res.Detail = fmt.Sprintf("HTTP %d", resp.StatusCode)
	if resp.TLS != nil {
		res.TLS = tlsInfo(*resp.TLS, p.verify)
		if err := checkMinValid(res.TLS, p.spec.MinValid, time.Now()); err != nil {
			res.Outcome, res.Err = L6ERR, err
			return res
		}
	}
	if !p.status.Contains(resp.StatusCode) {
		res.Outcome = L7STS
		res.Err = fmt.Errorf("HTTP %d, want %s", resp.StatusCode, p.status)
		return res
	}
	for _, hm := range p.spec.Headers {
		if err := checkHeader(resp.Header, hm); err != nil {
			res.Outcome, res.Err = L7RSP, err
			return res
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, httpBodyLimit))
	if err != nil {
		res.Outcome, res.Err = readOutcome(err), fmt.Errorf("reading body: %w", err)
		return res
	}
	if p.spec.Body != nil && !p.spec.Body.Match(body) {
		res.Outcome = L7RSP
		res.Err = fmt.Errorf("body does not match %q (%d bytes read)", p.spec.Body.String(), len(body))
		return res
	}
	res.Outcome = L7OK
	return res
}

// requestFailed classifies an error from sending the request or reading the
// response headers by the last phase that finished.
func (p *httpProber) requestFailed(err error, snap traceState) Result {
	var res Result
	// url.Error repeats the method and URL the caller already knows.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case snap.tlsErr != nil && !isTimeout(err):
		res.Outcome, res.Err = L6ERR, fmt.Errorf("tls handshake: %w", snap.tlsErr)
	case !snap.connected && isTimeout(err):
		res.Outcome, res.Err = L4TOUT, fmt.Errorf("connecting: %w", err)
	case !snap.connected:
		if snap.dialErr != nil {
			err = snap.dialErr
		}
		res.Outcome, res.Err = dialOutcome(err), fmt.Errorf("connecting: %w", err)
	case snap.tlsStarted && !snap.tlsDone:
		res.Outcome, res.Err = L6ERR, fmt.Errorf("tls handshake: %w", err)
		if isTimeout(err) {
			res.Outcome = L6TOUT
		}
	case isTimeout(err):
		res.Outcome, res.Err = L7TOUT, fmt.Errorf("waiting for response headers: %w", err)
	case errors.Is(err, errTooManyRedirects):
		res.Outcome, res.Err = L7RSP, fmt.Errorf("following redirects: %w", err)
	case errors.Is(err, io.EOF):
		res.Outcome, res.Err = L7RSP, fmt.Errorf("reading response: server closed the connection: %w", err)
	default:
		res.Outcome, res.Err = readOutcome(err), fmt.Errorf("reading response: %w", err)
	}
	return res
}

// checkHeader requires a header named hm.Name with a value matching
// hm.Value. The values are left out of the error: headers such as
// Set-Cookie may carry secrets.
func checkHeader(h http.Header, hm HeaderMatch) error {
	values := h.Values(hm.Name)
	if len(values) == 0 {
		return fmt.Errorf("header %s missing", http.CanonicalHeaderKey(hm.Name))
	}
	if hm.Value == nil {
		return nil
	}
	for _, v := range values {
		if hm.Value.MatchString(v) {
			return nil
		}
	}
	return fmt.Errorf("header %s does not match %q", http.CanonicalHeaderKey(hm.Name), hm.Value.String())
}
