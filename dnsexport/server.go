package dnsexport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"k8s.io/klog/v2"
)

// Config configures a Server.
type Config struct {
	// Zone is the zone served; Build's rules apply.
	Zone ZoneConfig
	// Listen is the UDP and TCP address, e.g. ":53" (the default) or
	// "127.0.0.1:0" for a free port.
	Listen string
	// MaxUDPSize is the largest UDP response sent to an EDNS0 client,
	// and the size advertised; default 1232 (DNS flag day 2020).
	// Clients without EDNS0 get at most 512 bytes.
	MaxUDPSize uint16
	// TransferKeys are the hmac-sha256 TSIG keys allowed to transfer
	// the zone (AXFR, IXFR). Without keys nobody may transfer it.
	TransferKeys []TSIGKey
	// Secondaries are sent a NOTIFY whenever the zone changes.
	Secondaries []Secondary
	// NotifyAttempts bounds the NOTIFY messages sent to one secondary
	// for one change; default 5. NotifyTimeout is how long each waits for
	// an answer; default 1s. Attempts are spaced by doubling pauses
	// starting at NotifyTimeout.
	NotifyAttempts int
	NotifyTimeout  time.Duration
	// RateLimit limits UDP responses per source network.
	RateLimit RateLimit
	// SerialFile, when set, keeps the last SOA serial across restarts;
	// see the serial rules in serial.go.
	SerialFile string
	// UDPSockets is the number of UDP sockets (SO_REUSEPORT where
	// available), each read by one goroutine; default GOMAXPROCS.
	UDPSockets int
	// Metrics, when set, are updated by the server.
	Metrics *Metrics
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Secondary is a server that transfers the zone from this one.
type Secondary struct {
	// Addr is where its NOTIFY goes, e.g. 192.0.2.53:53.
	Addr netip.AddrPort
	// Key names the TransferKeys entry NOTIFY is signed with; empty
	// sends it unsigned.
	Key string
}

// Server is an authoritative DNS server for one zone. It answers only
// after the first Update, so a restarting controller never serves (or
// transfers) an empty zone before its caches are filled; until then
// queries in the zone get SERVFAIL.
type Server struct {
	cfg     Config
	zoneCfg ZoneConfig
	origin  string
	zone    atomic.Pointer[Zone]
	keys    keyring
	limiter *limiter
	serials *serials
	// serialIgnored says why the serial file was ignored, if it was;
	// Run logs it.
	serialIgnored error
	// heldSerial, held by heldBy, is the highest serial a secondary
	// held when the serial file was ignored; 0 if none.
	heldSerial uint32
	heldBy     netip.AddrPort
	metrics    *Metrics
	now        func() time.Time
	// maxAnswerAddrs is MaxAnswerAddrs; tests lift it.
	maxAnswerAddrs int
	// logger is Run's; replies that fail are logged with it.
	logger atomic.Pointer[klog.Logger]
	// lastReplyErrorLog rate-limits those logs (Unix nanoseconds).
	lastReplyErrorLog atomic.Int64
	// notify is signalled (never blocking) when the zone changes.
	notify chan struct{}

	updateMu sync.Mutex

	listenMu sync.Mutex
	udp      []*net.UDPConn
	tcp      net.Listener
	addr     netip.AddrPort
}

// NewServer checks cfg and returns a server that is not listening yet.
func NewServer(cfg Config) (*Server, error) {
	if _, _, err := Build(cfg.Zone, nil); err != nil {
		return nil, err
	}
	origin, _ := ParseOrigin(cfg.Zone.Origin)
	if cfg.Listen == "" {
		cfg.Listen = ":53"
	}
	if cfg.MaxUDPSize == 0 {
		cfg.MaxUDPSize = 1232
	}
	cfg.MaxUDPSize = max(cfg.MaxUDPSize, dns.MinMsgSize)
	if cfg.NotifyAttempts <= 0 {
		cfg.NotifyAttempts = 5
	}
	if cfg.NotifyTimeout <= 0 {
		cfg.NotifyTimeout = time.Second
	}
	if cfg.UDPSockets <= 0 {
		cfg.UDPSockets = runtime.GOMAXPROCS(0)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	keys, err := newKeyring(cfg.TransferKeys)
	if err != nil {
		return nil, err
	}
	for _, sec := range cfg.Secondaries {
		if !sec.Addr.IsValid() {
			return nil, fmt.Errorf("secondary %s: invalid address", sec.Addr)
		}
		if sec.Key != "" {
			name, err := canonicalName(sec.Key)
			if err != nil || keys[name] == nil {
				return nil, fmt.Errorf("secondary %s: unknown tsig key %q", sec.Addr, sec.Key)
			}
		}
	}
	serials, serialIgnored, err := newSerials(cfg.SerialFile, now)
	if err != nil {
		return nil, err
	}
	srv := &Server{
		cfg:            cfg,
		zoneCfg:        cfg.Zone,
		origin:         origin,
		keys:           keys,
		limiter:        newLimiter(cfg.RateLimit),
		serials:        serials,
		serialIgnored:  serialIgnored,
		metrics:        cfg.Metrics,
		maxAnswerAddrs: MaxAnswerAddrs,
		now:            now,
		notify:         make(chan struct{}, 1),
	}
	if serialIgnored != nil && len(cfg.Secondaries) > 0 {
		// The last serial is lost, but the secondaries know the one
		// they hold: pass it, or they would ignore the new zone.
		srv.heldSerial, srv.heldBy = srv.secondarySerial(context.Background())
		srv.serials.atLeast(srv.heldSerial)
	}
	return srv, nil
}

// Update builds the zone from services and serves it. When the content
// changed it takes a new serial and NOTIFYs the secondaries; otherwise it
// changes nothing. problems are per-Service (*ServiceError) and never stop
// the update; err means the zone was not updated and Update should be
// retried.
func (s *Server) Update(services []Service) (problems []error, err error) {
	z, problems, err := Build(s.zoneCfg, services)
	if err != nil {
		return nil, err
	}
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	if z.SameContent(s.zone.Load()) {
		return problems, nil
	}
	serial, err := s.serials.next()
	if err != nil {
		return problems, fmt.Errorf("updating zone %s: %w", s.origin, err)
	}
	z = z.WithSerial(serial)
	s.zone.Store(z)
	s.metrics.observeZone(z)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return problems, nil
}

// Zone returns the zone being served, nil before the first Update.
func (s *Server) Zone() *Zone { return s.zone.Load() }

// Addr returns the address the server listens on, once Listen returned.
func (s *Server) Addr() netip.AddrPort {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	return s.addr
}

// Listen opens the UDP and TCP sockets, on the same port. Run calls it
// when it was not called before.
func (s *Server) Listen() error {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.tcp != nil {
		return nil
	}
	host, port, err := net.SplitHostPort(s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("dns listen address %q: %w", s.cfg.Listen, err)
	}
	// With port 0 the TCP port is picked first and UDP may find it
	// taken; try a few times.
	var lastErr error
	for range 10 {
		tcp, err := net.Listen("tcp", net.JoinHostPort(host, port))
		if err != nil {
			return fmt.Errorf("listening on tcp %s: %w", s.cfg.Listen, err)
		}
		ap := tcp.Addr().(*net.TCPAddr).AddrPort()
		udp, err := listenUDP(net.JoinHostPort(host, fmt.Sprint(ap.Port())), s.cfg.UDPSockets)
		if err != nil {
			tcp.Close()
			lastErr = err
			if port != "0" {
				break
			}
			continue
		}
		s.tcp, s.udp = tcp, udp
		s.addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		return nil
	}
	return fmt.Errorf("listening on udp %s: %w", s.cfg.Listen, lastErr)
}

// Run serves DNS until ctx is done, then closes the sockets.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	s.logger.Store(&logger)
	if s.serialIgnored != nil {
		logger.Error(s.serialIgnored, "Ignoring the serial file; the serial starts from the clock", "serialFile", s.cfg.SerialFile)
		if s.heldSerial != 0 {
			logger.Info("Asked the secondaries for their serial: the new one starts past the highest", "secondary", s.heldBy, "secondarySerial", s.heldSerial)
		}
	}
	logger.Info("Serving DNS", "zone", s.origin, "address", s.Addr())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	tcpSrv := &dns.Server{
		Listener:     writeDeadlineListener{Listener: s.tcp, timeout: tcpWriteTimeout},
		Handler:      dns.HandlerFunc(s.serveTCP),
		TsigProvider: s.keys,
		ReadTimeout:  tcpReadTimeout,
		IdleTimeout:  func() time.Duration { return tcpIdleTimeout },
		// Any number of queries on one connection (RFC 7766): miekg/dns
		// would close it after 128, with the queries already sent
		// unread, which makes the kernel reset it.
		MaxTCPQueries: -1,
		// The rules that come before an answer are readRequest's, for
		// UDP and TCP alike: tcpReader applies them, and miekg/dns's
		// own (DefaultMsgAcceptFunc) would differ.
		DecorateReader: func(r dns.Reader) dns.Reader { return tcpReader{r} },
		MsgAcceptFunc:  func(dns.Header) dns.MsgAcceptAction { return dns.MsgAccept },
		// miekg/dns answers a query it rejects with the query's own
		// header bits, RA included; with the two settings above it
		// should reject none, but no reply of this server offers
		// recursion.
		DecorateWriter: func(w dns.Writer) dns.Writer { return noRecursionWriter{w} },
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1+len(s.udp))
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := tcpSrv.ActivateAndServe(); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("serving dns over tcp: %w", err)
		}
	}()
	for _, c := range s.udp {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.serveUDP(c); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.notifyLoop(ctx)
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	_ = tcpSrv.ShutdownContext(shutdownCtx)
	// ShutdownContext does nothing when ActivateAndServe has not marked
	// the server started yet (ctx done right after Run began); closing the
	// listener ends ActivateAndServe either way.
	s.tcp.Close()
	for _, c := range s.udp {
		c.Close()
	}
	wg.Wait()
	s.listenMu.Lock()
	s.tcp, s.udp = nil, nil
	s.listenMu.Unlock()
	return err
}

