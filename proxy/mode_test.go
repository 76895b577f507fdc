package proxy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestChooseMode(t *testing.T) {
	noNetAdmin := errors.New("permission denied")
	tests := []struct {
		requested  Mode
		iptErr     error
		want       Mode
		wantReason string
		wantErr    bool
	}{
		{ModeAuto, nil, ModeIPTables, "iptables chains installed", false},
		{ModeAuto, noNetAdmin, ModeUserspace, "iptables mode unavailable: permission denied", false},
		{ModeIPTables, nil, ModeIPTables, "requested", false},
		{ModeIPTables, noNetAdmin, "", "", true},
		{ModeUserspace, nil, ModeUserspace, "requested", false},
	}
	for _, tt := range tests {
		name := string(tt.requested)
		if tt.iptErr != nil {
			name += " without iptables"
		}
		t.Run(name, func(t *testing.T) {
			got, reason, err := chooseMode(tt.requested, tt.iptErr)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				if !errors.Is(err, noNetAdmin) {
					t.Errorf("error %v does not wrap the cause", err)
				}
				return
			}
			if got != tt.want || !strings.Contains(reason, tt.wantReason) {
				t.Errorf("got %q (%q), want %q (%q)", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

// fakeProcSys returns a directory shaped like /proc/sys with the forwarding
// sysctls set to v4 and v6.
func fakeProcSys(t *testing.T, v4, v6 string) string {
	t.Helper()
	dir := t.TempDir()
	for f, v := range map[Family]string{IPv4: v4, IPv6: v6} {
		p := forwardingPath(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEnableForwarding(t *testing.T) {
	tests := []struct {
		name           string
		ipv6           bool
		wantV4, wantV6 bool
	}{
		{"ipv4 only", false, true, false},
		{"ipv4 and ipv6", true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fakeProcSys(t, "0", "0")
			if err := EnableForwarding(dir, tt.ipv6); err != nil {
				t.Fatal(err)
			}
			for f, want := range map[Family]bool{IPv4: tt.wantV4, IPv6: tt.wantV6} {
				if got, err := forwardingEnabled(dir, f); err != nil || got != want {
					t.Errorf("%s forwarding = %v, %v; want %v", f, got, err, want)
				}
			}
		})
	}
}

// TestEnableForwardingReadOnly checks the message a user of an unprivileged
// container gets: it names the fix. The errors are made up because root,
// which runs CI, can write any file.
func TestEnableForwardingReadOnly(t *testing.T) {
	for _, cause := range []error{syscall.EROFS, os.ErrPermission} {
		err := sysctlWriteError(IPv4, "/proc/sys/net/ipv4/ip_forward", &os.PathError{Op: "open", Path: "/proc/sys/net/ipv4/ip_forward", Err: cause})
		if !errors.Is(err, ErrReadOnlySysctl) {
			t.Fatalf("%v: error %v is not ErrReadOnlySysctl", cause, err)
		}
		for _, want := range []string{"/proc/sys/net/ipv4/ip_forward", "privileged", "securityContext.sysctls"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	}
	// An already-enabled sysctl is not written, so a read-only /proc/sys
	// whose pod set the sysctl passes.
	dir := fakeProcSys(t, "1", "1")
	if err := os.Chmod(forwardingPath(dir, IPv4), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := EnableForwarding(dir, true); err != nil {
		t.Errorf("forwarding already on: %v", err)
	}
}
