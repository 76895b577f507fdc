// Package proxy is pulselb's data plane: it runs in a proxy pod's network
// namespace and forwards the Service ports arriving there (through the pod's
// hostPort) to the Service's ClusterIP, where kube-proxy takes over. With
// externalTrafficPolicy Local, ports with a NodePort target go to the node's
// own IP at that NodePort instead, so only the node's endpoints answer.
//
// In iptables mode it installs its own chains (PULSELB-*) in that namespace,
// never the host's: DNAT to ClusterIP:port, MASQUERADE, and a FORWARD
// allow-list from loadBalancerSourceRanges, for IPv4 and IPv6, re-checked
// periodically and removed on shutdown. In userspace mode it relays TCP
// (kernel splice) and UDP (a session per client) itself. Auto mode picks
// iptables when it works. A shutdown goes through phases (see Phase), so a
// planned change loses no connection.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Config is what one proxy forwards and how.
type Config struct {
	// ClusterIPs are the Service's ClusterIPs, at most one per family.
	ClusterIPs []netip.Addr
	// Ports are forwarded from this namespace to the same port on the
	// ClusterIP.
	Ports []Port
	// NodePorts sends some of Ports to the node's own IP at a NodePort
	// instead (externalTrafficPolicy Local); each key must be in Ports.
	NodePorts map[Port]uint16
	// NodeIPs are the node's addresses, at most one per family; with
	// NodePorts, one is needed for the family of every ClusterIP.
	NodeIPs []netip.Addr
	// ProxyProtocol names the TCP ports whose relay writes a PROXY
	// protocol header with the client's address in front of every
	// connection to the backend. A rule cannot write one, so in iptables
	// mode these ports are relayed in userspace and the others keep their
	// rules.
	ProxyProtocol map[Port]HeaderVersion
	// SourceRanges limits the clients; empty allows all. It is the
	// allow-list until SetAllowList replaces it.
	SourceRanges SourceRanges
	// AwaitAllowList starts the proxy closed, refusing every client,
	// until SetAllowList gives it the current list (which a watcher reads
	// from the API); SourceRanges is then ignored.
	AwaitAllowList bool
	// Mode is the requested mode; zero means ModeAuto.
	Mode Mode

	// ResyncInterval is how often iptables rules are checked and repaired.
	ResyncInterval time.Duration
	// DrainDelay is how long a shutdown keeps forwarding new connections as
	// before, while clients still resolve the node's address; zero refuses
	// them at once.
	DrainDelay time.Duration
	// DrainTimeout bounds how long open connections and sessions may finish
	// once new ones are refused. Userspace mode stops sooner when all have
	// ended; iptables mode cannot see the kernel's flows and waits it out,
	// and only after a drain delay.
	DrainTimeout time.Duration
	// DialTimeout bounds a userspace TCP connect to the ClusterIP.
	DialTimeout time.Duration
	// TCPIdleTimeout closes a userspace TCP connection that carried no
	// data either way for this long; negative means never.
	TCPIdleTimeout time.Duration
	// UDPIdleTimeout ends a UDP session with no datagram either way.
	UDPIdleTimeout time.Duration
	// UDPMaxSessions caps the UDP sessions per port; datagrams of new
	// clients beyond it are dropped.
	UDPMaxSessions int
	// ListenAddress is the address userspace mode listens on; zero means
	// every address of the namespace.
	ListenAddress netip.Addr

	// ProcSys is where the forwarding sysctls are read; empty means
	// DefaultProcSys.
	ProcSys string
	// NewIPTables opens one family's iptables; nil means NewIPTables.
	NewIPTables func(Family) (IPTables, error)
}

// Defaults for the zero fields of a Config.
const (
	DefaultResyncInterval = 5 * time.Second
	DefaultDrainTimeout   = 10 * time.Second
	DefaultDialTimeout    = 5 * time.Second
	DefaultUDPIdleTimeout = 60 * time.Second
	// DefaultTCPIdleTimeout is an hour: longer than the keepalive of any
	// client that means to stay connected (SSH, database pools and
	// Kubernetes watches send something within minutes; Linux TCP
	// keepalive does not count, as it carries no data), and short enough
	// that clients gone without a FIN give their file descriptors back
	// the same hour. Cloud load balancers pick from 350 s (AWS NLB) to
	// 10 minutes or more; an hour breaks fewer idle-but-alive clients.
	DefaultTCPIdleTimeout = time.Hour
	DefaultUDPMaxSessions = 10000
)

