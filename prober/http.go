package prober

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pulselb/pulselb/api/probespec"
)

// httpBodyLimit is how much of a response body is read and matched.
const httpBodyLimit = 64 << 10

// httpMaxRedirects bounds how many redirects follow=true follows.
const httpMaxRedirects = 10

// httpHeaderLimit bounds the bytes of a response's status line and headers,
// as net/http's Transport does by default, so a server that streams headers
// cannot grow a probe's memory until the deadline.
const httpHeaderLimit = 10 << 20

// errTooManyRedirects ends a redirect chain longer than httpMaxRedirects.
var errTooManyRedirects = fmt.Errorf("stopped after %d redirects", httpMaxRedirects)

// errHeadersTooLarge ends a response whose headers exceed httpHeaderLimit.
var errHeadersTooLarge = fmt.Errorf("response headers exceed %d bytes", httpHeaderLimit)

// defaultStatus is the accepted status set when a spec gives none.
var defaultStatus = probespec.StatusSet{{Min: 200, Max: 399}}

// httpUserAgent is sent with every request, redirects included.
var httpUserAgent = []string{"pulselb-probe"}

// httpProber sends one HTTP/1.1 request per probe over a new connection and
// does the whole exchange on the probing goroutine: net/http's Transport
// spends a reader and a writer goroutine, channel handoffs and trace hooks
// on every connection, which cost more CPU than the exchange itself.
type httpProber struct {
	opts Options
	tls  bool
	// tlsCfg is the client configuration of https probes.
	tlsCfg *tls.Config
	verify bool
	// req is the first request of every probe. Probes share it, so it is
	// never changed; when the spec sets no Host header each probe writes a
	// copy naming its target.
	req    *http.Request
	status probespec.StatusSet
	spec   probespec.Spec
	// bodyInsts is the program size of spec.Body.
	bodyInsts int
}

