// Package standalone is pulselb without a cluster (`pulselb standalone`):
// it reads services on a fixed list of hosts from a YAML file, probes them
// with the prober engine, judges them with the cluster's quorum code
// (status.Judge) over its own report and those of its peers, serves the
// healthy hosts' addresses as an authoritative DNS zone (dnsexport), and
// feeds the dashboard and metrics. Verdicts survive reloads (SIGHUP) and
// restarts (the state file).
package standalone

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/dnsname"
	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/files"
	"github.com/pulselb/pulselb/httpserver"
	"github.com/pulselb/pulselb/prober"
)

// Defaults of the configuration file.
const (
	DefaultDNSListen  = ":53"
	DefaultHTTPListen = "127.0.0.1:9471" // loopback: the dashboard, state API and metrics have no authentication
	// MaxInterval bounds interval (from probespec.MinInterval), which
	// paces the polls of the peers too: a peer's report goes stale after
	// contract.StaleHeartbeats of its intervals, so a day-long one would
	// keep a dead peer's votes for days.
	MaxInterval = time.Hour
	// MaxConfigBytes caps the configuration file: a real one is a few
	// KiB, and a path such as /dev/zero must end in an error, not in
	// memory exhaustion.
	MaxConfigBytes = 4 << 20
	// maxTokenBytes caps token-file, for the same reason.
	maxTokenBytes = 64 << 10
	// MaxStateBytes caps state-file: about 150 bytes a target, so room
	// for over 400,000 targets.
	MaxStateBytes = 64 << 20
	// MaxSerialBytes caps dns.serial-file, which holds one number.
	MaxSerialBytes = 4 << 10
	// minHTTPConnections leaves room for a page, a scrape and the peers'
	// polls beside the dashboard's event streams; maxHTTPConnections is
	// more than any file descriptor limit would let the server hold.
	minHTTPConnections, maxHTTPConnections = 8, 1 << 16
)

// Config is a parsed, checked configuration file.
type Config struct {
	// File is the path the configuration was read from; errors name it.
	File string
	// Instance names this instance: its column in the vantage matrix and
	// the name its peers know it by. Default: the host name.
	Instance string
	// Zone is the DNS zone served, as an FQDN.
	Zone string
	DNS  DNSConfig
	HTTP HTTPConfig
	// Metrics serves /metrics on HTTP.Listen (default true).
	Metrics bool
	// Timing holds the defaults of every service.
	Timing
	// PublishWhen and AllDown are the defaults of every service.
	PublishWhen string
	AllDown     string
	// SecretsDir holds the mysql probes' passwords as DIR/NAME/password.
	SecretsDir string
	Peers      []Peer
	// TokenFile holds the shared secret peers authenticate with; Token is
	// its content. The token is never logged.
	TokenFile string
	Token     Secret
	// StateFile keeps verdicts across restarts; empty means none.
	StateFile string
	Services  []Service
	// ExternalVantage, when set, makes this instance an external vantage
	// of a cluster too (docs/external-vantages.md).
	ExternalVantage *ExternalVantage
}

// ExternalVantage is the external-vantage section: this instance probes a
// cluster's published addresses from outside, as `pulselb prober
// --external` does, with the credentials of Kubeconfig.
type ExternalVantage struct {
	// Kubeconfig is the vantage's own kubeconfig (pulselb
	// vantage-kubeconfig writes one).
	Kubeconfig string
	// Name is the vantage's name; default: the instance's.
	Name string
	// Namespace is pulselb's namespace in the cluster; default
	// pulselb-system.
	Namespace string
	// ClassOnly probes only Services of pulselb's class, as the
	// controller's --class-only.
	ClassOnly bool
}

// DefaultExternalNamespace is pulselb's namespace in a cluster.
const DefaultExternalNamespace = "pulselb-system"

// Secret is a value that must never be logged or printed: fmt shows it as
// "<redacted>".
type Secret string

// String returns "<redacted>".
func (Secret) String() string { return "<redacted>" }

// GoString returns "<redacted>".
func (Secret) GoString() string { return "<redacted>" }

// DNSConfig configures the DNS server.
type DNSConfig struct {
	Listen string
	// TTL is the default TTL of a service's records, in seconds.
	TTL         uint32
	NameServers []dnsexport.NameServer
	Hostmaster  string
	SerialFile  string
	// RateLimit limits UDP responses per source network; on by default.
	RateLimit dnsexport.RateLimit
}

// HTTPConfig configures the dashboard, report and metrics server.
type HTTPConfig struct {
	Listen string
	// MaxConnections is how many connections the server holds at once;
	// more wait until one closes. The dashboard's event streams take at
	// most half of them.
	MaxConnections int
	// DashboardRows bounds each table of the dashboard's page, and
	// DashboardRate the page and JSON responses a second
	// (dashboard.Options MaxPageRows and ResponsesPerSecond).
	DashboardRows int
	DashboardRate int
}