// udpBatch is how many packets one system call reads or writes at most
// (recvmmsg/sendmmsg on Linux); under load it saves most system calls.
const udpBatch = 32

// serveUDP reads and answers queries on c until c is closed.
func (s *Server) serveUDP(c *net.UDPConn) error {
	pc := ipv4.NewPacketConn(c)
	in := make([]ipv4.Message, udpBatch)
	out := make([]ipv4.Message, udpBatch)
	bufs := make([][]byte, udpBatch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, 4096)}
		out[i].Buffers = [][]byte{nil}
		bufs[i] = make([]byte, 0, 4096)
	}
	keyBuf := make([]byte, 0, 260)
	for {
		n, err := pc.ReadBatch(in, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("reading dns over udp: %w", err)
		}
		k := 0
		for _, msg := range in[:n] {
			ua, ok := msg.Addr.(*net.UDPAddr)
			if !ok {
				continue
			}
			resp := s.handleUDP(msg.Buffers[0][:msg.N], ua.AddrPort(), bufs[k][:0], keyBuf)
			if resp == nil {
				continue
			}
			out[k].Buffers[0] = resp
			out[k].Addr = ua
			k++
		}
		for sent := 0; sent < k; {
			w, err := pc.WriteBatch(out[sent:k], 0)
			if err != nil {
				// A failed write is the client's loss; skip that one.
				w = max(w, 1)
			}
			sent += w
		}
	}
}