// newHTTP builds the http and https prober.
func newHTTP(spec probespec.Spec, opts Options) (Prober, error) {
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
	req, err := http.NewRequest(method, "http://127.0.0.1"+ref.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	// Only the path and query of the URL are written; the Host header
	// names the target.
	req.URL = ref
	req.Host = spec.Host
	req.Header["User-Agent"] = httpUserAgent
	// Every probe must open its own connection: a reused one would hide a
	// port that stopped accepting connections. Saying so lets the server
	// close at once rather than wait for a next request.
	req.Close = true
	status := spec.Status
	if len(status) == 0 {
		status = defaultStatus
	}
	p := &httpProber{
		opts:   opts,
		tls:    spec.Protocol == probespec.HTTPS,
		verify: spec.Verify,
		req:    req,
		status: status,
		spec:   spec,
	}
	if spec.Body != nil {
		p.bodyInsts = probespec.RegexpInsts(spec.Body)
	}
	if p.tls {
		// With neither sni= nor host= the server name is the target IP:
		// crypto/tls sends no SNI for it, and clientTLSConfig verifies the
		// chain alone, as the tls probe does.
		sni := spec.SNI
		if sni == "" {
			sni = spec.Host
		}
		p.tlsCfg = clientTLSConfig(sni, spec.Verify, []string{"http/1.1"}, opts.RootCAs)
	}
	return p, nil
}

// httpHop is where one request of a probe goes: the target, or where a
// redirect pointed.
type httpHop struct {
	// addr is the address to dial when name is empty.
	addr netip.AddrPort
	// name is a host name (or IP literal) from a redirect, resolved when
	// the hop is dialed; port goes with it.
	name string
	port uint16
	// tlsCfg is nil for plain http.
	tlsCfg *tls.Config
}

// httpConn is the connection of one hop.
type httpConn struct {
	// conn is the TCP connection, or the TLS client over it.
	conn net.Conn
	tls  *tls.Conn
	rd   httpConnReader
	br   *bufio.Reader
	bw   *bufio.Writer
	// stop releases the hook that aborts blocked I/O when ctx is cancelled.
	stop func() bool
}

// httpBufs recycles httpConns with their buffers: a probe's 5 KiB of
// reader and writer would otherwise be garbage after every probe.
var httpBufs = sync.Pool{New: func() any {
	c := &httpConn{}
	c.br = bufio.NewReaderSize(&c.rd, 4096)
	c.bw = bufio.NewWriterSize(nil, 1024)
	return c
}}

// close ends the connection and recycles its buffers; nothing read from
// the connection may be used afterwards.
func (c *httpConn) close() {
	c.stop()
	// For https this sends close_notify, so the server sees an orderly end.
	_ = c.conn.Close()
	*c = httpConn{br: c.br, bw: c.bw}
	c.br.Reset(&c.rd)
	c.bw.Reset(nil)
	httpBufs.Put(c)
}

// httpConnReader is what an httpConn's bufio.Reader reads from. It notes
// when the first byte of the answer arrived and bounds the bytes response
// headers may take.
type httpConnReader struct {
	conn  net.Conn
	first time.Time
	// left is how many more bytes the response headers may take; it is
	// negative while a body is read.
	left int64
	// timeout is the deadline error a read met, if one did. net/textproto
	// reports a header line cut short by the deadline as malformed, so
	// the cause is kept here.
	timeout error
}

func (r *httpConnReader) Read(b []byte) (int, error) {
	if r.left == 0 {
		return 0, errHeadersTooLarge
	}
	if r.left > 0 && int64(len(b)) > r.left {
		b = b[:r.left]
	}
	n, err := r.conn.Read(b)
	if n > 0 {
		if r.first.IsZero() {
			r.first = time.Now()
		}
		if r.left > 0 {
			r.left -= int64(n)
		}
	}
	if err != nil && r.timeout == nil && isTimeout(err) {
		r.timeout = err
	}
	return n, err
}

// Probe sends the spec's request to target with the spec's Host header and
// checks the certificate (https), the status, the headers and the first
// 64 KiB of the body.
func (p *httpProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	return timed(ctx, func(ctx context.Context, start time.Time) Result {
		var tm Timings
		res := p.probe(ctx, target, start, &tm)
		res.Timings = tm
		return res
	})
}

// probe follows the request through its redirects and checks the final
// response. Each hop records its phases in tm, so the timings are those of
// the last connection, as each hop's phases overwrite the last hop's.
func (p *httpProber) probe(ctx context.Context, target netip.AddrPort, start time.Time, tm *Timings) Result {
	req := p.req
	if req.Host == "" {
		r := *req
		r.Host = target.String()
		req = &r
	}
	hop := httpHop{addr: target, tlsCfg: p.tlsCfg}
	// base is the absolute URL of req, which redirects resolve against; it
	// is built only when a probe meets its first redirect.
	var base *url.URL
	for sent := 1; ; sent++ {
		c, resp, fail := p.exchange(ctx, hop, req, start, tm)
		if c == nil {
			return fail
		}
		method, redirect := redirectMethod(req.Method, resp.StatusCode)
		var loc string
		if redirect {
			loc = resp.Header.Get("Location")
		}
		if loc == "" {
			res := p.check(ctx, c, resp)
			c.close()
			return res
		}
		if base == nil {
			base = p.absURL(target)
		}
		next, err := base.Parse(loc)
		if err != nil {
			c.close()
			// net/http's Client failed on a bad Location even when it was
			// not going to follow it; probes keep reporting what they did.
			return Result{Outcome: L7RSP, Err: fmt.Errorf("reading response: failed to parse Location header %q: %w", loc, err)}
		}
		if !p.spec.Follow {
			res := p.check(ctx, c, resp)
			c.close()
			return res
		}
		// The redirect's body is not read: the connection is not reused.
		c.close()
		if sent >= httpMaxRedirects {
			return Result{Outcome: L7RSP, Err: fmt.Errorf("following redirects: %w", errTooManyRedirects)}
		}
		nextReq, nextHop, fail := p.redirect(req, base, loc, next, method, hop)
		if nextReq == nil {
			return fail
		}
		req, hop, base = nextReq, nextHop, next
	}
}

// absURL returns the absolute URL of the first request of a probe.
func (p *httpProber) absURL(target netip.AddrPort) *url.URL {
	u := *p.req.URL
	u.Scheme = "http"
	if p.tls {
		u.Scheme = "https"
	}
	u.Host = target.String()
	return &u
}

// redirectMethod returns the method a redirect with status code is
// followed with, and whether code is a redirect at all. Like net/http's
// Client, 301, 302 and 303 turn methods other than HEAD into GET.
func redirectMethod(method string, code int) (string, bool) {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther:
		if method != http.MethodGet && method != http.MethodHead {
			return http.MethodGet, true
		}
		return method, true
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return method, true
	}
	return "", false
}