// Timing is how often and how patiently targets are probed.
type Timing struct {
	// Interval is the time between probes of a target, and between polls
	// of the peers.
	Interval time.Duration
	// Timeout bounds one probe; 0 means adaptive from the observed RTT.
	Timeout time.Duration
	// Rise and Fall are the successes or failures in a row that change a
	// target's state.
	Rise, Fall int
}

// Peer is another standalone instance whose report counts as a vantage.
type Peer struct {
	Name string
	// URL is the base URL of its HTTP server; its report is URL/api/v1/report.
	URL string
}

// Service is one name answered in the zone.
type Service struct {
	// Name is a DNS label; the service answers as Name.Zone.
	Name string
	// Hostnames are extra names inside the zone with the same addresses.
	Hostnames   []string
	TTL         uint32
	PublishWhen string
	AllDown     string
	Timing
	Hosts []Host
	Ports []Port
}

// Host is one machine a service runs on.
type Host struct {
	Name string
	// Addresses are published while the host is healthy.
	Addresses []netip.Addr
	// ProbeAddress is the address this instance probes; default the first
	// of Addresses. It lets an instance reach a host over another network
	// than the one clients use.
	ProbeAddress netip.Addr
}

// Port is one probed port of a service.
type Port struct {
	// Name labels the SRV record; default the port number.
	Name     string
	Port     uint16
	Protocol string // TCP or UDP
	// Probe is the probe spec in canonical form.
	Probe string
	Spec  probespec.Spec
}

// Key returns the target key of port p of service svc on host, the key
// every instance's report uses.
func Key(svc string, p Port, host string) string {
	return contract.TargetKey(svc, p.Protocol, int32(p.Port), host)
}

// PortKey is p as the status package names ports.
func (p Port) PortKey() contract.PortKey {
	return contract.PortKey{Protocol: statusProtocol(p.Protocol), Port: int32(p.Port)}
}

// ConfigError is one problem in a configuration file: the file, the line
// and the field path where it is, and what is wrong.
type ConfigError struct {
	File string
	Line int
	// Path is the field, such as services[0].ports[0].probe.
	Path string
	Msg  string
}

// Error reads as "pulselb.yaml:14: services[0].ports[0].probe: ...".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and checks the configuration file at path. The error, when
// not nil, joins a *ConfigError for every problem found.
func Load(path string) (*Config, error) {
	data, err := readFile(path, MaxConfigBytes, "a configuration file")
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	return Parse(path, data)
}

// checkStateFile checks a file pulselb keeps its own state in (state-file,
// dns.serial-file): it need not exist yet, but when it does it must be a
// file files.Read reads.
func checkStateFile(path string, limit int64, what string) error {
	if err := files.Check(path, limit, what); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readFile is files.Read: regular files of at most limit bytes.
func readFile(path string, limit int64, what string) ([]byte, error) {
	return files.Read(path, limit, what)
}

// Parse checks the configuration in data, read from file. Relative paths
// in it (token-file, state-file, secrets.dir, dns.serial-file) are taken
// relative to the file's directory.
func Parse(file string, data []byte) (*Config, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(file, err)
	}
	// A file holds one configuration: a second document (after "---")
	// would be ignored, and whatever it says silently not applied.
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, &ConfigError{File: file, Line: line, Msg: "a second YAML document: the file must hold one configuration (remove the \"---\" and what follows, or merge it into the first)"}
	case !errors.Is(err, io.EOF):
		return nil, yamlError(file, err)
	}
	d := &decoder{file: file, dir: filepath.Dir(file)}
	cfg := &Config{File: file, Metrics: true, DNS: DNSConfig{Listen: DefaultDNSListen, TTL: contract.DefaultDNSTTL, RateLimit: dnsexport.DefaultRateLimit},
		HTTP: HTTPConfig{Listen: DefaultHTTPListen, MaxConnections: httpserver.DefaultMaxConns,
			DashboardRows: dashboard.DefaultMaxPageRows, DashboardRate: dashboard.DefaultResponsesPerSecond}, Timing: Timing{Interval: probespec.DefaultInterval, Rise: probespec.DefaultRise, Fall: probespec.DefaultFall},
		PublishWhen: contract.PublishAllPorts, AllDown: contract.AllDownPublishAll}
	if len(doc.Content) == 0 {
		d.errorf(&doc, "", "the file is empty")
		return nil, d.err()
	}
	d.config(doc.Content[0], cfg)
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlError is the YAML parser's err as a *ConfigError with its line.
func yamlError(file string, err error) *ConfigError {
	ce := &ConfigError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	if m := yamlLine.FindStringSubmatch(ce.Msg); m != nil {
		ce.Line, _ = strconv.Atoi(m[1])
		ce.Msg = m[2]
	}
	return ce
}

// decoder walks the YAML tree and collects errors with their positions.
type decoder struct {
	file, dir string
	errs      []error
	// servicePos holds the positions of each service's name and hostnames,
	// by service name, for the zone builder's problems.
	servicePos map[string]*servicePos
}