// ErrConfig wraps every error New returns for a bad Config.
var ErrConfig = errors.New("invalid proxy configuration")

// ErrNodePorts and ErrNodeIPs wrap ErrConfig for a bad Config.NodePorts or
// Config.NodeIPs, so a caller can name the setting at fault.
var (
	ErrNodePorts = fmt.Errorf("%w: node-port target", ErrConfig)
	ErrNodeIPs   = fmt.Errorf("%w: node IPs", ErrConfig)
	// ErrProxyProtocol wraps ErrConfig for a bad Config.ProxyProtocol.
	ErrProxyProtocol = fmt.Errorf("%w: proxy-protocol", ErrConfig)
)

// Proxy is one running data plane.
type Proxy struct {
	cfg     Config
	metrics *Metrics

	rules []*ruleManager // iptables mode, one per family
	tcp   []*tcpRelay    // userspace mode
	udp   []*udpRelay    // userspace mode

	// allow is the allow-list in force; the relays read it for every new
	// client.
	allow atomic.Pointer[AllowList]
	// rulesMu serialises changes to the iptables rules: the resync, the
	// drain and SetAllowList.
	rulesMu sync.Mutex

	mu        sync.Mutex
	mode      Mode // set once by Start
	phase     Phase
	healthErr error
	allowErr  error
}

