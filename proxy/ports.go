package proxy

import (
	"fmt"
	"strconv"
	"strings"
)

// Protocol is a transport protocol the proxy forwards.
type Protocol string

// The protocols a Service port may have that the proxy forwards. SCTP is not
// forwarded: kube-proxy supports it, but nobody has asked for it here.
const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Port is one Service port: traffic arriving on Number is forwarded to the
// same port number on the ClusterIP, because the proxy pod's hostPort is the
// Service port.
type Port struct {
	Protocol Protocol
	Number   uint16
}

// String returns the port as written on the command line, "TCP:80".
func (p Port) String() string {
	return strings.ToUpper(string(p.Protocol)) + ":" + strconv.Itoa(int(p.Number))
}

// ParsePorts parses a comma-separated list such as "TCP:80,UDP:53". The
// protocol is case-insensitive; a port may appear once per protocol.
func ParsePorts(s string) ([]Port, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no ports: want a list such as TCP:80,UDP:53")
	}
	var ports []Port
	seen := map[Port]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		p, err := parsePort(item)
		if err != nil {
			return nil, err
		}
		if seen[p] {
			return nil, fmt.Errorf("port %q: listed twice", item)
		}
		seen[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// parsePort parses one "PROTOCOL:PORT" item.
func parsePort(item string) (Port, error) {
	proto, num, ok := strings.Cut(item, ":")
	if !ok {
		return Port{}, fmt.Errorf("port %q: want PROTOCOL:PORT, such as TCP:80", item)
	}
	var p Port
	switch Protocol(strings.ToLower(proto)) {
	case TCP:
		p.Protocol = TCP
	case UDP:
		p.Protocol = UDP
	default:
		return Port{}, fmt.Errorf("port %q: protocol %q is not TCP or UDP", item, proto)
	}
	n, err := parsePortNumber(num)
	if err != nil {
		return Port{}, fmt.Errorf("port %q: %w", item, err)
	}
	p.Number = n
	return p, nil
}

func parsePortNumber(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// ParseNodePorts parses a comma-separated list of Service ports and their
// NodePorts such as "TCP:80=30080,UDP:53=30053", the form of
// PULSELB_NODE_PORT_TARGET. An empty string means no targets.
func ParseNodePorts(s string) (map[Port]uint16, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	targets := map[Port]uint16{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		port, nodePort, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("node-port target %q: want PROTOCOL:PORT=NODEPORT, such as TCP:80=30080", item)
		}
		p, err := parsePort(strings.TrimSpace(port))
		if err != nil {
			return nil, fmt.Errorf("node-port target %q: %w", item, err)
		}
		n, err := parsePortNumber(strings.TrimSpace(nodePort))
		if err != nil {
			return nil, fmt.Errorf("node-port target %q: NodePort %w", item, err)
		}
		if _, dup := targets[p]; dup {
			return nil, fmt.Errorf("node-port target %q: %s listed twice", item, p)
		}
		targets[p] = n
	}
	return targets, nil
}