// handleUDP answers one UDP packet; it returns the response, appended to
// out, or nil to send nothing.
func (s *Server) handleUDP(packet []byte, src netip.AddrPort, out, keyBuf []byte) []byte {
	if len(packet) < 12 || packet[2]&0x80 != 0 {
		// Too short for a header, or a response: never answer, so
		// that two servers cannot be made to talk to each other forever.
		return nil
	}
	action := s.limiter.allow(src.Addr(), s.now())
	if action == rateDrop {
		s.metrics.observeRateLimit(action)
		return nil
	}
	if action == rateAllow {
		if b := s.fastAnswer(packet, out, keyBuf); b != nil {
			return b
		}
	}
	req, reply := readRequest(packet, out)
	if req == nil {
		if action == rateSlip {
			return nil
		}
		return reply
	}
	if action == rateSlip {
		s.metrics.observeRateLimit(action)
		m := new(dns.Msg)
		m.SetReply(req)
		m.Truncated = true
		b, err := m.PackBuffer(out)
		if err != nil {
			return nil
		}
		return b
	}
	var tsigStatus error
	if req.IsTsig() != nil {
		tsigStatus = dns.TsigVerifyWithProvider(packet, s.keys, "", false)
	}
	m := s.respond(req, true, tsigStatus)
	if t := req.IsTsig(); t != nil {
		s.setTsig(m, req, tsigStatus)
		if unsignedTSIG(m) {
			b, err := m.PackBuffer(out)
			if err != nil {
				return s.serverFailure(req, out, err)
			}
			return b
		}
		b, _, err := dns.TsigGenerateWithProvider(m, s.keys, t.MAC, false)
		if err != nil {
			return s.serverFailure(req, out, err)
		}
		if len(b) > udpLimit(req, s.cfg.MaxUDPSize) {
			m.Answer, m.Ns, m.Extra = nil, nil, nil
			m.Truncated = true
			s.setTsig(m, req, tsigStatus)
			if b, _, err = dns.TsigGenerateWithProvider(m, s.keys, t.MAC, false); err != nil {
				return s.serverFailure(req, out, err)
			}
		}
		return append(out, b...)
	}
	b, err := m.PackBuffer(out)
	if err != nil {
		return s.serverFailure(req, out, err)
	}
	return b
}