// New checks cfg and fills in its defaults. metrics may be nil.
func New(cfg Config, metrics *Metrics) (*Proxy, error) {
	if len(cfg.ClusterIPs) == 0 || len(cfg.ClusterIPs) > 2 {
		return nil, fmt.Errorf("%w: want one ClusterIP, or one IPv4 and one IPv6, got %d", ErrConfig, len(cfg.ClusterIPs))
	}
	seen := map[Family]bool{}
	for i, a := range cfg.ClusterIPs {
		if !a.IsValid() {
			return nil, fmt.Errorf("%w: ClusterIP %d is not an address", ErrConfig, i)
		}
		cfg.ClusterIPs[i] = a.Unmap()
		f := familyOf(a)
		if seen[f] {
			return nil, fmt.Errorf("%w: two %s ClusterIPs", ErrConfig, f)
		}
		seen[f] = true
	}
	if len(cfg.Ports) == 0 {
		return nil, fmt.Errorf("%w: no ports", ErrConfig)
	}
	if cfg.DrainDelay < 0 {
		return nil, fmt.Errorf("%w: negative drain delay %v", ErrConfig, cfg.DrainDelay)
	}
	if err := checkNodePorts(&cfg, seen); err != nil {
		return nil, err
	}
	if err := checkProxyProtocol(&cfg); err != nil {
		return nil, err
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeAuto
	case ModeAuto, ModeIPTables, ModeUserspace:
	default:
		return nil, fmt.Errorf("%w: mode %q", ErrConfig, cfg.Mode)
	}
	setDefault(&cfg.ResyncInterval, DefaultResyncInterval)
	setDefault(&cfg.DrainTimeout, DefaultDrainTimeout)
	setDefault(&cfg.DialTimeout, DefaultDialTimeout)
	setDefault(&cfg.UDPIdleTimeout, DefaultUDPIdleTimeout)
	setDefault(&cfg.TCPIdleTimeout, DefaultTCPIdleTimeout)
	setDefault(&cfg.UDPMaxSessions, DefaultUDPMaxSessions)
	if cfg.ProcSys == "" {
		cfg.ProcSys = DefaultProcSys
	}
	if cfg.NewIPTables == nil {
		cfg.NewIPTables = NewIPTables
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	p := &Proxy{cfg: cfg, metrics: metrics}
	allow := AllowList{Ranges: cfg.SourceRanges}
	if cfg.AwaitAllowList {
		allow = ClosedAllowList
		p.allowErr = errors.New("waiting for the allow-list")
	}
	p.allow.Store(&allow)
	metrics.setAllowList(allow, "")
	return p, nil
}

// checkNodePorts checks the node-port target against the ports and the
// ClusterIP families, and unmaps the node IPs.
func checkNodePorts(cfg *Config, clusterFamilies map[Family]bool) error {
	nodeFamilies := map[Family]bool{}
	for i, a := range cfg.NodeIPs {
		if !a.IsValid() {
			return fmt.Errorf("%w: node IP %d is not an address", ErrNodeIPs, i)
		}
		cfg.NodeIPs[i] = a.Unmap()
		f := familyOf(a)
		if nodeFamilies[f] {
			return fmt.Errorf("%w: two %s node IPs", ErrNodeIPs, f)
		}
		nodeFamilies[f] = true
	}
	if len(cfg.NodePorts) == 0 {
		return nil
	}
	for _, p := range slices.SortedFunc(maps.Keys(cfg.NodePorts), comparePorts) {
		if !slices.Contains(cfg.Ports, p) {
			return fmt.Errorf("%w: %s is not one of the ports", ErrNodePorts, p)
		}
		if cfg.NodePorts[p] == 0 {
			return fmt.Errorf("%w: %s has NodePort 0", ErrNodePorts, p)
		}
	}
	for _, f := range []Family{IPv4, IPv6} {
		if clusterFamilies[f] && !nodeFamilies[f] {
			return fmt.Errorf("%w: no %s node IP for the %s ClusterIP", ErrNodeIPs, f, f)
		}
	}
	return nil
}

func comparePorts(a, b Port) int {
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	return int(a.Number) - int(b.Number)
}

// target returns the node-port target for the rules or relays of family f.
func (p *Proxy) target(f Family) NodePortTarget {
	for _, a := range p.cfg.NodeIPs {
		if familyOf(a) == f {
			return NodePortTarget{NodeIP: a, NodePorts: p.cfg.NodePorts}
		}
	}
	return NodePortTarget{}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Mode returns the mode in use once Start has returned, and "" before.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Healthy returns nil while the data plane works: the iptables rules were in
// place (or restored) at the last check, or the userspace listeners are open.
func (p *Proxy) Healthy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == "" {
		return errors.New("not started")
	}
	return errors.Join(p.healthErr, p.allowErr)
}

func (p *Proxy) setAllowErr(err error) {
	p.mu.Lock()
	p.allowErr = err
	p.mu.Unlock()
}

func (p *Proxy) setHealth(err error) {
	p.mu.Lock()
	p.healthErr = err
	p.mu.Unlock()
}

// Start chooses the mode and sets the data plane up: the rules are installed
// or the listeners are open when it returns nil. It logs the mode and why.
func (p *Proxy) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var iptErr error
	switch {
	case p.cfg.Mode == ModeAuto && len(p.ruledPorts()) == 0:
		iptErr = errors.New("every port sends a PROXY protocol header, which only the userspace relay writes")
	case p.cfg.Mode != ModeUserspace:
		iptErr = p.startIPTables()
	}
	mode, reason, err := chooseMode(p.cfg.Mode, iptErr)
	if err != nil {
		return err
	}
	relayed := p.cfg.Ports
	if mode == ModeIPTables {
		relayed = p.relayedPorts()
	}
	if err := p.startUserspace(ctx, relayed); err != nil {
		if mode == ModeIPTables {
			// Best effort: the error that matters is the one returned.
			_ = p.removeIPTables(ctx)
		}
		return err
	}
	p.mu.Lock()
	p.mode = mode
	p.mu.Unlock()
	p.metrics.setMode(mode)
	p.setPhase(PhaseServing)
	logger.Info("Started proxy", "mode", mode, "reason", reason,
		"clusterIPs", p.cfg.ClusterIPs, "ports", portStrings(p.cfg.Ports), "allow", p.AllowListNow().String(),
		"nodePortTarget", nodePortStrings(p.cfg.NodePorts), "nodeIPs", p.cfg.NodeIPs,
		"relayedPorts", portStrings(relayed), "proxyProtocol", proxyProtocolStrings(p.cfg.ProxyProtocol))
	return nil
}

