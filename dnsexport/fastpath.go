package dnsexport

import (
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
)

// answerCache holds packed answers of one zone version to the common
// question shape: one question, no TSIG, at most an OPT record. A cached
// answer is sent after patching the ID, the RD and CD bits and the
// spelling of the question name; since every later copy of the name is a
// compression pointer to the question, the answer echoes the asker's
// spelling too. Only answers with data or NODATA are cached, so the
// number of entries is bounded by the zone's names times the types asked
// for, and by maxCachedAnswers.
type answerCache struct {
	mu sync.RWMutex
	m  map[string]*cachedAnswer
	n  atomic.Int32
}

type cachedAnswer struct {
	wire  []byte
	rcode int
}

const maxCachedAnswers = 1 << 16

func newAnswerCache() *answerCache {
	return &answerCache{m: make(map[string]*cachedAnswer)}
}

// simpleQuery is a query of the cacheable shape, parsed from the wire.
type simpleQuery struct {
	// key is the lower-case name, the type and the EDNS0 state.
	key []byte
	// qtype and the end of the question in the packet.
	qtype  uint16
	qend   int
	edns   bool
	do     bool
	udpMax int
}

// parseSimple parses packet as a cacheable query into q, using keyBuf for
// the key. It returns false for anything else, which takes the full path.
func parseSimple(packet []byte, q *simpleQuery, keyBuf []byte) bool {
	if len(packet) < 17 {
		return false
	}
	// QR=0, opcode QUERY, no AA/TC/Z, rcode 0; RD and CD are patched
	// in; AD in a query only asks for AD in the answer, never set here.
	if packet[2]&0xFE != 0 || packet[3]&0xCF != 0 {
		return false
	}
	if packet[4] != 0 || packet[5] != 1 || packet[6]|packet[7]|packet[8]|packet[9]|packet[10] != 0 || packet[11] > 1 {
		return false
	}
	key := keyBuf[:0]
	off := 12
	for {
		if off >= len(packet) {
			return false
		}
		l := int(packet[off])
		if l == 0 {
			off++
			break
		}
		if l > 63 || off+1+l > len(packet) || off-12+1+l > 254 {
			return false
		}
		for _, c := range packet[off+1 : off+1+l] {
			switch {
			case c >= 'A' && c <= 'Z':
				c += 'a' - 'A'
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				// Dots, escapes and binary labels take the full path,
				// whose presentation format escapes them.
				return false
			}
			key = append(key, c)
		}
		key = append(key, '.')
		off += 1 + l
	}
	if off+4 > len(packet) {
		return false
	}
	q.qtype = uint16(packet[off])<<8 | uint16(packet[off+1])
	if packet[off+2] != 0 || packet[off+3] != 1 { // class IN
		return false
	}
	switch q.qtype {
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeANY, dns.TypeOPT, dns.TypeTSIG:
		return false
	}
	off += 4
	q.qend = off
	q.edns, q.do, q.udpMax = false, false, dns.MinMsgSize
	if packet[11] == 1 {
		// Exactly one OPT: root name, type 41, version 0.
		if off+11 > len(packet) || packet[off] != 0 || packet[off+1] != 0 || packet[off+2] != 41 {
			return false
		}
		size := int(packet[off+3])<<8 | int(packet[off+4])
		if packet[off+5] != 0 || packet[off+6] != 0 { // extended rcode, version
			return false
		}
		rdlen := int(packet[off+9])<<8 | int(packet[off+10])
		if off+11+rdlen != len(packet) {
			return false
		}
		// Options must fill the data exactly; else the full path
		// answers FORMERR.
		for o := off + 11; o < len(packet); {
			if o+4 > len(packet) {
				return false
			}
			o += 4 + (int(packet[o+2])<<8 | int(packet[o+3]))
			if o > len(packet) {
				return false
			}
		}
		q.edns = true
		q.do = packet[off+7]&0x80 != 0
		q.udpMax = max(size, dns.MinMsgSize)
		off += 11 + rdlen
	}
	if off != len(packet) {
		return false
	}
	key = append(key, byte(q.qtype>>8), byte(q.qtype))
	switch {
	case q.do:
		key = append(key, 2)
	case q.edns:
		key = append(key, 1)
	default:
		key = append(key, 0)
	}
	q.key = key
	return true
}

// get returns the cached answer for q, or nil.
func (c *answerCache) get(key []byte) *cachedAnswer {
	c.mu.RLock()
	a := c.m[string(key)]
	c.mu.RUnlock()
	return a
}

func (c *answerCache) put(key []byte, a *cachedAnswer) {
	if c.n.Load() >= maxCachedAnswers {
		return
	}
	c.mu.Lock()
	if _, ok := c.m[string(key)]; !ok {
		c.m[string(key)] = a
		c.n.Add(1)
	}
	c.mu.Unlock()
}

// fill caches z's answer to q, built by the full path from a canonical
// question, without truncation.
func (s *Server) fill(z *Zone, q *simpleQuery) {
	name := string(q.key[:len(q.key)-3])
	if name == "" {
		name = "."
	}
	req := new(dns.Msg)
	req.SetQuestion(name, q.qtype)
	req.RecursionDesired = false
	if q.edns {
		req.SetEdns0(dns.DefaultMsgSize, q.do)
	}
	var capped bool
	m := s.answerCapped(req, false, nil, &capped)
	if m == nil || capped || s.zone.Load() != z {
		// A capped answer depends on the query ID: never cached.
		return
	}
	if m.Rcode != dns.RcodeSuccess {
		return
	}
	wire, err := m.Pack()
	if err != nil {
		return
	}
	z.answers.put(q.key, &cachedAnswer{wire: wire, rcode: m.Rcode})
}

// fastAnswer answers packet from the cache, appending to out; it returns
// nil when the packet needs the full path.
func (s *Server) fastAnswer(packet []byte, out []byte, keyBuf []byte) []byte {
	var q simpleQuery
	if !parseSimple(packet, &q, keyBuf) {
		return nil
	}
	z := s.zone.Load()
	if z == nil {
		return nil
	}
	a := z.answers.get(q.key)
	if a == nil {
		s.fill(z, &q)
		if a = z.answers.get(q.key); a == nil {
			return nil
		}
	}
	if len(a.wire) > min(q.udpMax, int(s.cfg.MaxUDPSize)) {
		return nil // needs truncation: the full path does it
	}
	out = append(out, a.wire...)
	out[0], out[1] = packet[0], packet[1]
	out[2] = out[2]&^0x01 | packet[2]&0x01 // RD
	out[3] = out[3]&^0x10 | packet[3]&0x10 // CD
	copy(out[12:q.qend], packet[12:q.qend])
	s.metrics.observeQuery(q.qtype, a.rcode)
	return out
}