// serverFailure answers req with SERVFAIL, unsigned, after its reply
// failed to pack or sign with err: the client learns at once that it
// will get no answer here instead of timing out.
func (s *Server) serverFailure(req *dns.Msg, out []byte, err error) []byte {
	s.replyFailed(req, err)
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeServerFailure)
	b, err := m.PackBuffer(out)
	if err != nil {
		return nil
	}
	return b
}

// replyErrorLogEvery bounds the logs of failed replies: a query that
// makes one fail can be repeated at will.
const replyErrorLogEvery = 10 * time.Second

// replyFailed counts a reply that could not be sent as built, and logs
// it unless another was logged within replyErrorLogEvery.
func (s *Server) replyFailed(req *dns.Msg, err error) {
	s.metrics.observeReplyError()
	now := time.Now().UnixNano()
	last := s.lastReplyErrorLog.Load()
	if now-last < int64(replyErrorLogEvery) || !s.lastReplyErrorLog.CompareAndSwap(last, now) {
		return
	}
	logger := klog.Background()
	if l := s.logger.Load(); l != nil {
		logger = *l
	}
	var name, qtype string
	if len(req.Question) > 0 {
		name, qtype = req.Question[0].Name, dns.Type(req.Question[0].Qtype).String()
	}
	logger.Error(err, "Answered SERVFAIL: the reply could not be sent as built", "name", name, "type", qtype)
}

// readRequest applies the first rules to a request as it came off the
// wire, over UDP or TCP alike. A packet too short for a header, or a
// response, gets no answer: two servers must not be made to talk to each
// other for ever. A request that does not unpack, or holds fewer records
// than its header counts, gets FORMERR (appended to out). Otherwise it
// returns the request, and answerCapped applies the rules on its content
// (malformed).
func readRequest(packet, out []byte) (req *dns.Msg, reply []byte) {
	if len(packet) < 12 || packet[2]&0x80 != 0 {
		return nil, nil
	}
	req = new(dns.Msg)
	if err := req.Unpack(packet); err != nil {
		return nil, formErr(packet, out)
	}
	// miekg/dns stops quietly where the data ends, so a header that
	// counts more records than the packet holds still unpacks.
	count := func(i int) int { return int(packet[i])<<8 | int(packet[i+1]) }
	if count(4) != len(req.Question) || count(6) != len(req.Answer) || count(8) != len(req.Ns) || count(10) != len(req.Extra) {
		return nil, formErr(packet, out)
	}
	return req, nil
}

// malformed reports whether req, which unpacked, breaks a rule on where
// its OPT and TSIG records may be; it is answered FORMERR:
//   - at most one OPT record, owned by the root, in the additional
//     section only (RFC 6891 section 6.1.1);
//   - a TSIG record only as the last one of the additional section
//     (RFC 8945 section 5.1).
//
// Other records in a query's answer or authority section are ignored, as
// BIND 9 ignores them: a query has no use for them, and only an IXFR
// (its SOA, RFC 1995) or a NOTIFY (RFC 1996) reads them.
func malformed(req *dns.Msg) bool {
	var opts int
	for i, rr := range req.Extra {
		switch h := rr.Header(); h.Rrtype {
		case dns.TypeOPT:
			if opts++; opts > 1 || h.Name != "." {
				return true
			}
		case dns.TypeTSIG:
			if i != len(req.Extra)-1 {
				return true
			}
		}
	}
	for _, section := range [][]dns.RR{req.Answer, req.Ns} {
		for _, rr := range section {
			if t := rr.Header().Rrtype; t == dns.TypeOPT || t == dns.TypeTSIG {
				return true
			}
		}
	}
	return false
}

