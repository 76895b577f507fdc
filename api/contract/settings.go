package contract

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/pulselb/pulselb/api/probespec"
)

// Prefix starts every annotation and label pulselb reads or writes.
const Prefix = "pulselb.io/"

// Service annotations pulselb reads. DESIGN.md's API contract lists them;
// docs/annotations.md documents them for users.
const (
	AnnotationProxyMode     = Prefix + "proxy-mode"
	AnnotationReplicas      = Prefix + "replicas"
	AnnotationNodeSelector  = Prefix + "node-selector"
	AnnotationAddressType   = Prefix + "address-type"
	AnnotationProbe         = Prefix + "probe"
	AnnotationProbePrefix   = Prefix + "probe."
	AnnotationProbeInterval = Prefix + "probe-interval"
	AnnotationProbeTimeout  = Prefix + "probe-timeout"
	AnnotationRise          = Prefix + "rise"
	AnnotationFall          = Prefix + "fall"
	AnnotationPublishWhen   = Prefix + "publish-when"
	AnnotationAllDown       = Prefix + "all-down"
	AnnotationHostname      = Prefix + "hostname"
	AnnotationDNSTTL        = Prefix + "dns-ttl"
	AnnotationDrainDelay    = Prefix + "drain-delay"
	// AnnotationExternalVantages says what external vantages' verdicts do
	// to the Service: ExternalOff, ExternalAdvisory or ExternalRequired.
	AnnotationExternalVantages = Prefix + "external-vantages"

	// The external-dns hostname annotations, read as extra names.
	AnnotationExternalDNSHostname      = "external-dns.kubernetes.io/hostname"
	AnnotationExternalDNSAlphaHostname = "external-dns.alpha.kubernetes.io/hostname"
)

// Annotations pulselb writes on a Service; the parser ignores them.
const (
	AnnotationExternalIPs = Prefix + "external-ips"
	AnnotationInternalIPs = Prefix + "internal-ips"
	AnnotationNodes       = Prefix + "nodes"
	// AnnotationExternalUnreachable lists the addresses held out of the
	// status because external vantages cannot reach them (external-vantages:
	// required). External vantages keep probing them, so that an address
	// comes back once they reach it again.
	AnnotationExternalUnreachable = Prefix + "external-unreachable"
)

// WrittenAnnotations returns the annotations pulselb writes on a Service,
// in a slice of the caller's own.
func WrittenAnnotations() []string {
	return []string{AnnotationExternalIPs, AnnotationInternalIPs, AnnotationNodes, AnnotationExternalUnreachable}
}

// IsWrittenAnnotation reports whether key is one of WrittenAnnotations.
func IsWrittenAnnotation(key string) bool {
	switch key {
	case AnnotationExternalIPs, AnnotationInternalIPs, AnnotationNodes, AnnotationExternalUnreachable:
		return true
	}
	return false
}