type servicePos struct {
	path      string
	name      *yaml.Node
	hostnames []hostnamePos
}

type hostnamePos struct {
	path, given, fqdn string
	node              *yaml.Node
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &ConfigError{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) err() error { return errors.Join(d.errs...) }

// mapping returns the keys of mapping node n, each with its key node for
// positions. Unknown keys and repeated keys are errors.
func (d *decoder) mapping(n *yaml.Node, path string, known ...string) (map[string]*yaml.Node, map[string]*yaml.Node, bool) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of %s, got %s", strings.Join(known, ", "), kindName(n))
		return nil, nil, false
	}
	vals, keys := map[string]*yaml.Node{}, map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		if !slices.Contains(known, k.Value) {
			d.errorf(k, kp, "unknown key%s", probespec.Suggest(k.Value, known))
			continue
		}
		if _, dup := vals[k.Value]; dup {
			d.errorf(k, kp, "given twice (first on line %d)", keys[k.Value].Line)
			continue
		}
		vals[k.Value], keys[k.Value] = resolve(v), k
	}
	return vals, keys, true
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return resolve(n.Content[0])
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool") {
		d.errorf(n, path, "want a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) list(n *yaml.Node, path string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil || n.Tag != "!!bool" {
		d.errorf(n, path, "want true or false, got %s", kindName(n))
		return false, false
	}
	return b, true
}

func (d *decoder) integer(n *yaml.Node, path string, lo, hi int) (int, bool) {
	v, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		d.errorf(n, path, "want a whole number, got %s", kindName(n))
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n, path, "%d is out of range: want %d to %d", v, lo, hi)
		return 0, false
	}
	return v, true
}

func (d *decoder) duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.errorf(n, path, "%q is not a duration such as 500ms or 2s", s)
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n, path, "%s is out of range: want %s to %s", v, lo, hi)
		return 0, false
	}
	return v, true
}

func (d *decoder) oneOf(n *yaml.Node, path string, choices ...string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if !slices.Contains(choices, s) {
		d.errorf(n, path, "%q is not one of %s%s", s, strings.Join(choices, ", "), probespec.Suggest(s, choices))
		return "", false
	}
	return s, true
}

func (d *decoder) path(n *yaml.Node, path string) string {
	s, ok := d.str(n, path)
	if !ok {
		return ""
	}
	if s == "" {
		d.errorf(n, path, "empty path")
		return ""
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(d.dir, s)
	}
	return s
}

func (d *decoder) listenAddr(n *yaml.Node, path string) string {
	s, ok := d.str(n, path)
	if !ok {
		return ""
	}
	if err := CheckListen(s); err != nil {
		d.errorf(n, path, "%q is not a listen address such as 127.0.0.1:8080 or :53 (%v)", s, err)
		return ""
	}
	return s
}

// listenOverlap reports whether TCP sockets listening on a and b (both
// passed CheckListen) would take the same port: the same port, not 0 (a
// free one each), and the same address or one of them every address of
// the other's family. Go listens on "" and "::" for both families.
func listenOverlap(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	if ha == "" || hb == "" {
		return true
	}
	ia, _ := netip.ParseAddr(ha)
	ib, _ := netip.ParseAddr(hb)
	ia, ib = ia.Unmap(), ib.Unmap()
	switch {
	case ia == ib, ia == netip.IPv6Unspecified(), ib == netip.IPv6Unspecified():
		return true
	case ia == netip.IPv4Unspecified():
		return ib.Is4()
	case ib == netip.IPv4Unspecified():
		return ia.Is4()
	}
	return false
}

// CheckListen checks a listen address as the configuration file takes it:
// IP:PORT, [IPv6]:PORT or :PORT (every address), the port a number from 0
// (a free one) to 65535.
func CheckListen(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("bad port %q", port)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q is not an IP address", host)
		}
	}
	return nil
}

var topKeys = []string{"instance", "zone", "dns", "http", "metrics", "interval", "timeout", "rise", "fall",
	"publish-when", "all-down", "secrets", "peers", "token-file", "state-file", "services", "external-vantage"}