// formErr answers a query that could not be parsed with FORMERR, echoing
// only its ID and opcode.
func formErr(packet, out []byte) []byte {
	m := new(dns.Msg)
	m.Id = uint16(packet[0])<<8 | uint16(packet[1])
	m.Response = true
	m.Opcode = int(packet[2]>>3) & 0xF
	m.Rcode = dns.RcodeFormatError
	b, err := m.PackBuffer(out)
	if err != nil {
		return nil
	}
	return b
}

// udpLimit is the largest UDP response req may get.
func udpLimit(req *dns.Msg, maxSize uint16) int {
	if opt := req.IsEdns0(); opt != nil {
		return int(min(max(opt.UDPSize(), dns.MinMsgSize), maxSize))
	}
	return dns.MinMsgSize
}

// serveTCP answers one query on a TCP connection; miekg/dns verified its
// TSIG, if any.
func (s *Server) serveTCP(w dns.ResponseWriter, req *dns.Msg) {
	if req.Opcode == dns.OpcodeQuery && len(req.Question) == 1 {
		switch req.Question[0].Qtype {
		case dns.TypeAXFR, dns.TypeIXFR:
			s.transfer(w, req)
			return
		}
	}
	m := s.respond(req, false, w.TsigStatus())
	sign := func(m *dns.Msg) *dns.Msg {
		s.setTsig(m, req, w.TsigStatus())
		return m
	}
	if err := writeMsg(w, sign(m)); err != nil {
		// The reply did not pack, sign or fit 64 KiB (then nothing was
		// sent), or the client is gone (then this fails too, unlogged).
		fail := new(dns.Msg)
		fail.SetRcode(req, dns.RcodeServerFailure)
		if writeMsg(w, sign(fail)) == nil {
			s.replyFailed(req, err)
		}
	}
}

// setTsig adds to m, the reply to req, the TSIG record it needs when req
// was signed; status is req's verification. A verified request gets a
// reply signed with its key (miekg/dns computes the MAC when the reply
// is packed). One that failed gets the record of RFC 8945 section 5.2
// that says why, so that the client (dig, a secondary's log) can tell:
// BADKEY for an unknown key or algorithm and BADSIG for a wrong MAC, both
// unsigned (no MAC), and BADTIME for a time outside the fudge, signed and
// carrying the server's time so the client can see the skew.
func (s *Server) setTsig(m, req *dns.Msg, status error) {
	t := req.IsTsig()
	if t == nil {
		return
	}
	now := s.now().Unix()
	if status == nil {
		m.SetTsig(t.Hdr.Name, dns.HmacSHA256, 300, now)
		return
	}
	m.SetTsig(t.Hdr.Name, t.Algorithm, t.Fudge, now)
	rr := m.IsTsig()
	switch {
	case errors.Is(status, dns.ErrSecret), errors.Is(status, dns.ErrKeyAlg):
		rr.Error = dns.RcodeBadKey
	case errors.Is(status, dns.ErrTime):
		rr.Error = dns.RcodeBadTime
		rr.TimeSigned = t.TimeSigned
		rr.OtherLen = 6
		rr.OtherData = fmt.Sprintf("%012x", uint64(now)&(1<<48-1))
	default:
		rr.Error = dns.RcodeBadSig
	}
}

// unsignedTSIG reports whether m carries a TSIG error record that is
// sent without a MAC (BADKEY, BADSIG).
func unsignedTSIG(m *dns.Msg) bool {
	t := m.IsTsig()
	return t != nil && (t.Error == dns.RcodeBadKey || t.Error == dns.RcodeBadSig)
}