// SettingAnnotationsEqual reports whether a and b, the annotations of a
// Service, are the same but for those pulselb writes (WrittenAnnotations):
// whether Parse reads the same from both. pulselb's own writes follow
// every change of addresses, so at scale a consumer of settings that
// counted them as changes would redo its work with every failover.
func SettingAnnotationsEqual(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if IsWrittenAnnotation(k) {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	for k := range b {
		if !IsWrittenAnnotation(k) {
			n--
		}
	}
	return n == 0
}

// Mode is how a Service's proxies run.
type Mode string

// Proxy modes (annotation proxy-mode).
const (
	ModeDeployment Mode = "deployment"
	ModeDaemonSet  Mode = "daemonset"
)

// Values of address-type, publish-when and all-down; Parse accepts these
// and no others, and status and standalone mode act on them.
const (
	AddressAuto     = "auto"
	AddressExternal = "external"
	AddressInternal = "internal"
	AddressBoth     = "both"

	PublishAllPorts = "all-ports"
	PublishAnyPort  = "any-port"

	AllDownPublishAll  = "publish-all"
	AllDownPublishNone = "publish-none"

	// ExternalOff ignores external vantages; ExternalAdvisory (default)
	// shows what they see (dashboard, metrics, ExternalPathDown Events)
	// without changing the status; ExternalRequired publishes an address
	// only while a majority of the fresh external vantages reach it.
	ExternalOff      = "off"
	ExternalAdvisory = "advisory"
	ExternalRequired = "required"
)

// DefaultReplicas is the default of pulselb.io/replicas. The probe timing
// defaults to the grammar's (probespec.DefaultInterval, DefaultRise and
// DefaultFall); the DNS TTL has none here: an unset dns-ttl means the
// server's --dns-ttl (default DefaultDNSTTL).
const DefaultReplicas = 2

// MaxProbeInterval bounds pulselb.io/probe-interval and probe-timeout,
// which set the pace of every port of a Service and so how soon a failed
// node is noticed; a spec's interval= may run one slow check less often
// (probespec.MaxInterval).
const MaxProbeInterval = time.Minute

// Drain delay: without pulselb.io/drain-delay, a proxy being removed keeps
// forwarding for the Service's DNS TTL plus DrainMargin, the time
// external-dns (with --events) and the provider take to publish a change.
// MaxDrainDelay bounds the annotation.
const (
	DrainMargin   = 10 * time.Second
	MaxDrainDelay = time.Hour
)

// Problem is a Service setting pulselb cannot use: an invalid annotation or
// a spec field the proxy cannot serve. Key names the annotation or field,
// Default says what is used instead.
type Problem struct {
	Key     string
	Value   string
	Reason  string
	Default string
}

// String reads as an Event message: what is wrong, why, and what is used.
func (p Problem) String() string {
	s := fmt.Sprintf("%s=%q: %s", p.Key, p.Value, p.Reason)
	if p.Default != "" {
		s += "; using " + p.Default
	}
	return s
}

// Settings is a Service's pulselb configuration with defaults applied:
// every value Parse could use, typed.
type Settings struct {
	Mode     Mode
	Replicas int32
	// NodeSelector holds the node-selector annotation as node affinity
	// requirements; nil when the annotation is absent or invalid.
	NodeSelector []corev1.NodeSelectorRequirement
	// nodeSelector matches node labels the same way the scheduler will.
	nodeSelector labels.Selector

	AddressType string
	// Probes holds the probe of each of the Service's Served ports, in
	// the order of spec.ports (a port listed twice once).
	Probes        []Probe
	ProbeInterval time.Duration
	// ProbeTimeout is zero for adaptive.
	ProbeTimeout time.Duration
	Rise, Fall   int
	PublishWhen  string
	AllDown      string
	// ExternalVantages is pulselb.io/external-vantages: ExternalOff,
	// ExternalAdvisory or ExternalRequired.
	ExternalVantages string
	// Hostnames are the valid names of the hostname annotations, sorted,
	// each once, lower case, without the final dot.
	Hostnames []string
	// DNSTTL is pulselb.io/dns-ttl; zero when unset or invalid, for the
	// server's default.
	DNSTTL uint32
	// drainDelay is pulselb.io/drain-delay; nil when unset or invalid.
	drainDelay *time.Duration
	// ProxyProtocol holds the PROXY protocol version of every served TCP
	// port whose proxies send a header (proxy-protocol and
	// proxy-protocol.<port>); nil when none does. Their probes send none
	// of their own: they pass through the proxies, which add it.
	ProxyProtocol map[PortKey]probespec.ProxyProtocol
}

// DrainDelay is how long a proxy being removed keeps forwarding after its
// address left the status: pulselb.io/drain-delay, else the Service's DNS
// TTL (defaultTTL seconds, the server's --dns-ttl, when it sets none) plus
// DrainMargin.
func (s Settings) DrainDelay(defaultTTL uint32) time.Duration {
	if s.drainDelay != nil {
		return *s.drainDelay
	}
	return time.Duration(cmp.Or(s.DNSTTL, defaultTTL))*time.Second + DrainMargin
}

// Probe is how one Service port is probed.
type Probe struct {
	Port PortKey
	// Text is the spec as the annotation wrote it, or the protocol's
	// default ("tcp", "udp"); Spec is its parsed form. On a port with
	// proxy-protocol a spec's own proxy-protocol= is dropped (the proxy
	// writes the header), and Text is then the spec's canonical form.
	Text string
	Spec probespec.Spec
	// Interval, Timeout, Rise and Fall are the spec's own, else the
	// Service's (Timeout zero: adaptive).
	Interval, Timeout time.Duration
	Rise, Fall        int
}

// SelectsNode reports whether the node-selector annotation admits a node
// with these labels; true without one.
func (s Settings) SelectsNode(nodeLabels map[string]string) bool {
	return s.nodeSelector == nil || s.nodeSelector.Matches(labels.Set(nodeLabels))
}

// Probe returns the probe of port k, and whether the Service has the port
// and serves it.
func (s Settings) Probe(k PortKey) (Probe, bool) {
	for _, p := range s.Probes {
		if p.Port == k {
			return p, true
		}
	}
	return Probe{}, false
}

// parses counts the calls of Parse (ParseCount).
var parses atomic.Uint64

// ParseCount returns how many times Parse has run in this process. Tests
// and benchmarks read it to hold the rule that a Service is parsed once per
// change of its settings by each consumer that reads every Service
// (ParseCache), however many Services there are.
func ParseCount() uint64 { return parses.Load() }

// Parse reads a Service's pulselb annotations. Every invalid value becomes
// a Problem and its default is used, so one bad annotation never stops the
// Service from being served.
func Parse(svc *corev1.Service) (Settings, []Problem) {
	parses.Add(1)
	a := svc.Annotations
	s := Settings{
		Mode:          ModeDeployment,
		Replicas:      DefaultReplicas,
		AddressType:   AddressAuto,
		ProbeInterval: probespec.DefaultInterval,
		Rise:          probespec.DefaultRise,
		Fall:          probespec.DefaultFall,
		PublishWhen:   PublishAllPorts,
		AllDown:       AllDownPublishAll,

		ExternalVantages: ExternalAdvisory,
	}
	var problems []Problem
	bad := func(key, reason, def string) {
		problems = append(problems, Problem{Key: key, Value: a[key], Reason: reason, Default: def})
	}
	oneOf := func(key string, dst *string, values ...string) {
		v, ok := a[key]
		if !ok {
			return
		}
		for _, allowed := range values {
			if v == allowed {
				*dst = v
				return
			}
		}
		bad(key, "want one of "+strings.Join(values, ", "), *dst)
	}

	if v, ok := a[AnnotationProxyMode]; ok {
		switch Mode(v) {
		case ModeDeployment, ModeDaemonSet:
			s.Mode = Mode(v)
		default:
			bad(AnnotationProxyMode, "want deployment or daemonset", string(s.Mode))
		}
	}
	if v, ok := a[AnnotationReplicas]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		switch {
		case err != nil:
			bad(AnnotationReplicas, "not a whole number", strconv.Itoa(DefaultReplicas))
		case n < 1 || n > 1000:
			bad(AnnotationReplicas, "want 1 to 1000", strconv.Itoa(DefaultReplicas))
		default:
			s.Replicas = int32(n)
		}
	}
	if v, ok := a[AnnotationNodeSelector]; ok {
		reqs, sel, err := parseNodeSelector(v)
		if err != nil {
			bad(AnnotationNodeSelector, err.Error(), "every node")
		} else {
			s.NodeSelector, s.nodeSelector = reqs, sel
		}
	}
	oneOf(AnnotationAddressType, &s.AddressType, AddressAuto, AddressExternal, AddressInternal, AddressBoth)
	oneOf(AnnotationPublishWhen, &s.PublishWhen, PublishAllPorts, PublishAnyPort)
	oneOf(AnnotationAllDown, &s.AllDown, AllDownPublishAll, AllDownPublishNone)
	oneOf(AnnotationExternalVantages, &s.ExternalVantages, ExternalOff, ExternalAdvisory, ExternalRequired)

	durations := []struct {
		key string
		dst *time.Duration
		def string
	}{
		{AnnotationProbeInterval, &s.ProbeInterval, probespec.DefaultInterval.String()},
		{AnnotationProbeTimeout, &s.ProbeTimeout, "adaptive"},
	}
	for _, d := range durations {
		v, ok := a[d.key]
		if !ok {
			continue
		}
		dur, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(d.key, "not a duration such as 1s or 500ms", d.def)
		case dur < probespec.MinInterval || dur > MaxProbeInterval:
			bad(d.key, "want "+probespec.MinInterval.String()+" to "+strings.TrimSuffix(MaxProbeInterval.String(), "0s"), d.def)
		default:
			*d.dst = dur
		}
	}
	if v, ok := a[AnnotationDrainDelay]; ok {
		dur, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(AnnotationDrainDelay, "not a duration such as 15s or 0s", "the DNS TTL plus "+DrainMargin.String())
		case dur < 0 || dur > MaxDrainDelay:
			bad(AnnotationDrainDelay, "want 0s to "+strings.TrimSuffix(MaxDrainDelay.String(), "0m0s"), "the DNS TTL plus "+DrainMargin.String())
		default:
			s.drainDelay = &dur
		}
	}
	for _, c := range []struct {
		key string
		dst *int
	}{{AnnotationRise, &s.Rise}, {AnnotationFall, &s.Fall}} {
		v, ok := a[c.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			bad(c.key, "want a whole number from 1 to 100", strconv.Itoa(*c.dst))
			continue
		}
		*c.dst = n
	}
	if v, ok := a[AnnotationDNSTTL]; ok {
		if ttl, err := ParseTTL(v); err != nil {
			bad(AnnotationDNSTTL, err.Error(), "the server's --dns-ttl")
		} else {
			s.DNSTTL = ttl
		}
	}
	for _, key := range []string{AnnotationHostname, AnnotationExternalDNSHostname, AnnotationExternalDNSAlphaHostname} {
		v, ok := a[key]
		if !ok {
			continue
		}
		for _, h := range strings.Split(v, ",") {
			if strings.TrimSpace(h) == "" {
				continue
			}
			name, err := Hostname(h)
			if err != nil {
				problems = append(problems, Problem{Key: key, Value: v,
					Reason: fmt.Sprintf("%q is not a hostname: %v", strings.TrimSpace(h), err), Default: "the other names"})
				continue
			}
			s.Hostnames = append(s.Hostnames, name)
		}
	}
	slices.Sort(s.Hostnames)
	s.Hostnames = slices.Compact(s.Hostnames)
	if len(s.Hostnames) == 0 {
		s.Hostnames = nil
	}
	texts, probeProblems := parseProbes(svc, a)
	problems = append(problems, probeProblems...)
	pp, ppProblems := parseProxyProtocol(svc, a)
	problems = append(problems, ppProblems...)
	s.Probes = portProbes(svc, s, texts)
	s.ProxyProtocol = pp
	for i, p := range s.Probes {
		if _, ok := pp[p.Port]; !ok {
			continue
		}
		var problem *Problem
		if s.Probes[i], problem = withoutOwnHeader(p, probeKey(svc, a, p.Port)); problem != nil {
			problems = append(problems, *problem)
		}
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Key < problems[j].Key })
	return s, problems
}

