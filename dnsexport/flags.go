package dnsexport

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// ParseNameServer parses a --dns-ns value: "name" or "name=ip[,ip...]".
func ParseNameServer(v string) (NameServer, error) {
	name, ips, hasIPs := strings.Cut(strings.TrimSpace(v), "=")
	if _, err := parseHost(name, "a name server"); err != nil {
		return NameServer{}, fmt.Errorf("name server %q: %w", v, err)
	}
	ns := NameServer{Name: name}
	if hasIPs {
		for _, s := range strings.Split(ips, ",") {
			ip, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return NameServer{}, fmt.Errorf("name server %q: %w", v, err)
			}
			ns.Addrs = append(ns.Addrs, ip)
		}
	}
	return ns, nil
}

// ParseSecondary parses a --dns-secondaries entry: "ip:port" or
// "ip:port/keyname"; the port defaults to 53.
func ParseSecondary(v string) (Secondary, error) {
	addr, key, _ := strings.Cut(strings.TrimSpace(v), "/")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		ip, ierr := netip.ParseAddr(strings.Trim(addr, "[]"))
		if ierr != nil {
			return Secondary{}, fmt.Errorf("secondary %q: %w", v, err)
		}
		ap = netip.AddrPortFrom(ip, 53)
	}
	return Secondary{Addr: ap, Key: key}, nil
}

// ReadTSIGKey reads a --dns-tsig-key value "name:path", where the file at
// path holds the base64 secret (a mounted Secret), so the secret never
// appears on a command line.
func ReadTSIGKey(v string) (TSIGKey, error) {
	name, path, ok := strings.Cut(v, ":")
	if !ok || name == "" || path == "" {
		return TSIGKey{}, fmt.Errorf("tsig key %q: want name:path-to-secret-file", v)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return TSIGKey{}, fmt.Errorf("reading tsig key %s: %w", name, err)
	}
	k := TSIGKey{Name: name, Secret: strings.TrimSpace(string(b))}
	if _, err := newKeyring([]TSIGKey{k}); err != nil {
		return TSIGKey{}, err
	}
	return k, nil
}
