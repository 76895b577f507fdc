package proxy

import "fmt"

// Mode is how the proxy forwards traffic.
type Mode string

// The modes. ModeAuto is only ever requested; a running proxy is in
// ModeIPTables or ModeUserspace.
const (
	// ModeAuto uses iptables when pulselb can create its chains and
	// forwarding is on, and userspace otherwise.
	ModeAuto Mode = "auto"
	// ModeIPTables DNATs in the kernel: no copy through pulselb, the
	// client's address reaches the source-range filter, and connections
	// survive a pulselb restart.
	ModeIPTables Mode = "iptables"
	// ModeUserspace relays TCP and UDP through pulselb; it needs neither
	// NET_ADMIN, iptables nor forwarding.
	ModeUserspace Mode = "userspace"
)

// ParseMode parses a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeIPTables, ModeUserspace:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: want auto, iptables or userspace", s)
}

// chooseMode decides the data plane from the requested mode and why iptables
// mode cannot be used (nil when it can). It returns the mode and the reason,
// for the log line that tells a user which mode runs and why, or an error
// when iptables was asked for and cannot be used.
func chooseMode(requested Mode, iptablesErr error) (Mode, string, error) {
	switch {
	case requested == ModeUserspace:
		return ModeUserspace, "requested with --mode=userspace", nil
	case iptablesErr == nil && requested == ModeIPTables:
		return ModeIPTables, "requested with --mode=iptables", nil
	case iptablesErr == nil:
		return ModeIPTables, "iptables chains installed and forwarding is on", nil
	case requested == ModeIPTables:
		return "", "", fmt.Errorf("starting iptables mode: %w", iptablesErr)
	default:
		return ModeUserspace, "iptables mode unavailable: " + iptablesErr.Error(), nil
	}
}