// writeMsg writes m on a TCP connection. An unsigned TSIG error reply is
// packed as it is: miekg/dns's signing, which WriteMsg applies to every
// message with a TSIG record, leaves such a record unsigned as it should
// but zeroes its Time Signed, and dig then reports "clocks are
// unsynchronized" instead of the error.
func writeMsg(w dns.ResponseWriter, m *dns.Msg) error {
	if !unsignedTSIG(m) {
		return w.WriteMsg(m)
	}
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// TCP connection limits (docs/dns.md): the first request must arrive
// within tcpReadTimeout of the connection, each next one within
// tcpIdleTimeout of the previous answer, and every write of an answer must
// finish within tcpWriteTimeout. The number of requests on a connection
// is not limited.
const (
	tcpReadTimeout  = 2 * time.Second
	tcpIdleTimeout  = 8 * time.Second
	tcpWriteTimeout = 2 * time.Second
)

// tcpReader reads the requests of a TCP connection for miekg/dns under
// readRequest's rules: a request those rules answer (FORMERR) or drop is
// handled here and the next one read, so that UDP and TCP answer alike.
type tcpReader struct{ dns.Reader }

func (r tcpReader) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	for {
		packet, err := r.Reader.ReadTCP(conn, timeout)
		if err != nil {
			return nil, err
		}
		req, reply := readRequest(packet, nil)
		if req != nil {
			return packet, nil
		}
		if reply == nil {
			continue
		}
		msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reply)), uint16(len(reply)))
		if _, err := conn.Write(append(msg, reply...)); err != nil {
			return nil, err
		}
	}
}

// writeDeadlineListener hands out connections on which every write must
// finish within timeout, and a write that fails closes the connection.
// miekg/dns sets read deadlines only (its WriteTimeout is not used): a
// client that sends queries and never reads would hold a server goroutine
// for ever once the socket buffers are full, and after a failed write the
// stream of messages is broken anyway.
type writeDeadlineListener struct {
	net.Listener
	timeout time.Duration
}

func (l writeDeadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeDeadlineConn{Conn: c, timeout: l.timeout}, nil
}

type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	_ = c.SetWriteDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Write(b)
	if err != nil {
		c.Close()
	}
	return n, err
}

// noRecursionWriter clears RA in every TCP reply: this server never
// recurses, whatever the query's header said.
type noRecursionWriter struct{ dns.Writer }

func (w noRecursionWriter) Write(b []byte) (int, error) {
	if len(b) > 3 && b[3]&0x80 != 0 {
		// Only the reject path's copy of the query's header has RA;
		// the caller's buffer is left as it is.
		c := slices.Clone(b)
		c[3] &^= 0x80
		return w.Writer.Write(c)
	}
	return w.Writer.Write(b)
}

// respond builds the answer to req and counts it.
func (s *Server) respond(req *dns.Msg, udp bool, tsigStatus error) *dns.Msg {
	var capped bool
	m := s.answerCapped(req, udp, tsigStatus, &capped)
	if capped {
		s.metrics.observeCapped()
	}
	var qtype uint16
	if len(req.Question) == 1 {
		qtype = req.Question[0].Qtype
	}
	s.metrics.observeQuery(qtype, m.Rcode)
	return m
}

// answer builds the answer to req.
func (s *Server) answer(req *dns.Msg, udp bool, tsigStatus error) *dns.Msg {
	var capped bool
	return s.answerCapped(req, udp, tsigStatus, &capped)
}

