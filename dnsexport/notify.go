package dnsexport

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"
)

// errNotifyRefused is a NOTIFY answered with an error rcode: retrying
// would not help.
var errNotifyRefused = errors.New("notify refused")

// notifyLoop sends a round of NOTIFY to every secondary after each zone
// change. A newer change cancels the retries of the round before it:
// the new serial supersedes the old one.
func (s *Server) notifyLoop(ctx context.Context) {
	if len(s.cfg.Secondaries) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	cancelRound := func() {}
	defer func() {
		cancelRound()
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.notify:
		}
		cancelRound()
		z := s.zone.Load()
		if z == nil {
			continue
		}
		round, cancel := context.WithCancel(ctx)
		cancelRound = cancel
		for _, sec := range s.cfg.Secondaries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.sendNotify(round, sec, z)
				switch {
				case err == nil:
					s.metrics.observeNotify("ok")
					logger.V(2).Info("Notified secondary", "secondary", sec.Addr, "serial", z.Serial())
				case round.Err() != nil:
					// Superseded by a newer change, or shutting down.
				case errors.Is(err, errNotifyRefused):
					s.metrics.observeNotify("refused")
					logger.Error(err, "Secondary refused NOTIFY", "secondary", sec.Addr, "serial", z.Serial())
				default:
					s.metrics.observeNotify("failed")
					logger.Error(err, "Secondary did not answer NOTIFY", "secondary", sec.Addr, "serial", z.Serial())
				}
			}()
		}
	}
}

// sendNotify sends NOTIFY for z to sec until it is acknowledged, refused,
// ctx is done, or NotifyAttempts were sent.
func (s *Server) sendNotify(ctx context.Context, sec Secondary, z *Zone) error {
	c := &dns.Client{Net: "udp", Timeout: s.cfg.NotifyTimeout, TsigProvider: s.keys}
	pause := s.cfg.NotifyTimeout
	var lastErr error
	for attempt := range s.cfg.NotifyAttempts {
		if attempt > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			pause = min(2*pause, 30*time.Second)
		}
		m := new(dns.Msg)
		m.SetNotify(z.Origin())
		m.Answer = []dns.RR{z.soa}
		if sec.Key != "" {
			m.SetTsig(dns.Fqdn(sec.Key), dns.HmacSHA256, 300, s.now().Unix())
		}
		resp, _, err := c.ExchangeContext(ctx, m, sec.Addr.String())
		switch {
		case err != nil:
			lastErr = err
			continue
		case resp.Rcode != dns.RcodeSuccess:
			return fmt.Errorf("%w by %s: %s", errNotifyRefused, sec.Addr, dns.RcodeToString[resp.Rcode])
		}
		return nil
	}
	return fmt.Errorf("notifying %s of serial %d, %d attempts: %w", sec.Addr, z.Serial(), s.cfg.NotifyAttempts, lastErr)
}

// secondarySerial asks every secondary, at once, for the SOA serial it
// holds for the zone (signed with its key, as NOTIFY is) and returns the
// highest in RFC 1982 order with who holds it; 0 when none answered
// within NotifyTimeout. A secondary that does not have the zone yet
// answers with an error or no SOA, and counts as holding none.
func (s *Server) secondarySerial(ctx context.Context) (uint32, netip.AddrPort) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.NotifyTimeout)
	defer cancel()
	type held struct {
		serial uint32
		addr   netip.AddrPort
	}
	answers := make(chan held, len(s.cfg.Secondaries))
	for _, sec := range s.cfg.Secondaries {
		go func() {
			c := &dns.Client{Net: "udp", Timeout: s.cfg.NotifyTimeout, TsigProvider: s.keys}
			m := new(dns.Msg)
			m.SetQuestion(s.origin, dns.TypeSOA)
			m.RecursionDesired = false
			if sec.Key != "" {
				m.SetTsig(dns.Fqdn(sec.Key), dns.HmacSHA256, 300, s.now().Unix())
			}
			var h held
			resp, _, err := c.ExchangeContext(ctx, m, sec.Addr.String())
			if err == nil && resp.Rcode == dns.RcodeSuccess {
				for _, rr := range resp.Answer {
					if soa, ok := rr.(*dns.SOA); ok && strings.EqualFold(soa.Hdr.Name, s.origin) {
						h = held{soa.Serial, sec.Addr}
					}
				}
			}
			answers <- h
		}()
	}
	var best held
	for range s.cfg.Secondaries {
		if h := <-answers; h.serial != 0 && (best.serial == 0 || serialLess(best.serial, h.serial)) {
			best = h
		}
	}
	return best.serial, best.addr
}