// redirect builds the request and hop that follow req, sent to base,
// through a Location header loc resolved as next. A Location without a
// scheme keeps the Host header, so a redirect to "/login" reaches the same
// virtual host; one with a scheme names the host it wants.
func (p *httpProber) redirect(req *http.Request, base *url.URL, loc string, next *url.URL, method string, hop httpHop) (*http.Request, httpHop, Result) {
	if next.Scheme != "http" && next.Scheme != "https" {
		return nil, hop, Result{Outcome: L7RSP, Err: fmt.Errorf("reading response: unsupported protocol scheme %q", next.Scheme)}
	}
	if next.Host == "" {
		return nil, hop, Result{Outcome: L7RSP, Err: fmt.Errorf("reading response: no host in redirect to %q", loc)}
	}
	host := ""
	if req.Host != "" && req.Host != base.Host {
		if u, err := url.Parse(loc); err == nil && !u.IsAbs() {
			host = req.Host
		}
	}
	hdr := http.Header{"User-Agent": httpUserAgent}
	// As browsers do, and net/http's Client did, no Referer leaks an https
	// URL into plain http.
	if base.Scheme != "https" || next.Scheme != "http" {
		ref := *base
		ref.User = nil
		hdr["Referer"] = []string{ref.String()}
	}
	nextReq := &http.Request{
		Method:     method,
		URL:        next,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       host,
		Close:      true,
	}

	name, port, err := hostPort(next)
	if err != nil {
		return nil, hop, Result{Outcome: L4CON, Err: fmt.Errorf("connecting: %w", err)}
	}
	nextHop := hop
	// The same host and port is the same server: redialing the address
	// already known keeps a redirect on the target it was sent from.
	if baseName, basePort, _ := hostPort(base); name != baseName || port != basePort {
		nextHop = httpHop{name: name, port: port}
	}
	nextHop.tlsCfg = nil
	if next.Scheme == "https" {
		nextHop.tlsCfg = p.hopTLSConfig(nextHop)
	}
	return nextReq, nextHop, Result{}
}

// hostPort returns the host name and port u points to; the port is the
// scheme's default when u names none.
func hostPort(u *url.URL) (string, uint16, error) {
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if s := u.Port(); s != "" {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return "", 0, fmt.Errorf("invalid port %q in %s", s, u.Host)
		}
		port = uint16(n)
	}
	return u.Hostname(), port, nil
}

// hopTLSConfig is the TLS configuration of a redirect hop. An https probe
// keeps its configured server name, and sends the hop's host name only when
// it has none, as net/http's Transport did; an http probe redirected to
// https verifies the server as any HTTP client would.
func (p *httpProber) hopTLSConfig(hop httpHop) *tls.Config {
	if !p.tls {
		name := hop.name
		if name == "" {
			name = hop.addr.Addr().WithZone("").String()
		}
		return clientTLSConfig(name, true, []string{"http/1.1"}, p.opts.RootCAs)
	}
	if p.tlsCfg.ServerName != "" || hop.name == "" {
		return p.tlsCfg
	}
	if _, err := netip.ParseAddr(hop.name); err == nil {
		// crypto/tls sends no SNI for an IP.
		return p.tlsCfg
	}
	cfg := p.tlsCfg.Clone()
	cfg.ServerName = hop.name
	return cfg
}