// startIPTables checks forwarding and installs the rules of every family,
// removing what it installed when any family fails.
func (p *Proxy) startIPTables() error {
	for _, cip := range p.cfg.ClusterIPs {
		f := familyOf(cip)
		on, err := forwardingEnabled(p.cfg.ProcSys, f)
		if err != nil {
			return err
		}
		if !on {
			return fmt.Errorf("%s forwarding is off in this network namespace (run pulselb proxy-init first)", f)
		}
	}
	var managers []*ruleManager
	for _, cip := range p.cfg.ClusterIPs {
		f := familyOf(cip)
		ipt, err := p.cfg.NewIPTables(f)
		if err == nil {
			m := newRuleManager(f, ipt, p.ruleSet(f))
			managers = append(managers, m)
			_, err = m.ensure()
		}
		if err != nil {
			for _, m := range managers {
				// Best effort: the error that matters is the one returned.
				_ = removeRules(m.ipt)
			}
			return fmt.Errorf("installing %s rules: %w", f, err)
		}
	}
	p.rules = managers
	return nil
}

// startUserspace opens a listener for each of ports: every port in
// userspace mode, the PROXY protocol ports in iptables mode.
func (p *Proxy) startUserspace(ctx context.Context, ports []Port) error {
	host := ""
	if p.cfg.ListenAddress.IsValid() {
		host = p.cfg.ListenAddress.String()
	}
	for _, port := range ports {
		addr := net.JoinHostPort(host, strconv.Itoa(int(port.Number)))
		var err error
		switch port.Protocol {
		case TCP:
			var ln net.Listener
			if ln, err = relayListenConfig.Listen(ctx, "tcp", addr); err == nil {
				p.tcp = append(p.tcp, &tcpRelay{
					ln: ln.(*net.TCPListener), port: port, allow: &p.allow, backend: p.backend(port),
					header: p.cfg.ProxyProtocol[port], stopping: make(chan struct{}),
					dialTimeout: p.cfg.DialTimeout, idleTimeout: p.cfg.TCPIdleTimeout, metrics: p.metrics,
					conns:  map[*net.TCPConn]*relayedConn{},
					served: make(chan struct{}),
				})
			}
		case UDP:
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", addr); err == nil {
				p.udp = append(p.udp, &udpRelay{
					conn: pc.(*net.UDPConn), port: port, allow: &p.allow, backend: p.backend(port),
					idleTimeout: p.cfg.UDPIdleTimeout, maxSessions: p.cfg.UDPMaxSessions, metrics: p.metrics,
					sessions: map[netip.AddrPort]*udpSession{},
				})
			}
		}
		if err != nil {
			// Nothing is served yet: closing the sockets is all there is.
			for _, r := range p.tcp {
				r.ln.Close()
			}
			for _, r := range p.udp {
				r.conn.Close()
			}
			p.tcp, p.udp = nil, nil
			return fmt.Errorf("listening on %s: %w", port, err)
		}
	}
	if n := connectionSlots(); n > 0 && len(p.tcp) > 0 {
		slots := make(chan struct{}, n)
		for _, r := range p.tcp {
			r.slots = slots
		}
		klog.FromContext(ctx).V(2).Info("Bounded relayed TCP connections by the file descriptor limit", "connectionLimit", n)
	}
	for _, r := range p.tcp {
		go r.serve(ctx)
	}
	for _, r := range p.udp {
		r.wg.Add(1)
		go r.serve(ctx)
	}
	return nil
}

// backend returns the function that picks the destination for a client: the
// ClusterIP (or node IP, for a port with a NodePort) of the client's family,
// or of the only family.
func (p *Proxy) backend(port Port) func(netip.Addr) netip.AddrPort {
	byFamily := map[Family]netip.AddrPort{}
	for _, cip := range p.cfg.ClusterIPs {
		f := familyOf(cip)
		byFamily[f] = p.target(f).destination(cip, port)
	}
	first := byFamily[familyOf(p.cfg.ClusterIPs[0])]
	return func(client netip.Addr) netip.AddrPort {
		if ap, ok := byFamily[familyOf(client)]; ok {
			return ap
		}
		return first
	}
}