// parseProbes validates the probe and probe.<port> annotations. It returns
// the valid spec texts by port name or number ("" for the Service-level
// probe).
func parseProbes(svc *corev1.Service, a map[string]string) (map[string]Probe, []Problem) {
	var problems []Problem
	probes := map[string]Probe{}
	ports := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		ports[strconv.Itoa(int(p.Port))] = p
		if p.Name != "" {
			ports[p.Name] = p
		}
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		if k == AnnotationProbe || strings.HasPrefix(k, AnnotationProbePrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		v := a[key]
		portKey := strings.TrimPrefix(strings.TrimPrefix(key, AnnotationProbe), ".")
		def := "tcp for TCP ports, udp for UDP ports"
		if portKey != "" {
			if _, ok := ports[portKey]; !ok {
				problems = append(problems, Problem{Key: key, Value: v,
					Reason: fmt.Sprintf("the Service has no port named or numbered %q", portKey), Default: "nothing (ignored)"})
				continue
			}
			def = "the Service-level probe"
			if reason := UnservedReason(ports[portKey]); reason != "" {
				problems = append(problems, Problem{Key: key, Value: v, Reason: reason, Default: "nothing (ignored)"})
				continue
			}
		}
		spec, err := probespec.Parse(v)
		if err != nil {
			problems = append(problems, Problem{Key: key, Value: v, Reason: err.Error(), Default: def})
			continue
		}
		if portKey != "" {
			if reason := probeMismatch(spec.Protocol, ports[portKey].Protocol); reason != "" {
				problems = append(problems, Problem{Key: key, Value: v, Reason: reason, Default: def})
				continue
			}
		}
		probes[portKey] = Probe{Text: v, Spec: spec}
	}
	return probes, problems
}