func (d *decoder) config(root *yaml.Node, cfg *Config) {
	m, keys, ok := d.mapping(root, "", topKeys...)
	if !ok {
		return
	}
	if n := m["instance"]; n != nil {
		if s, ok := d.str(n, "instance"); ok {
			if !isLabel(s) {
				d.errorf(n, "instance", "%q is not a name of lower-case letters, digits and '-'", s)
			}
			cfg.Instance = s
		}
	} else {
		host, _ := os.Hostname()
		cfg.Instance = strings.ToLower(strings.SplitN(host, ".", 2)[0])
		if !isLabel(cfg.Instance) {
			d.errorf(root, "instance", "not set, and the host name %q is not a name of lower-case letters, digits and '-'", host)
		}
	}
	if n := m["zone"]; n != nil {
		if s, ok := d.str(n, "zone"); ok {
			// The zone builder's own rule, so that a zone that passes
			// is a zone that is served.
			if z, err := dnsexport.ParseOrigin(s); err != nil {
				d.errorf(n, "zone", "%q is not a zone name: %v", s, err)
			} else {
				cfg.Zone = z
			}
		}
	} else {
		d.errorf(root, "zone", "required: the DNS zone to serve, such as lb.example.test.")
	}
	if n := m["dns"]; n != nil {
		d.dns(n, cfg)
	}
	var httpListen *yaml.Node
	if n := m["http"]; n != nil {
		if hm, _, ok := d.mapping(n, "http", "listen", "max-connections", "dashboard-rows", "dashboard-rate"); ok {
			if httpListen = hm["listen"]; httpListen != nil {
				cfg.HTTP.Listen = d.listenAddr(httpListen, "http.listen")
			}
			if n := hm["max-connections"]; n != nil {
				cfg.HTTP.MaxConnections, _ = d.integer(n, "http.max-connections", minHTTPConnections, maxHTTPConnections)
			}
			if n := hm["dashboard-rows"]; n != nil {
				cfg.HTTP.DashboardRows, _ = d.integer(n, "http.dashboard-rows", 10, 100000)
			}
			if n := hm["dashboard-rate"]; n != nil {
				cfg.HTTP.DashboardRate, _ = d.integer(n, "http.dashboard-rate", 1, 10000)
			}
		}
	}
	if cfg.HTTP.Listen != "" && cfg.DNS.Listen != "" && listenOverlap(cfg.HTTP.Listen, cfg.DNS.Listen) {
		if httpListen != nil {
			d.errorf(httpListen, "http.listen", "%q takes dns.listen's port (%q): the DNS server listens there on TCP too; give the HTTP server another port",
				cfg.HTTP.Listen, cfg.DNS.Listen)
		} else {
			d.errorf(m["dns"], "dns.listen", "%q takes the port of http.listen's default (%q): set http.listen to another port, or give the DNS server another",
				cfg.DNS.Listen, cfg.HTTP.Listen)
		}
	}
	if n := m["metrics"]; n != nil {
		cfg.Metrics, _ = d.boolean(n, "metrics")
	}
	d.timing(m, "", &cfg.Timing)
	if n := m["publish-when"]; n != nil {
		cfg.PublishWhen, _ = d.oneOf(n, "publish-when", contract.PublishAllPorts, contract.PublishAnyPort)
	}
	if n := m["all-down"]; n != nil {
		cfg.AllDown, _ = d.oneOf(n, "all-down", contract.AllDownPublishAll, contract.AllDownPublishNone)
	}
	if n := m["secrets"]; n != nil {
		if sm, _, ok := d.mapping(n, "secrets", "dir"); ok && sm["dir"] != nil {
			cfg.SecretsDir = d.path(sm["dir"], "secrets.dir")
		}
	}
	if n := m["token-file"]; n != nil {
		if cfg.TokenFile = d.path(n, "token-file"); cfg.TokenFile != "" {
			b, err := readFile(cfg.TokenFile, maxTokenBytes, "a token file")
			switch {
			case err != nil:
				d.errorf(n, "token-file", "reading the token: %v", err)
			case len(strings.TrimSpace(string(b))) < 16:
				d.errorf(n, "token-file", "the token in %s is shorter than 16 characters", cfg.TokenFile)
			default:
				cfg.Token = Secret(strings.TrimSpace(string(b)))
			}
		}
	}
	if n := m["peers"]; n != nil {
		d.peers(n, cfg)
		if len(cfg.Peers) > 0 && m["token-file"] == nil {
			d.errorf(keys["peers"], "peers", "peers need token-file: the shared token they authenticate with")
		}
		if len(cfg.Peers) > 0 && httpListen == nil {
			d.errorf(keys["peers"], "http.listen", "required with peers: they poll this instance's report over HTTP, and the default %s is reachable from this host only", DefaultHTTPListen)
		}
	}
	if n := m["state-file"]; n != nil {
		if cfg.StateFile = d.path(n, "state-file"); cfg.StateFile != "" {
			if err := checkStateFile(cfg.StateFile, MaxStateBytes, "a state file"); err != nil {
				d.errorf(n, "state-file", "%v", err)
			}
		}
	}
	if n := m["external-vantage"]; n != nil {
		d.externalVantage(n, cfg)
	}
	if n := m["services"]; n != nil {
		d.services(n, cfg)
	} else {
		d.errorf(root, "services", "required: at least one service")
	}
	if len(d.errs) == 0 {
		d.zone(root, cfg)
	}
}

