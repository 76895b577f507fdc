package dnsexport

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are dnsexport's Prometheus metrics. Label values come from
// closed sets (query types, rcodes, results), never from names or
// addresses.
type Metrics struct {
	// Queries is pulselb_dnsexport_queries_total{type, rcode}.
	Queries *prometheus.CounterVec
	// Serial is pulselb_dnsexport_serial: the SOA serial served.
	Serial prometheus.Gauge
	// Records is pulselb_dnsexport_records: records in the zone.
	Records prometheus.Gauge
	// Updates is pulselb_dnsexport_zone_updates_total: zone changes served.
	Updates prometheus.Counter
	// Notifies is pulselb_dnsexport_notifies_total{result}.
	Notifies *prometheus.CounterVec
	// Transfers is pulselb_dnsexport_transfers_total{type, result}.
	Transfers *prometheus.CounterVec
	// RateLimited is pulselb_dnsexport_rate_limited_total{action}.
	RateLimited *prometheus.CounterVec
	// CappedNames is pulselb_dnsexport_capped_names: names and types
	// in the zone with more than MaxAnswerAddrs addresses.
	CappedNames prometheus.Gauge
	// CappedAnswers is pulselb_dnsexport_capped_answers_total: answers
	// that carried only a window of a name's addresses.
	CappedAnswers prometheus.Counter
	// ReplyErrors is pulselb_dnsexport_reply_errors_total: replies
	// that could not be packed or sent as built and were answered
	// SERVFAIL instead.
	ReplyErrors prometheus.Counter

	dropped, slipped prometheus.Counter
	// queries caches Queries' children, filled on first use, so a
	// query is counted without a label lookup.
	queries [len(queryTypes) + 1][dns.RcodeBadCookie + 1]atomic.Pointer[prometheus.Counter]
}

const (
	metricsNamespace = "pulselb"
	metricsSubsystem = "dnsexport"
)

// queryTypes are the types counted by name; every other is "other".
var queryTypes = [...]uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeSOA, dns.TypeNS,
	dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeCNAME, dns.TypeTXT, dns.TypeMX, dns.TypePTR, dns.TypeHTTPS}

// NewMetrics returns unregistered dnsexport metrics; register them with
// RegisterMetrics and pass them in Config.
func NewMetrics() *Metrics {
	m := &Metrics{
		Queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "queries_total",
			Help: "DNS queries answered, by query type and response code.",
		}, []string{"type", "rcode"}),
		Serial: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "serial",
			Help: "SOA serial of the zone being served.",
		}),
		Records: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "records",
			Help: "Records in the zone being served.",
		}),
		Updates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "zone_updates_total",
			Help: "Zone content changes (each with a new serial).",
		}),
		Notifies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "notifies_total",
			Help: "NOTIFY messages to secondaries by result: ok, refused (answered with an error), failed (no answer after every retry).",
		}, []string{"result"}),
		Transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "transfers_total",
			Help: "Zone transfer requests by type (axfr, ixfr) and result (ok, uptodate, refused, notauth, error).",
		}, []string{"type", "result"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "rate_limited_total",
			Help: "UDP responses withheld by response rate limiting, by action: dropped, or slipped (sent truncated).",
		}, []string{"action"}),
		CappedNames: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "capped_names",
			Help: "Names and address types in the zone with more addresses than one answer carries (1000); each answer carries a rotating window of them.",
		}),
		CappedAnswers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "capped_answers_total",
			Help: "Answers that carried only a window of a name's addresses.",
		}),
		ReplyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "reply_errors_total",
			Help: "Replies that could not be packed or signed as built and were answered SERVFAIL instead.",
		}),
	}
	m.dropped = m.RateLimited.WithLabelValues("dropped")
	m.slipped = m.RateLimited.WithLabelValues("slipped")
	for _, r := range []string{"ok", "refused", "failed"} {
		m.Notifies.WithLabelValues(r)
	}
	return m
}

// RegisterMetrics registers every metric in m with r. It is called from
// main, never from init.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.Queries, m.Serial, m.Records, m.Updates, m.Notifies, m.Transfers, m.RateLimited, m.CappedNames, m.CappedAnswers, m.ReplyErrors} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering dnsexport metrics: %w", err)
	}
	return nil
}

func (m *Metrics) observeQuery(qtype uint16, rcode int) {
	if m == nil {
		return
	}
	ti := len(queryTypes)
	for i, t := range queryTypes {
		if t == qtype {
			ti = i
			break
		}
	}
	if rcode < 0 || rcode > dns.RcodeBadCookie {
		rcode = dns.RcodeServerFailure
	}
	p := m.queries[ti][rcode].Load()
	if p == nil {
		typ := "other"
		if ti < len(queryTypes) {
			typ = dns.TypeToString[queryTypes[ti]]
		}
		rc, ok := dns.RcodeToString[rcode]
		if !ok {
			rc = fmt.Sprint(rcode)
		}
		// Racing goroutines get the same child; either store is right.
		c := m.Queries.WithLabelValues(typ, rc)
		p = &c
		m.queries[ti][rcode].Store(p)
	}
	(*p).Inc()
}

func (m *Metrics) observeRateLimit(a rateAction) {
	if m == nil {
		return
	}
	switch a {
	case rateDrop:
		m.dropped.Inc()
	case rateSlip:
		m.slipped.Inc()
	}
}

func (m *Metrics) observeTransfer(typ, result string) {
	if m != nil {
		m.Transfers.WithLabelValues(typ, result).Inc()
	}
}

func (m *Metrics) observeNotify(result string) {
	if m != nil {
		m.Notifies.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) observeZone(z *Zone) {
	if m != nil {
		m.Serial.Set(float64(z.Serial()))
		m.Records.Set(float64(z.Len()))
		m.CappedNames.Set(float64(z.capped))
		m.Updates.Inc()
	}
}

func (m *Metrics) observeCapped() {
	if m != nil {
		m.CappedAnswers.Inc()
	}
}

func (m *Metrics) observeReplyError() {
	if m != nil {
		m.ReplyErrors.Inc()
	}
}