// probeMismatch says why a probe protocol cannot check a port of the given
// protocol, or returns "".
func probeMismatch(probe probespec.Protocol, port corev1.Protocol) string {
	if port == "" {
		port = corev1.ProtocolTCP
	}
	switch probe {
	case probespec.DNS:
		return ""
	case probespec.UDP:
		if port != corev1.ProtocolUDP {
			return fmt.Sprintf("a udp probe cannot check a %s port", port)
		}
	default:
		if port != corev1.ProtocolTCP {
			return fmt.Sprintf("a %s probe cannot check a %s port", probe, port)
		}
	}
	return ""
}

// parseNodeSelector turns a label selector ("zone=a,role in (edge,lb),!gpu")
// into node affinity requirements and a selector for counting eligible nodes.
func parseNodeSelector(v string) ([]corev1.NodeSelectorRequirement, labels.Selector, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil, fmt.Errorf("empty label selector")
	}
	sel, err := labels.Parse(v)
	if err != nil {
		return nil, nil, fmt.Errorf("not a label selector: %w", err)
	}
	reqs, _ := sel.Requirements()
	var out []corev1.NodeSelectorRequirement
	for _, r := range reqs {
		nr := corev1.NodeSelectorRequirement{Key: r.Key(), Values: r.ValuesUnsorted()}
		sort.Strings(nr.Values)
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			nr.Operator = corev1.NodeSelectorOpIn
		case selection.NotEquals, selection.NotIn:
			nr.Operator = corev1.NodeSelectorOpNotIn
		case selection.Exists:
			nr.Operator, nr.Values = corev1.NodeSelectorOpExists, nil
		case selection.DoesNotExist:
			nr.Operator, nr.Values = corev1.NodeSelectorOpDoesNotExist, nil
		case selection.GreaterThan:
			nr.Operator = corev1.NodeSelectorOpGt
		case selection.LessThan:
			nr.Operator = corev1.NodeSelectorOpLt
		default:
			return nil, nil, fmt.Errorf("operator %q is not supported", r.Operator())
		}
		out = append(out, nr)
	}
	return out, sel, nil
}

