package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// acceptingPort returns a loopback listener that accepts connections and
// closes them at once; the test's end closes it.
func acceptingPort(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

func TestCheckExitCodes(t *testing.T) {
	ln := acceptingPort(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"up", []string{"tcp", ln.Addr().String()}, 0, "UP L4OK", ""},
		{"flags after args", []string{"tcp", ln.Addr().String(), "--count", "2", "--interval", "10ms"}, 0, "2 probes: 2 up, 0 down", ""},
		{"down", []string{"tcp", closedPort(t), "--timeout", "500ms"}, 1, "DOWN L4CON", ""},
		{"bad spec", []string{"htp", "127.0.0.1:80"}, 2, "", `unknown protocol "htp" (did you mean "http"?)`},
		{"bad option", []string{"http stauts=200", "127.0.0.1:80"}, 2, "", `did you mean "status"?`},
		{"bad address", []string{"tcp", "127.0.0.1"}, 2, "", "want ADDR:PORT"},
		{"bad port", []string{"tcp", "localhost:http"}, 2, "", "is not a number"},
		{"missing target", []string{"tcp"}, 2, "", "want 2 arguments"},
		{"bad count", []string{"--count", "0", "tcp", "127.0.0.1:1"}, 2, "", "--count=0"},
		{"bad source", []string{"--source", "nowhere", "tcp", "127.0.0.1:1"}, 2, "", "--source"},
		{"serve http", []string{"--serve", "http path=/healthz"}, 0, "UP L7OK  HTTP 200", ""},
		{"serve https verifies its own certificate", []string{"--serve", "https"}, 0, "UP L7OK", ""},
		{"serve https says it trusts its certificate", []string{"--serve", "https"}, 0, "trusted for this check", ""},
		{"serve tls verifies its own certificate", []string{"--serve", "tls"}, 0, "UP L6OK", ""},
		{"serve tls with sni", []string{"--serve", "tls sni=localhost"}, 0, "UP L6OK", ""},
		{"negative timeout", []string{"--timeout", "-1s", "tcp", ln.Addr().String()}, 2, "", "--timeout=-1s: want between 10ms and 1m0s"},
		{"zero timeout", []string{"--timeout", "0s", "tcp", ln.Addr().String()}, 2, "", "--timeout=0s: want between 10ms and 1m0s"},
		{"tiny timeout", []string{"--timeout", "1ns", "tcp", ln.Addr().String()}, 2, "", "--timeout=1ns: want between 10ms and 1m0s"},
		{"huge timeout", []string{"--timeout", "90s", "tcp", ln.Addr().String()}, 2, "", "--timeout=1m30s: want between 10ms and 1m0s"},
		{"negative interval", []string{"--interval", "-1s", "tcp", ln.Addr().String()}, 2, "", "--interval=-1s: want zero or a positive duration"},
		{"port 0", []string{"tcp", "127.0.0.1:0"}, 2, "", `target "127.0.0.1:0": port 0`},
		{"source not on this host", []string{"--source", "192.0.2.77", "tcp", ln.Addr().String()}, 2, "", `--source="192.0.2.77": not an address of this host`},
		{"source on this host", []string{"--source", "127.0.0.1", "tcp", ln.Addr().String()}, 0, "UP L4OK", ""},
		{"serve https unverified", []string{"--serve", "https verify=false"}, 0, "certificate: CN=pulselb check --serve", ""},
		{"serve tls", []string{"--serve", "tls verify=false alpn=h2"}, 0, "alpn h2", ""},
		{"serve tcp echo", []string{"--serve", `tcp send="PING\r\n" expect=^PING`}, 0, "UP L7OK", ""},
		{"serve udp", []string{"--serve", `udp send=hello expect=hello`}, 0, "UP L7OK", ""},
		{"serve dns", []string{"--serve", `dns name=web.example.test answer=true`}, 0, "UP L7OK", ""},
		{"serve mysql", []string{"--serve", "mysql"}, 2, "", "no built-in mysql server"},
		// Issue 31 item 17: the right reason, and 2 for a bad argument.
		{"path with a NUL", []string{`http path="/\x00x"`, "127.0.0.1:80"}, 2, "", `option path="/\x00x": must not contain spaces or control characters`},
		{"path that reads as a host", []string{"http path=//host/x", "127.0.0.1:80"}, 2, "", `option path="//host/x": must not start with "//"`},
		{"path with a bad escape", []string{"http path=/%zz", "127.0.0.1:80"}, 2, "", `option path="/%zz": not a URL path`},
		{"IPv6 source, IPv4 target", []string{"--source", "::1", "tcp", ln.Addr().String()}, 2, "", `--source="::1" is an IPv6 address and the target ` + ln.Addr().String() + ` is IPv4`},
		{"no host before the port", []string{"tcp", ":18004"}, 2, "", `target ":18004": no address before the port`},
		{"serve with the PROXY protocol", []string{"--serve", "tcp proxy-protocol=v2"}, 0, "UP L4OK", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"check"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, &stdout, &stderr)
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout %q does not contain %q", &stdout, tt.wantOut)
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", &stderr, tt.wantErr)
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--json", "--count", "2", "--interval", "1ms", "--serve", "https verify=false status=200"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d, stderr %s", code, &stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d JSON lines, want 2:\n%s", len(lines), &stdout)
	}
	var got checkJSON
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("line is not JSON: %v\n%s", err, lines[0])
	}
	if !got.Up || got.Outcome.String() != "L7OK" || got.TLS == nil || got.TimingsMS["total"] <= 0 {
		t.Errorf("unexpected result: %+v", got)
	}
	if got.Spec != "https status=200 verify=false" {
		t.Errorf("spec = %q, want the canonical form", got.Spec)
	}
}

func TestUnknownCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"frobnicate"}, &stdout, &stderr); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) || !strings.Contains(stderr.String(), "check") {
		t.Errorf("stderr does not name the command and list the known ones: %s", &stderr)
	}
}