func (d *decoder) externalVantage(n *yaml.Node, cfg *Config) {
	m, _, ok := d.mapping(n, "external-vantage", "kubeconfig", "name", "namespace", "class-only")
	if !ok {
		return
	}
	ev := &ExternalVantage{Name: cfg.Instance, Namespace: DefaultExternalNamespace}
	if v := m["kubeconfig"]; v == nil {
		d.errorf(n, "external-vantage.kubeconfig", "required: the vantage's own kubeconfig (pulselb vantage-kubeconfig writes one)")
	} else if ev.Kubeconfig = d.path(v, "external-vantage.kubeconfig"); ev.Kubeconfig != "" {
		if _, err := readFile(ev.Kubeconfig, MaxConfigBytes, "a kubeconfig"); err != nil {
			d.errorf(v, "external-vantage.kubeconfig", "%v", err)
		}
	}
	if v := m["name"]; v != nil {
		ev.Name, _ = d.str(v, "external-vantage.name")
	}
	if _, err := contract.ExternalReportName(ev.Name); err != nil {
		at := n
		if v := m["name"]; v != nil {
			at = v
		}
		d.errorf(at, "external-vantage.name", "%v", err)
	}
	if v := m["namespace"]; v != nil {
		if s, ok := d.str(v, "external-vantage.namespace"); ok {
			if !isLabel(s) {
				d.errorf(v, "external-vantage.namespace", "%q is not a namespace name", s)
			}
			ev.Namespace = s
		}
	}
	if v := m["class-only"]; v != nil {
		ev.ClassOnly, _ = d.boolean(v, "external-vantage.class-only")
	}
	cfg.ExternalVantage = ev
}

func (d *decoder) dns(n *yaml.Node, cfg *Config) {
	m, _, ok := d.mapping(n, "dns", "listen", "ttl", "nameservers", "hostmaster", "serial-file", "rate-limit")
	if !ok {
		return
	}
	if v := m["listen"]; v != nil {
		cfg.DNS.Listen = d.listenAddr(v, "dns.listen")
	}
	if v := m["ttl"]; v != nil {
		ttl, _ := d.integer(v, "dns.ttl", 1, contract.MaxDNSTTL)
		cfg.DNS.TTL = uint32(ttl)
	}
	if v := m["nameservers"]; v != nil {
		for i, e := range d.list(v, "dns.nameservers") {
			p := fmt.Sprintf("dns.nameservers[%d]", i)
			if s, ok := d.str(e, p); ok {
				ns, err := dnsexport.ParseNameServer(s)
				if err != nil {
					d.errorf(e, p, "%v (want name or name=ip[,ip])", err)
					continue
				}
				cfg.DNS.NameServers = append(cfg.DNS.NameServers, ns)
			}
		}
	}
	if v := m["hostmaster"]; v != nil {
		if s, ok := d.str(v, "dns.hostmaster"); ok {
			if err := dnsexport.CheckHostmaster(s); err != nil {
				d.errorf(v, "dns.hostmaster", "%.80q is not a mail address or a domain name: %v", s, err)
			} else {
				cfg.DNS.Hostmaster = s
			}
		}
	}
	if v := m["serial-file"]; v != nil {
		if cfg.DNS.SerialFile = d.path(v, "dns.serial-file"); cfg.DNS.SerialFile != "" {
			if err := checkStateFile(cfg.DNS.SerialFile, MaxSerialBytes, "a serial file"); err != nil {
				d.errorf(v, "dns.serial-file", "%v", err)
			}
		}
	}
	if v := m["rate-limit"]; v != nil {
		cfg.DNS.RateLimit = d.rateLimit(v, "dns.rate-limit")
	}
}

// rateLimit reads dns.rate-limit: the controller's --dns-rate-limit
// flags as a mapping, with their defaults.
func (d *decoder) rateLimit(n *yaml.Node, path string) dnsexport.RateLimit {
	rl := dnsexport.DefaultRateLimit
	m, _, ok := d.mapping(n, path, "responses-per-second", "burst", "slip")
	if !ok {
		return rl
	}
	if v := m["responses-per-second"]; v != nil {
		rate, _ := d.integer(v, path+".responses-per-second", 0, 1000000)
		rl.ResponsesPerSecond, rl.Burst = float64(rate), 2*rate
	}
	if v := m["burst"]; v != nil {
		rl.Burst, _ = d.integer(v, path+".burst", 1, 1000000)
	}
	if v := m["slip"]; v != nil {
		rl.Slip, _ = d.integer(v, path+".slip", 0, 100)
	}
	if rl.ResponsesPerSecond == 0 {
		return dnsexport.RateLimit{}
	}
	return rl
}

// zone checks that the zone builds with the configured name servers, or
// the default one: ns.<zone> at the DNS listen address.
func (d *decoder) zone(root *yaml.Node, cfg *Config) {
	if len(cfg.DNS.NameServers) == 0 {
		host, _, _ := net.SplitHostPort(cfg.DNS.Listen)
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.IsUnspecified() {
			d.errorf(root, "dns.nameservers", "required when dns.listen (%q) names no single address: the zone's NS records, such as ns1.%s=192.0.2.53", cfg.DNS.Listen, cfg.Zone)
			return
		}
		cfg.DNS.NameServers = []dnsexport.NameServer{{Name: "ns." + cfg.Zone, Addrs: []netip.Addr{ip}}}
	}
	// Build the zone with every host published: whatever it would not
	// serve is an error here, with the position of the name at fault.
	_, problems, err := dnsexport.Build(cfg.zoneConfig(), cfg.zoneServices())
	if err != nil {
		d.errorf(root, "dns", "%v", err)
		return
	}
	for _, p := range problems {
		d.zoneProblem(root, p)
	}
}