// portProbes resolves the probe of every Served port of svc (a port that
// is not served is never probed): the probe.<name> or probe.<number>
// annotation, else the Service-level probe when it can check the port's
// protocol, else tcp for TCP ports and udp for UDP ports; with the spec's
// own timing, else the Service's.
func portProbes(svc *corev1.Service, s Settings, specs map[string]Probe) []Probe {
	var out []Probe
	for _, port := range ServedPorts(svc) {
		k := PortKeyOf(port)
		if slices.ContainsFunc(out, func(p Probe) bool { return p.Port == k }) {
			continue
		}
		p := portProbe(port, specs)
		spec := p.Spec
		out = append(out, Probe{Port: k, Text: p.Text, Spec: spec,
			Interval: cmp.Or(spec.Interval, s.ProbeInterval), Timeout: cmp.Or(spec.Timeout, s.ProbeTimeout),
			Rise: cmp.Or(spec.Rise, s.Rise), Fall: cmp.Or(spec.Fall, s.Fall)})
	}
	return out
}

// portProbe picks port's spec among the valid annotations in specs.
func portProbe(port corev1.ServicePort, specs map[string]Probe) Probe {
	for _, k := range []string{port.Name, strconv.Itoa(int(port.Port))} {
		if p, ok := specs[k]; ok && k != "" {
			return p
		}
	}
	if p, ok := specs[""]; ok && probeMismatch(p.Spec.Protocol, port.Protocol) == "" {
		return p
	}
	if port.Protocol == corev1.ProtocolUDP {
		return defaultUDP
	}
	return defaultTCP
}

// The probes of ports without a probe annotation.
var (
	defaultTCP = mustProbe(string(probespec.TCP))
	defaultUDP = mustProbe(string(probespec.UDP))
)

func mustProbe(text string) Probe {
	spec, err := probespec.Parse(text)
	if err != nil {
		panic(fmt.Sprintf("parsing the default probe %q: %v", text, err))
	}
	return Probe{Text: text, Spec: spec}
}

// IsAnnotation reports whether p is about an annotation rather than a spec
// field (such as spec.ports): the first is an InvalidAnnotation Event.
func (p Problem) IsAnnotation() bool {
	return strings.HasPrefix(p.Key, Prefix) || p.Key == AnnotationExternalDNSHostname || p.Key == AnnotationExternalDNSAlphaHostname
}
