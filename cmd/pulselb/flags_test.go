package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestFlagEnvironmentErrors checks that a bad PULSELB_* variable stops every
// command that reads the environment with exit status 2 and a message that
// names the variable, the flag and the form it wants.
func TestFlagEnvironmentErrors(t *testing.T) {
	tests := []struct {
		command string
		env     string
		value   string
		want    []string
	}{
		{"proxy", "PULSELB_DRAIN_DELAY", "soon", []string{`PULSELB_DRAIN_DELAY="soon"`, "--drain-delay", "want a duration, such as 30s or 1m30s"}},
		{"proxy", "PULSELB_UDP_MAX_SESSIONS", "many", []string{`PULSELB_UDP_MAX_SESSIONS="many"`, "--udp-max-sessions", "want a whole number"}},
		{"prober", "PULSELB_BEACON_PORT", "-1", []string{`PULSELB_BEACON_PORT="-1"`, "--beacon-port", "want a whole number from 0"}},
		{"prober", "PULSELB_CLASS_ONLY", "maybe", []string{`PULSELB_CLASS_ONLY="maybe"`, "--class-only", "want true or false"}},
		{"proxy-init", "PULSELB_IPV6", "yes please", []string{`PULSELB_IPV6="yes please"`, "--ipv6", "want true or false"}},
		{"controller", "PULSELB_V", "loud", []string{`PULSELB_V="loud"`, "--v", "want a whole number"}},
	}
	for _, tt := range tests {
		t.Run(tt.command+" "+tt.env, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			var stdout, stderr bytes.Buffer
			code := run([]string{tt.command}, &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr: %s", code, &stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", &stderr, w)
				}
			}
			if strings.Contains(stderr.String(), "parse error") {
				t.Errorf("stderr %q says only \"parse error\"", &stderr)
			}
		})
	}
}

// TestProxyBadHealthAddress checks that a malformed --health-address is a
// flag error (exit 2) found before the data plane starts.
func TestProxyBadHealthAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for _, addr := range []string{"nonsense", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "1.2.3:80"} {
		t.Run(addr, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"proxy", "--mode=userspace", "--cluster-ips=127.0.0.1", "--listen-address=127.0.0.1",
				"--ports=TCP:" + strconv.Itoa(port), "--health-address=" + addr}, &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr: %s", code, &stderr)
			}
			want := `--health-address="` + addr + `": want HOST:PORT`
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q does not contain %q", &stderr, want)
			}
		})
	}
}

// TestFlagCommandLineErrors checks that a command-line value of the wrong
// type names the flag and the form it wants, as a variable's does.
func TestFlagCommandLineErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"proxy", "--drain-delay=soon"}, `pulselb proxy: --drain-delay="soon": want a duration, such as 30s or 1m30s`},
		{[]string{"proxy", "--udp-max-sessions", "many"}, `pulselb proxy: --udp-max-sessions="many": want a whole number`},
		{[]string{"prober", "--class-only=maybe"}, `pulselb prober: --class-only="maybe": want true or false`},
		{[]string{"check", "--timeout", "soon", "tcp", "127.0.0.1:1"}, `pulselb check: --timeout="soon": want a duration, such as 30s or 1m30s`},
		{[]string{"check", "tcp", "127.0.0.1:1", "--count=lots"}, `pulselb check: --count="lots": want a whole number`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr: %s", code, &stderr)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not contain %q", &stderr, tt.want)
			}
			if strings.Contains(stderr.String(), "parse error") {
				t.Errorf("stderr %q says only \"parse error\"", &stderr)
			}
		})
	}
}