// zoneProblem turns a problem of the zone builder into an error at the
// service name or hostname it is about.
func (d *decoder) zoneProblem(root *yaml.Node, p error) {
	var se *dnsexport.ServiceError
	switch {
	case errors.Is(p, dnsexport.ErrAddressesCapped):
		// Served, a window of addresses per answer; the server logs it.
		return
	case !errors.As(p, &se) || d.servicePos[se.Name] == nil:
		d.errorf(root, "services", "%v", p)
		return
	}
	pos := d.servicePos[se.Name]
	var he *dnsexport.HostnameError
	if errors.As(p, &he) {
		for _, h := range pos.hostnames {
			if h.fqdn == he.Hostname {
				d.errorf(h.node, h.path, "%q is not served: %v", h.given, he.Err)
				return
			}
		}
	}
	d.errorf(pos.name, pos.path+".name", "%q is not served: %v", se.Name, se.Err)
}

// zoneServices is the zone builder's input with every host published.
func (cfg *Config) zoneServices() []dnsexport.Service {
	out := make([]dnsexport.Service, 0, len(cfg.Services))
	for _, svc := range cfg.Services {
		ds := dnsexport.Service{Name: svc.Name, Hostnames: svc.Hostnames, TTL: svc.TTL}
		for _, h := range svc.Hosts {
			ds.IPs = append(ds.IPs, h.Addresses...)
		}
		for _, p := range svc.Ports {
			ds.Ports = append(ds.Ports, dnsexport.Port{Name: p.Name, Port: p.Port, Protocol: p.Protocol})
		}
		out = append(out, ds)
	}
	return out
}

func (cfg *Config) zoneConfig() dnsexport.ZoneConfig {
	return dnsexport.ZoneConfig{Origin: cfg.Zone, NameServers: cfg.DNS.NameServers, Hostmaster: cfg.DNS.Hostmaster, DefaultTTL: cfg.DNS.TTL}
}

func (d *decoder) timing(m map[string]*yaml.Node, path string, t *Timing) {
	if n := m["interval"]; n != nil {
		t.Interval, _ = d.duration(n, join(path, "interval"), probespec.MinInterval, MaxInterval)
	}
	if n := m["timeout"]; n != nil {
		t.Timeout, _ = d.duration(n, join(path, "timeout"), 10*time.Millisecond, time.Minute)
	}
	if n := m["rise"]; n != nil {
		t.Rise, _ = d.integer(n, join(path, "rise"), 1, 100)
	}
	if n := m["fall"]; n != nil {
		t.Fall, _ = d.integer(n, join(path, "fall"), 1, 100)
	}
}

func (d *decoder) peers(n *yaml.Node, cfg *Config) {
	seen := map[string]bool{cfg.Instance: true}
	urls := map[string]string{}
	for i, e := range d.list(n, "peers") {
		p := fmt.Sprintf("peers[%d]", i)
		m, _, ok := d.mapping(e, p, "name", "url")
		if !ok {
			continue
		}
		var peer Peer
		if v := m["name"]; v == nil {
			d.errorf(e, p+".name", "required")
		} else if s, ok := d.str(v, p+".name"); ok {
			switch {
			case !isLabel(s):
				d.errorf(v, p+".name", "%q is not a name of lower-case letters, digits and '-'", s)
			case s == cfg.Instance:
				d.errorf(v, p+".name", "%q is this instance's own name", s)
			case seen[s]:
				d.errorf(v, p+".name", "%q is listed twice", s)
			}
			seen[s], peer.Name = true, s
		}
		if v := m["url"]; v == nil {
			d.errorf(e, p+".url", "required: the peer's http address, such as http://192.0.2.2:9471")
		} else if s, ok := d.str(v, p+".url"); ok {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				d.errorf(v, p+".url", "%q is not an http or https URL", s)
			} else {
				// Polling this instance, or one peer twice, would count
				// one vantage's votes twice.
				key := peerURLKey(u)
				switch first, dup := urls[key]; {
				case dup:
					d.errorf(v, p+".url", "%q is also %s's url: the same instance listed twice would vote twice", s, first)
				case pointsAtListen(u, cfg.HTTP.Listen):
					d.errorf(v, p+".url", "%q is this instance's own http.listen (%s): an instance is not its own peer", s, cfg.HTTP.Listen)
				}
				urls[key] = cmp.Or(peer.Name, p)
			}
			peer.URL = strings.TrimSuffix(s, "/")
		}
		cfg.Peers = append(cfg.Peers, peer)
	}
}