// Run keeps the data plane up until ctx is done (in iptables mode it
// re-checks the rules every ResyncInterval), then takes it down in phases:
// forwarding as before for DrainDelay, then refusing new connections while
// open ones finish for up to DrainTimeout, then removing the rules or
// closing what is left. Nothing cuts the phases short: the kubelet's SIGKILL
// at the end of the grace period bounds them. Run returns an error only
// when the rules could not be removed.
func (p *Proxy) Run(ctx context.Context) error {
	if p.Mode() == "" {
		return errors.New("running proxy: not started")
	}
	p.keepUp(ctx)
	// The phases log through ctx but must not end with it.
	return p.shutdown(context.WithoutCancel(ctx))
}

// resync checks and repairs every family's rules once.
func (p *Proxy) resync(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.rulesMu.Lock()
	defer p.rulesMu.Unlock()
	var errs []error
	for _, m := range p.rules {
		fam := m.family.String()
		repaired, err := m.ensure()
		if repaired > 0 {
			p.metrics.RuleRepairs.WithLabelValues(fam).Add(float64(repaired))
			logger.Info("Restored proxy rules", "family", fam, "repaired", repaired)
		}
		if err != nil {
			p.metrics.RuleErrors.WithLabelValues(fam).Inc()
			logger.Error(err, "Checking proxy rules failed", "family", fam)
			errs = append(errs, err)
		}
		p.readCounters(ctx, m)
	}
	p.setHealth(errors.Join(errs...))
}

// readCounters adds what m's rules counted since the last read to the
// metrics. A failed read is logged and leaves health alone: the rules
// still forward.
func (p *Proxy) readCounters(ctx context.Context, m *ruleManager) {
	counts, err := m.counters()
	p.metrics.addCounts(counts)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Reading rule counters failed", "family", m.family.String(), "err", err)
	}
}

// removeIPTables reads the rules' last counts and removes the rules of
// every family.
func (p *Proxy) removeIPTables(ctx context.Context) error {
	for _, m := range p.rules {
		p.readCounters(ctx, m)
	}
	klog.FromContext(ctx).Info("Removing proxy rules")
	var errs []error
	for _, m := range p.rules {
		if err := removeRules(m.ipt); err != nil {
			errs = append(errs, fmt.Errorf("removing %s rules: %w", m.family, err))
		}
	}
	return errors.Join(errs...)
}

// stopUserspace closes every listener and drains the relays in parallel.
func (p *Proxy) stopUserspace(drain time.Duration) {
	var wg sync.WaitGroup
	for _, r := range p.tcp {
		wg.Go(func() { r.shutdown(drain) })
	}
	for _, r := range p.udp {
		wg.Go(func() { r.shutdown(drain) })
	}
	wg.Wait()
}

// Cleanup removes rules a proxy left behind (after a crash or SIGKILL) in
// both families of this network namespace. A family without iptables is
// skipped: it cannot hold rules.
func Cleanup(newIPTables func(Family) (IPTables, error)) error {
	if newIPTables == nil {
		newIPTables = NewIPTables
	}
	var errs []error
	for _, f := range []Family{IPv4, IPv6} {
		ipt, err := newIPTables(f)
		if err != nil {
			continue
		}
		if err := removeRules(ipt); err != nil {
			errs = append(errs, fmt.Errorf("removing %s rules: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

func nodePortStrings(m map[Port]uint16) []string {
	var s []string
	for _, p := range slices.SortedFunc(maps.Keys(m), comparePorts) {
		s = append(s, p.String()+"="+strconv.Itoa(int(m[p])))
	}
	return s
}

func proxyProtocolStrings(m map[Port]HeaderVersion) []string {
	var s []string
	for _, p := range slices.SortedFunc(maps.Keys(m), comparePorts) {
		s = append(s, p.String()+"="+m[p].String())
	}
	return s
}

func portStrings(ps []Port) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}
