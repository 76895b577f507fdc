package proxy

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics. Label values come from closed
// sets (protocol, direction, family, mode), never from client addresses.
//
// In iptables mode the kernel forwards the traffic: bytes and connections
// come from the counters of pulselb's rules, read at every rule check
// (ResyncInterval), and count whole IP packets rather than payload; the
// active, refused and session-limit metrics are userspace-only.
type Metrics struct {
	// Mode is pulselb_proxy_mode{mode}: 1 for the mode in use, 0 otherwise.
	Mode *prometheus.GaugeVec
	// Phase is pulselb_proxy_phase{phase}: 1 for the phase the proxy is in
	// (serving, delay or drain), 0 for the others.
	Phase *prometheus.GaugeVec
	// Bytes is pulselb_proxy_bytes_total{protocol, direction}; direction is
	// "in" (client to backend) or "out". In userspace mode TCP bytes are
	// added when a direction of a connection ends, because the kernel
	// splices them without pulselb seeing each one.
	Bytes *prometheus.CounterVec
	// Connections is pulselb_proxy_connections_total{protocol}: TCP
	// connections and UDP sessions (in iptables mode, conntrack entries
	// DNATed by pulselb).
	Connections *prometheus.CounterVec
	// Active is pulselb_proxy_active{protocol}: open TCP connections and UDP
	// sessions in userspace mode.
	Active *prometheus.GaugeVec
	// Refused is pulselb_proxy_refused_total{protocol, reason}: clients
	// refused in userspace mode, reason "source-range" (not in
	// --source-ranges), "session-limit" (UDP session cap reached) or
	// "backend" (the ClusterIP could not be reached).
	Refused *prometheus.CounterVec
	// AcceptErrors is pulselb_proxy_accept_errors_total{protocol, reason}:
	// failed accepts of TCP connections in userspace mode, reason
	// "fd-limit" (out of file descriptors) or "other". Clients wait in the
	// listen backlog meanwhile.
	AcceptErrors *prometheus.CounterVec
	// AcceptPaused is pulselb_proxy_accept_paused_total{protocol}: times
	// a userspace TCP relay stopped accepting because the open connections
	// hold every file descriptor the process's limit leaves them; clients
	// wait in the listen backlog until one ends.
	AcceptPaused *prometheus.CounterVec
	// IdleClosed is pulselb_proxy_idle_closed_total{protocol}: TCP
	// connections closed in userspace mode after --tcp-idle-timeout
	// without data.
	IdleClosed *prometheus.CounterVec
	// RuleRepairs is pulselb_proxy_rule_repairs_total{family}: chains or
	// jumps found changed or missing and restored, after the first install.
	RuleRepairs *prometheus.CounterVec
	// RuleErrors is pulselb_proxy_rule_errors_total{family}: failed checks or
	// repairs of the iptables rules.
	RuleErrors *prometheus.CounterVec
	// AllowList is pulselb_proxy_allow_list_info{hash}: 1 for the hash of
	// the allow-list in force (AllowList.Hash: "all", "closed" or 16 hex
	// digits); the series of an earlier list is removed.
	AllowList *prometheus.GaugeVec
	// AllowListSources is pulselb_proxy_allow_list_sources{kind}: how many
	// ranges and prober addresses the list in force holds.
	AllowListSources *prometheus.GaugeVec
	// AllowListUpdates is pulselb_proxy_allow_list_updates_total{result}:
	// lists applied ("applied") or refused ("rejected": unreadable or not
	// installable, which closes the proxy).
	AllowListUpdates *prometheus.CounterVec
}

const (
	metricsNamespace = "pulselb"
	metricsSubsystem = "proxy"
)

