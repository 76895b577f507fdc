package proxy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultProcSys is where the kernel's sysctls are.
const DefaultProcSys = "/proc/sys"

// ErrReadOnlySysctl means /proc/sys cannot be written in this container,
// which is the default for unprivileged containers.
var ErrReadOnlySysctl = errors.New("/proc/sys is read-only in this container: run proxy-init as a privileged " +
	"init container (securityContext.privileged: true), or set the sysctl in the pod's " +
	"securityContext.sysctls (net.ipv4.ip_forward is an unsafe sysctl: the kubelet needs " +
	"--allowed-unsafe-sysctls=net.ipv4.ip_forward)")

func forwardingPath(procSys string, f Family) string {
	if f == IPv6 {
		return filepath.Join(procSys, "net/ipv6/conf/all/forwarding")
	}
	return filepath.Join(procSys, "net/ipv4/ip_forward")
}

// EnableForwarding turns on IPv4 forwarding, and IPv6 forwarding when ipv6 is
// set, in the network namespace of the calling process. procSys is normally
// DefaultProcSys. A sysctl that is already on is not written, so an
// unprivileged container whose pod sets the sysctl succeeds.
func EnableForwarding(procSys string, ipv6 bool) error {
	fams := []Family{IPv4}
	if ipv6 {
		fams = append(fams, IPv6)
	}
	for _, f := range fams {
		on, err := forwardingEnabled(procSys, f)
		if err != nil {
			return err
		}
		if on {
			continue
		}
		path := forwardingPath(procSys, f)
		if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
			return sysctlWriteError(f, path, err)
		}
	}
	return nil
}

// forwardingEnabled reads one family's forwarding sysctl.
func forwardingEnabled(procSys string, f Family) (bool, error) {
	b, err := os.ReadFile(forwardingPath(procSys, f))
	if err != nil {
		return false, fmt.Errorf("reading %s forwarding sysctl: %w", f, err)
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

// sysctlWriteError names the fix when the write failed because /proc/sys is
// mounted read-only or the container lacks the privilege.
func sysctlWriteError(f Family, path string, err error) error {
	if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("enabling %s forwarding: writing %s: %w (%w)", f, path, ErrReadOnlySysctl, err)
	}
	return fmt.Errorf("enabling %s forwarding: %w", f, err)
}