// exchange connects for one hop, sends req and reads the response headers,
// recording the phases in tm. It returns the open connection and the
// response, or a nil connection and the failed Result.
func (p *httpProber) exchange(ctx context.Context, hop httpHop, req *http.Request, start time.Time, tm *Timings) (*httpConn, *http.Response, Result) {
	tcp, err := p.dial(ctx, hop)
	if err != nil {
		err = abortCause(ctx, err)
		return nil, nil, Result{Outcome: dialOutcome(err), Err: fmt.Errorf("connecting: %w", err)}
	}
	tm.Connect = time.Since(start)
	deadline, _ := ctx.Deadline()
	_ = tcp.SetDeadline(deadline)

	c := httpBufs.Get().(*httpConn)
	c.conn = tcp
	c.stop = abortOnCancel(ctx, tcp)
	if hop.tlsCfg != nil {
		c.tls = tls.Client(tcp, hop.tlsCfg)
		c.conn = c.tls
		if err := c.tls.HandshakeContext(ctx); err != nil {
			c.close()
			err = abortCause(ctx, err)
			res := Result{Outcome: L6ERR, Err: fmt.Errorf("tls handshake: %w", err)}
			if isTimeout(err) {
				res.Outcome = L6TOUT
			}
			return nil, nil, res
		}
		tm.TLS = time.Since(start)
	}
	c.rd.conn = c.conn
	c.bw.Reset(c.conn)

	resp, err := c.roundTrip(req)
	if !c.rd.first.IsZero() {
		tm.FirstByte = c.rd.first.Sub(start)
	}
	if err != nil {
		if c.rd.timeout != nil {
			err = c.rd.timeout
		}
		noAnswer := c.rd.first.IsZero()
		c.close()
		return nil, nil, answerFailed(abortCause(ctx, err), noAnswer)
	}
	return c, resp, Result{}
}

// dial connects to the hop's address, or to the first address its name
// resolves to that accepts.
func (p *httpProber) dial(ctx context.Context, hop httpHop) (*net.TCPConn, error) {
	if hop.name == "" {
		return dialTCP(ctx, p.opts, hop.addr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(hop.name); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", hop.name)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", hop.name, err)
		}
	}
	// A redirect to a name leaves the port the Service's proxy-protocol
	// is about: that server gets a bare connection.
	opts := p.opts
	opts.proxyHeader = nil
	err := fmt.Errorf("resolving %s: no usable address", hop.name)
	for _, ip := range ips {
		ip = ip.Unmap()
		// A source address of one family cannot reach the other.
		if p.opts.LocalAddr.IsValid() && ip.Is4() != p.opts.LocalAddr.Unmap().Is4() {
			continue
		}
		var conn *net.TCPConn
		if conn, err = dialTCP(ctx, opts, netip.AddrPortFrom(ip, hop.port)); err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// roundTrip writes req and reads the final response's headers, skipping
// informational (1xx) responses as net/http's Transport does; a 101
// Switching Protocols is final. The headers of all of them share one
// httpHeaderLimit, which bounds how many a server can send.
func (c *httpConn) roundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	c.rd.left = httpHeaderLimit
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			// The body is bounded by the probe's limit, not this one.
			c.rd.left = -1
			return resp, nil
		}
	}
}

// abortCause returns ctx's error in place of the expired deadline with which
// abortOnCancel interrupts I/O, so a cancelled probe does not read as a
// timeout.
func abortCause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) && errors.Is(err, os.ErrDeadlineExceeded) {
		return ctxErr
	}
	return err
}

// answerFailed classifies an error from sending the request or reading the
// response headers; noAnswer is true when not a byte of answer arrived.
func answerFailed(err error, noAnswer bool) Result {
	// http.ReadResponse reports a connection closed before the status line
	// as unexpected, but a close before any answer is an ordinary EOF.
	if noAnswer && errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	switch {
	case isTimeout(err):
		return Result{Outcome: L7TOUT, Err: fmt.Errorf("waiting for response headers: %w", err)}
	case errors.Is(err, io.EOF):
		return Result{Outcome: L7RSP, Err: fmt.Errorf("reading response: server closed the connection: %w", err)}
	default:
		return Result{Outcome: readOutcome(err), Err: fmt.Errorf("reading response: %w", err)}
	}
}