// NewMetrics returns unregistered proxy metrics; register them with
// RegisterMetrics.
func NewMetrics() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		Mode:             gauge("mode", "1 for the data-plane mode in use (iptables or userspace).", "mode"),
		Phase:            gauge("phase", "1 for the phase the proxy is in: serving; delay (shutting down, still forwarding new connections); drain (refusing new connections, open ones finishing).", "phase"),
		Bytes:            counter("bytes_total", "Bytes forwarded, by protocol and direction (in: client to backend); IP packet bytes in iptables mode.", "protocol", "direction"),
		Connections:      counter("connections_total", "TCP connections and UDP sessions forwarded.", "protocol"),
		Active:           gauge("active", "Open TCP connections and UDP sessions in userspace mode.", "protocol"),
		Refused:          counter("refused_total", "Clients refused in userspace mode, by protocol and reason.", "protocol", "reason"),
		AcceptErrors:     counter("accept_errors_total", "Failed accepts of TCP connections in userspace mode, by reason: fd-limit (out of file descriptors) or other.", "protocol", "reason"),
		AcceptPaused:     counter("accept_paused_total", "Times userspace mode stopped accepting TCP connections because the open ones hold the file descriptors its limit allows; clients wait in the listen backlog.", "protocol"),
		IdleClosed:       counter("idle_closed_total", "TCP connections closed in userspace mode after the idle timeout without data.", "protocol"),
		RuleRepairs:      counter("rule_repairs_total", "iptables chains or jumps found changed or missing and restored.", "family"),
		RuleErrors:       counter("rule_errors_total", "Failed checks or repairs of the iptables rules.", "family"),
		AllowList:        gauge("allow_list_info", "1 for the hash of the allow-list in force: all, closed, or a hash of its ranges and probers that the controller writes on the workload as pulselb.io/allowed-sources-hash.", "hash"),
		AllowListSources: gauge("allow_list_sources", "Ranges and prober addresses in the allow-list in force.", "kind"),
		AllowListUpdates: counter("allow_list_updates_total", "Allow-lists applied, or rejected (unreadable or not installable; the proxy then refuses every new client).", "result"),
	}
	m.AllowListUpdates.WithLabelValues("applied")
	m.AllowListUpdates.WithLabelValues("rejected")
	// Every series a dashboard plots exists from the start, so it shows 0
	// rather than no data.
	for _, mode := range []Mode{ModeIPTables, ModeUserspace} {
		m.Mode.WithLabelValues(string(mode))
	}
	for _, ph := range phases {
		m.Phase.WithLabelValues(string(ph))
	}
	for _, p := range []Protocol{TCP, UDP} {
		m.Bytes.WithLabelValues(string(p), "in")
		m.Bytes.WithLabelValues(string(p), "out")
		m.Connections.WithLabelValues(string(p))
		m.Active.WithLabelValues(string(p))
	}
	m.AcceptErrors.WithLabelValues(string(TCP), "fd-limit")
	m.AcceptErrors.WithLabelValues(string(TCP), "other")
	m.IdleClosed.WithLabelValues(string(TCP))
	m.AcceptPaused.WithLabelValues(string(TCP))
	for _, f := range []Family{IPv4, IPv6} {
		m.RuleRepairs.WithLabelValues(f.String())
		m.RuleErrors.WithLabelValues(f.String())
	}
	return m
}

// RegisterMetrics registers every metric in m with r. It is called from main,
// never from init, so tests choose their own registry.
func (m *Metrics) RegisterMetrics(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.Mode, m.Phase, m.Bytes, m.Connections, m.Active, m.Refused, m.AcceptErrors, m.AcceptPaused, m.IdleClosed, m.RuleRepairs, m.RuleErrors,
		m.AllowList, m.AllowListSources, m.AllowListUpdates} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering proxy metrics: %w", err)
	}
	return nil
}

// setMode marks mode as the one in use.
func (m *Metrics) setMode(mode Mode) {
	setOneOf(m.Mode, []Mode{ModeIPTables, ModeUserspace}, mode)
}

// setAllowList records a as the allow-list in force and counts an update
// with result ("applied" or "rejected"); an empty result counts nothing.
func (m *Metrics) setAllowList(a AllowList, result string) {
	m.AllowList.Reset()
	m.AllowList.WithLabelValues(a.Hash()).Set(1)
	m.AllowListSources.WithLabelValues("ranges").Set(float64(len(a.Ranges)))
	m.AllowListSources.WithLabelValues("probers").Set(float64(len(a.Probers)))
	if result != "" {
		m.AllowListUpdates.WithLabelValues(result).Inc()
	}
}

// setPhase marks ph as the phase the proxy is in.
func (m *Metrics) setPhase(ph Phase) {
	setOneOf(m.Phase, phases, ph)
}

// setOneOf sets g to 1 for the label value current and 0 for the others.
func setOneOf[T ~string](g *prometheus.GaugeVec, values []T, current T) {
	for _, v := range values {
		x := 0.0
		if v == current {
			x = 1
		}
		g.WithLabelValues(string(v)).Set(x)
	}
}