// answerCapped builds the answer to req and sets *capped when it carries
// only a window of an RRset.
func (s *Server) answerCapped(req *dns.Msg, udp bool, tsigStatus error, capped *bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Compress = true
	// SetReply keeps RD, as RFC 1035 asks; RA stays 0: no recursion here.
	if len(req.Question) != 1 || malformed(req) {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := req.Question[0]
	if tsigStatus != nil {
		// Whatever was asked (query, transfer, NOTIFY): setTsig says why.
		m.Rcode = dns.RcodeNotAuth
		return m
	}
	switch req.Opcode {
	case dns.OpcodeQuery:
	case dns.OpcodeNotify:
		// This server is the primary; it takes no NOTIFY.
		m.Rcode = dns.RcodeRefused
		return m
	default:
		m.Rcode = dns.RcodeNotImplemented
		return m
	}
	opt := req.IsEdns0()
	if opt != nil {
		ropt := new(dns.OPT)
		ropt.Hdr.Name = "."
		ropt.Hdr.Rrtype = dns.TypeOPT
		ropt.SetUDPSize(s.cfg.MaxUDPSize)
		ropt.SetDo(opt.Do())
		m.Extra = []dns.RR{ropt}
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers
			return m
		}
	}
	qname := strings.ToLower(q.Name)
	if q.Qclass != dns.ClassINET || !dns.IsSubDomain(s.origin, qname) {
		m.Rcode = dns.RcodeRefused
		return m
	}
	z := s.zone.Load()
	if z == nil {
		m.Rcode = dns.RcodeServerFailure
		return m
	}
	switch q.Qtype {
	case dns.TypeAXFR:
		// Transfers are TCP only.
		m.Rcode = dns.RcodeRefused
		return m
	case dns.TypeIXFR:
		// Over UDP, an authenticated IXFR gets the SOA: the client
		// then transfers over TCP if its serial is older (RFC 1995).
		if req.IsTsig() == nil || qname != s.origin {
			m.Rcode = dns.RcodeRefused
			return m
		}
		m.Authoritative = true
		m.Answer = []dns.RR{z.soa}
		return m
	}
	r := z.lookup(qname, q.Qtype, req.Id, s.maxAnswerAddrs)
	if r.capped {
		*capped = true
	}
	m.Authoritative = true
	m.Rcode = r.rcode
	m.Answer = r.answer
	if q.Name != qname && len(r.answer) > 0 {
		// Echo the asker's spelling of the name (RFC 4343).
		m.Answer = make([]dns.RR, len(r.answer))
		for i, rr := range r.answer {
			c := dns.Copy(rr)
			c.Header().Name = q.Name
			m.Answer[i] = c
		}
	}
	m.Ns = r.ns
	m.Extra = append(r.extra[:len(r.extra):len(r.extra)], m.Extra...)
	if udp {
		m.Truncate(udpLimit(req, s.cfg.MaxUDPSize))
		// Truncate turns compression off when the answer fits without
		// it; compressed, the answer is as small as the fast path's.
		m.Compress = true
	}
	return m
}

// transfer answers AXFR and IXFR over TCP, to TSIG-authenticated clients
// only.
func (s *Server) transfer(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	typ := strings.ToLower(dns.TypeToString[q.Qtype])
	fail := func(rcode int, result string) {
		m := new(dns.Msg)
		m.SetRcode(req, rcode)
		s.setTsig(m, req, w.TsigStatus())
		s.metrics.observeQuery(q.Qtype, rcode)
		s.metrics.observeTransfer(typ, result)
		_ = writeMsg(w, m)
	}
	z := s.zone.Load()
	switch t := req.IsTsig(); {
	case !strings.EqualFold(q.Name, s.origin) || q.Qclass != dns.ClassINET:
		fail(dns.RcodeRefused, "refused")
		return
	case t == nil:
		fail(dns.RcodeRefused, "refused")
		return
	case w.TsigStatus() != nil:
		fail(dns.RcodeNotAuth, "notauth")
		return
	case z == nil:
		fail(dns.RcodeServerFailure, "error")
		return
	}
	t := req.IsTsig()
	send := func(rrs []dns.RR) error {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		m.Compress = true
		m.Answer = rrs
		m.SetTsig(t.Hdr.Name, dns.HmacSHA256, 300, s.now().Unix())
		if err := w.WriteMsg(m); err != nil {
			return err
		}
		// Later messages of a transfer are signed over the timers only
		// (RFC 8945 section 5.3.1).
		w.TsigTimersOnly(true)
		return nil
	}
	if q.Qtype == dns.TypeIXFR {
		if len(req.Ns) == 1 {
			if soa, ok := req.Ns[0].(*dns.SOA); ok && !serialLess(soa.Serial, z.Serial()) {
				s.metrics.observeQuery(q.Qtype, dns.RcodeSuccess)
				s.metrics.observeTransfer(typ, "uptodate")
				_ = send([]dns.RR{z.soa})
				return
			}
		}
		// No history is kept: an IXFR gets the whole zone, which RFC
		// 1995 section 4 allows.
	}
	rrs := z.Records()
	const perMessage = 200
	for len(rrs) > 0 {
		n := min(perMessage, len(rrs))
		if err := send(rrs[:n]); err != nil {
			s.metrics.observeTransfer(typ, "error")
			return
		}
		rrs = rrs[n:]
	}
	s.metrics.observeQuery(q.Qtype, dns.RcodeSuccess)
	s.metrics.observeTransfer(typ, "ok")
}