// check checks the final response, read from c: the certificate, the
// status, the headers and the body.
func (p *httpProber) check(ctx context.Context, c *httpConn, resp *http.Response) Result {
	var res Result
	res.Detail = "HTTP " + strconv.Itoa(resp.StatusCode)
	if c.tls != nil {
		res.TLS = tlsInfo(c.tls.ConnectionState(), p.verify)
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
	// The body is read even when nothing matches it: a server that cannot
	// finish its answer before the deadline is not working.
	body, err := io.ReadAll(io.LimitReader(resp.Body, httpBodyLimit))
	if err != nil {
		err = abortCause(ctx, err)
		res.Outcome, res.Err = readOutcome(err), fmt.Errorf("reading body: %w", err)
		return res
	}
	if p.spec.Body == nil {
		res.Outcome = L7OK
		return res
	}
	matched, err := matchBy(ctx, p.spec.Body, p.bodyInsts, body)
	if err != nil {
		res.Outcome, res.Err = readOutcome(err), fmt.Errorf("matching body: %w", err)
		return res
	}
	if !matched {
		res.Outcome = L7RSP
		res.Err = fmt.Errorf("body does not match %q (%d bytes read)", p.spec.Body.String(), len(body))
		return res
	}
	res.Outcome = L7OK
	return res
}

// matchCheapSteps is the cost, in program instructions times input bytes,
// up to which matchBy matches without watching the deadline: well under a
// millisecond of work (about 6 ns a step on one core).
const matchCheapSteps = 1 << 16

// matchCheckEvery is how many runes matchBy's reader hands out between two
// looks at the deadline.
const matchCheckEvery = 64

// matchBy reports whether re matches b, or returns ctx's error if ctx ends
// first. Go's regexp runs in time linear in the input, but the factor is
// the program size, and a match cannot be interrupted: an expensive one is
// fed through a reader that ends the input when ctx ends.
// insts is re's program size (probespec.RegexpInsts).
func matchBy(ctx context.Context, re *regexp.Regexp, insts int, b []byte) (bool, error) {
	if lit, whole := re.LiteralPrefix(); whole {
		// The most common expectation, such as "ok": a plain search.
		return bytes.Contains(b, []byte(lit)), nil
	}
	if int64(len(b))*int64(insts) <= matchCheapSteps {
		return re.Match(b), nil
	}
	r := &deadlineRuneReader{ctx: ctx, b: b}
	r.deadline, r.hasDeadline = ctx.Deadline()
	matched := re.MatchReader(r)
	if r.err != nil {
		return false, r.err
	}
	return matched, nil
}

// deadlineRuneReader reads the runes of b until ctx ends, when it stops
// with err set.
type deadlineRuneReader struct {
	ctx         context.Context
	deadline    time.Time
	hasDeadline bool
	b           []byte
	off         int
	count       int
	err         error
}

func (r *deadlineRuneReader) ReadRune() (rune, int, error) {
	if r.err != nil {
		return 0, 0, r.err
	}
	if r.count++; r.count%matchCheckEvery == 0 {
		if err := r.ctx.Err(); err != nil {
			r.err = fmt.Errorf("after %d of %d bytes: %w", r.off, len(r.b), err)
			return 0, 0, r.err
		}
		if r.hasDeadline && !time.Now().Before(r.deadline) {
			r.err = fmt.Errorf("after %d of %d bytes: %w", r.off, len(r.b), context.DeadlineExceeded)
			return 0, 0, r.err
		}
	}
	if r.off >= len(r.b) {
		return 0, 0, io.EOF
	}
	c, size := utf8.DecodeRune(r.b[r.off:])
	r.off += size
	return c, size, nil
}

// checkHeader requires a header named hm.Name with a value matching
// hm.Value. The values are left out of the error: headers such as
// Set-Cookie may carry secrets.
func checkHeader(h http.Header, hm probespec.HeaderMatch) error {
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