// peerURLKey is u as two URLs that reach the same report compare: scheme
// and host in lower case, the default port explicit, no final slash.
func peerURLKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port) + strings.TrimSuffix(u.EscapedPath(), "/")
}

// pointsAtListen reports whether u reaches the HTTP server listening on
// listen on this host: the same port, and u's host the listen address,
// or, when listen is every address, "localhost" or an address of this
// host. A host name other than localhost is not resolved; an instance
// that polls itself through one is found when its report comes back
// under its own name.
func pointsAtListen(u *url.URL, listen string) bool {
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil || lport == "0" {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if port != lport {
		return false
	}
	host := strings.ToLower(u.Hostname())
	lip, lerr := netip.ParseAddr(lhost)
	ip, ierr := netip.ParseAddr(host)
	if host == "localhost" {
		ip, ierr = netip.MustParseAddr("127.0.0.1"), nil
		if lerr == nil && lip.Is6() && lip.IsLoopback() {
			ip = lip
		}
	}
	if ierr != nil {
		return false
	}
	ip = ip.Unmap()
	if lerr == nil && !lip.IsUnspecified() {
		return lip.Unmap() == ip
	}
	if lerr == nil && lip == netip.IPv4Unspecified() && !ip.Is4() {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

var serviceKeys = []string{"name", "hostnames", "ttl", "publish-when", "all-down", "interval", "timeout", "rise", "fall", "hosts", "ports"}

func (d *decoder) services(n *yaml.Node, cfg *Config) {
	items := d.list(n, "services")
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		d.errorf(n, "services", "required: at least one service")
	}
	seen := map[string]int{}
	for i, e := range items {
		p := fmt.Sprintf("services[%d]", i)
		m, _, ok := d.mapping(e, p, serviceKeys...)
		if !ok {
			continue
		}
		svc := Service{PublishWhen: cfg.PublishWhen, AllDown: cfg.AllDown, Timing: cfg.Timing}
		pos := &servicePos{path: p, name: e}
		if v := m["name"]; v == nil {
			d.errorf(e, p+".name", "required")
		} else if s, ok := d.str(v, p+".name"); ok {
			if !isLabel(s) {
				d.errorf(v, p+".name", "%q is not a DNS label (lower-case letters, digits and '-')", s)
			} else if first, dup := seen[s]; dup {
				d.errorf(v, p+".name", "%q is also services[%d]", s, first)
			}
			seen[s], svc.Name, pos.name = i, s, v
		}
		if v := m["hostnames"]; v != nil {
			for j, h := range d.list(v, p+".hostnames") {
				hp := fmt.Sprintf("%s.hostnames[%d]", p, j)
				if s, ok := d.str(h, hp); ok {
					// The zone builder's own check of a hostname.
					fq, inZone, err := dnsexport.ZoneHostname(cfg.Zone, s)
					switch {
					case err != nil && inZone:
						d.errorf(h, hp, "%q is not served: %v", s, err)
					case err != nil:
						d.errorf(h, hp, "%q is not a hostname: %v", s, err)
					case cfg.Zone != "" && !inZone:
						d.errorf(h, hp, "%q is not a name inside zone %s", s, cfg.Zone)
					default:
						svc.Hostnames = append(svc.Hostnames, fq)
						pos.hostnames = append(pos.hostnames, hostnamePos{path: hp, given: s, fqdn: fq, node: h})
					}
				}
			}
		}
		if v := m["ttl"]; v != nil {
			ttl, _ := d.integer(v, p+".ttl", 1, contract.MaxDNSTTL)
			svc.TTL = uint32(ttl)
		}
		if v := m["publish-when"]; v != nil {
			svc.PublishWhen, _ = d.oneOf(v, p+".publish-when", contract.PublishAllPorts, contract.PublishAnyPort)
		}
		if v := m["all-down"]; v != nil {
			svc.AllDown, _ = d.oneOf(v, p+".all-down", contract.AllDownPublishAll, contract.AllDownPublishNone)
		}
		d.timing(m, p, &svc.Timing)
		if v := m["hosts"]; v != nil {
			d.hosts(v, p, &svc)
		} else {
			d.errorf(e, p+".hosts", "required: at least one host")
		}
		if v := m["ports"]; v != nil {
			d.ports(v, p, cfg, &svc)
		} else {
			d.errorf(e, p+".ports", "required: at least one port")
		}
		cfg.Services = append(cfg.Services, svc)
		if d.servicePos == nil {
			d.servicePos = map[string]*servicePos{}
		}
		d.servicePos[svc.Name] = pos
	}
}

func (d *decoder) hosts(n *yaml.Node, path string, svc *Service) {
	items := d.list(n, path+".hosts")
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		d.errorf(n, path+".hosts", "required: at least one host")
	}
	names, addrs := map[string]bool{}, map[netip.Addr]string{}
	for i, e := range items {
		p := fmt.Sprintf("%s.hosts[%d]", path, i)
		m, _, ok := d.mapping(e, p, "name", "address", "addresses", "probe-address")
		if !ok {
			continue
		}
		var h Host
		if v := m["name"]; v == nil {
			d.errorf(e, p+".name", "required")
		} else if s, ok := d.str(v, p+".name"); ok {
			if !isLabel(s) {
				d.errorf(v, p+".name", "%q is not a name of lower-case letters, digits and '-'", s)
			} else if names[s] {
				d.errorf(v, p+".name", "%q is listed twice", s)
			}
			names[s], h.Name = true, s
		}
		addr := func(v *yaml.Node, ap string) netip.Addr {
			s, ok := d.str(v, ap)
			if !ok {
				return netip.Addr{}
			}
			ip, err := netip.ParseAddr(s)
			if err != nil || ip.Zone() != "" || ip.IsUnspecified() {
				d.errorf(v, ap, "%q is not an IP address", s)
				return netip.Addr{}
			}
			return ip.Unmap()
		}
		switch {
		case m["address"] != nil && m["addresses"] != nil:
			d.errorf(m["addresses"], p+".addresses", "give address or addresses, not both")
		case m["address"] != nil:
			if ip := addr(m["address"], p+".address"); ip.IsValid() {
				h.Addresses = append(h.Addresses, ip)
			}
		case m["addresses"] != nil:
			for j, v := range d.list(m["addresses"], p+".addresses") {
				if ip := addr(v, fmt.Sprintf("%s.addresses[%d]", p, j)); ip.IsValid() {
					h.Addresses = append(h.Addresses, ip)
				}
			}
		default:
			d.errorf(e, p+".address", "required: the host's IP address")
		}
		for _, ip := range h.Addresses {
			if other, dup := addrs[ip]; dup && other != h.Name {
				d.errorf(e, p, "address %s is also host %q's", ip, other)
			}
			addrs[ip] = h.Name
		}
		if v := m["probe-address"]; v != nil {
			h.ProbeAddress = addr(v, p+".probe-address")
		} else if len(h.Addresses) > 0 {
			h.ProbeAddress = h.Addresses[0]
		}
		svc.Hosts = append(svc.Hosts, h)
	}
}

func (d *decoder) ports(n *yaml.Node, path string, cfg *Config, svc *Service) {
	items := d.list(n, path+".ports")
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		d.errorf(n, path+".ports", "required: at least one port")
	}
	seen := map[string]bool{}
	for i, e := range items {
		p := fmt.Sprintf("%s.ports[%d]", path, i)
		m, _, ok := d.mapping(e, p, "name", "port", "protocol", "probe")
		if !ok {
			continue
		}
		port := Port{Protocol: "TCP"}
		if v := m["name"]; v != nil {
			if s, ok := d.str(v, p+".name"); ok {
				if !isLabel(s) {
					d.errorf(v, p+".name", "%q is not a DNS label", s)
				}
				port.Name = s
			}
		}
		if v := m["port"]; v == nil {
			d.errorf(e, p+".port", "required")
		} else if n, ok := d.integer(v, p+".port", 1, 65535); ok {
			port.Port = uint16(n)
		}
		if v := m["protocol"]; v != nil {
			if s, ok := d.str(v, p+".protocol"); ok {
				switch strings.ToUpper(s) {
				case "TCP", "UDP":
					port.Protocol = strings.ToUpper(s)
				default:
					d.errorf(v, p+".protocol", "%q is not TCP or UDP", s)
				}
			}
		}
		text := strings.ToLower(port.Protocol)
		if v := m["probe"]; v != nil {
			if s, ok := d.str(v, p+".probe"); ok {
				text = s
			}
		}
		spec, err := probespec.Parse(text)
		if err != nil {
			node := e
			if m["probe"] != nil {
				node = m["probe"]
			}
			d.errorf(node, p+".probe", "%v", err)
		} else {
			switch {
			case spec.Secret != "" && cfg.SecretsDir == "":
				d.errorf(m["probe"], p+".probe", "secret=%s needs secrets.dir, the directory holding %s/password", spec.Secret, spec.Secret)
			case spec.Secret != "":
				// Read as the probe reads it, so that a file the probe
				// would refuse is refused here first.
				file := prober.DirSecrets(cfg.SecretsDir).PasswordFile(spec.Secret)
				if err := files.Check(file, prober.MaxSecretBytes, "a password file"); err != nil {
					d.errorf(m["probe"], p+".probe", "secret=%s: %v", spec.Secret, err)
				}
			}
			port.Spec, port.Probe = spec, spec.String()
		}
		key := port.Protocol + "/" + strconv.Itoa(int(port.Port))
		if port.Port != 0 && seen[key] {
			d.errorf(e, p, "port %s is listed twice", key)
		}
		seen[key] = true
		svc.Ports = append(svc.Ports, port)
	}
}

// isLabel reports whether s is a DNS label of lower-case letters, digits
// and '-' (dnsname.Label), which every name in the file must be.
func isLabel(s string) bool { return dnsname.Label(s) == nil }
