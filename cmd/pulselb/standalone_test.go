package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/standalone"
)

const standaloneTestConfig = `instance: solo
zone: lb.example.test.
dns: {listen: "127.0.0.1:0"}
http: {listen: "127.0.0.1:0"}
interval: 200ms
services:
  - name: web
    hosts:
      - {name: a, address: 127.0.0.1}
    ports:
      - {port: PORT, protocol: TCP, probe: "tcp"}
`

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	file := filepath.Join(dir, "pulselb.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestStandaloneCheck(t *testing.T) {
	dir := t.TempDir()
	good := writeConfig(t, dir, strings.Replace(standaloneTestConfig, "PORT", "8080", 1))
	var out, errOut bytes.Buffer
	if code := run([]string{"standalone", "--config", good, "--check"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "ok (1 services, 0 peers)") {
		t.Fatalf("good file: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	bad := writeConfig(t, dir, strings.Replace(standaloneTestConfig, `"tcp"`, `"http stauts=200"`, 1))
	out.Reset()
	errOut.Reset()
	code := run([]string{"standalone", "--config", bad, "--check"}, &out, &errOut)
	want := bad + `:11: services[0].ports[0].probe: unknown option "stauts" for http (did you mean "status"?)`
	if code != 2 || !strings.Contains(errOut.String(), want) {
		t.Fatalf("bad file: exit %d, stderr %q; want 2 and %q", code, errOut.String(), want)
	}
	errOut.Reset()
	if code := run([]string{"standalone"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--config is required") {
		t.Fatalf("no config: exit %d, stderr %q", code, errOut.String())
	}
}

// TestReloadOnSignal sends reload signals to a running instance: a file
// with an error is refused and the running configuration stays; a good
// one is applied.
func TestReloadOnSignal(t *testing.T) {
	ln := acceptingPort(t)
	port := strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
	dir := t.TempDir()
	file := writeConfig(t, dir, strings.Replace(standaloneTestConfig, "PORT", port, 1))
	cfg, err := standalone.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	r, err := standalone.New(ctx, cfg, standalone.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	hup := make(chan os.Signal)
	go reloadOnSignal(ctx, file, r, hup)

	services := func() []string {
		var out []string
		for _, s := range r.State().Services {
			out = append(out, s.Name)
		}
		return out
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitUntil("web served", func() bool { return strings.Join(services(), ",") == "web" })

	writeConfig(t, dir, "zone: [\n")
	// Any signal value does; the channel stands for SIGHUP. The channel is
	// unbuffered, so the second send returns only once the first reload
	// (of the bad file) is over.
	hup <- os.Interrupt
	hup <- os.Interrupt
	if got := strings.Join(services(), ","); got != "web" {
		t.Fatalf("after a bad reload the services are %q, want the running web", got)
	}
	second := strings.Replace(standaloneTestConfig, "PORT", port, 1) + strings.ReplaceAll(`  - name: api
    hosts:
      - {name: a, address: 127.0.0.1}
    ports:
      - {port: PORT, protocol: TCP}
`, "PORT", port)
	writeConfig(t, dir, second)
	hup <- os.Interrupt
	waitUntil("api served after the good reload", func() bool { return strings.Join(services(), ",") == "api,web" })
}

// TestStandaloneCheckDNSNames: a zone or hostname the DNS zone would not
// serve fails --check with exit 2, naming the file, line, field and why.
func TestStandaloneCheckDNSNames(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, from, to, want string }{
		{"zone with a space", "zone: lb.example.test.", "zone: 'lb example.test'",
			`:2: zone: "lb example.test" is not a zone name`},
		{"wildcard hostname", "  - name: web\n", "  - name: web\n    hostnames: ['*.lb.example.test']\n",
			`:8: services[0].hostnames[0]: "*.lb.example.test" is not served: wildcard names are not served`},
		{"the name server's name", "  - name: web\n", "  - name: web\n    hostnames: [ns.lb.example.test]\n",
			`:8: services[0].hostnames[0]: "ns.lb.example.test" is not served: hostname already served for another service (name server)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(strings.Replace(standaloneTestConfig, "PORT", "8080", 1), tc.from, tc.to, 1)
			file := writeConfig(t, dir, text)
			var out, errOut bytes.Buffer
			code := run([]string{"standalone", "--config", file, "--check"}, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), file+tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), file+tc.want)
			}
		})
	}
}

// TestStandaloneCheckFilesAndListeners: --check exits 2, at once, with the
// file, line, field and why, for each bad configuration of issue 31: a
// state or serial file that is a named pipe or a device, a password file
// the probe would refuse, http.listen on dns.listen's port, a hostmaster
// that is no name, a peer URL at this instance or listed twice, a second
// YAML document.
func TestStandaloneCheckFilesAndListeners(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "secrets", "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "secrets", "db", "password")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("0123456789abcdef-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := strings.Replace(standaloneTestConfig, "PORT", "8080", 1)
	tests := []struct{ name, from, to, want string }{
		{"state file a pipe", "interval: 200ms\n", "interval: 200ms\nstate-file: fifo\n", ":6: state-file: " + fifo + " is not a regular file but a named pipe"},
		{"serial file a device", `dns: {listen: "127.0.0.1:0"}`, `dns: {listen: "127.0.0.1:0", serial-file: /dev/zero}`,
			":3: dns.serial-file: /dev/zero is not a regular file but a character device"},
		{"password file a device", "interval: 200ms\n", "interval: 200ms\nsecrets: {dir: secrets}\n",
			"secret=db: " + filepath.Join(dir, "secrets", "db", "password") + " is not a regular file but a character device"},
		{"http on the dns port", `dns: {listen: "127.0.0.1:0"}` + "\n" + `http: {listen: "127.0.0.1:0"}`, `dns: {listen: "127.0.0.1:5353"}` + "\n" + `http: {listen: "[::]:5353"}`,
			`:4: http.listen: "[::]:5353" takes dns.listen's port`},
		{"hostmaster", `dns: {listen: "127.0.0.1:0"}`, `dns: {listen: "127.0.0.1:0", hostmaster: "<script>"}`, `:3: dns.hostmaster: "<script>" is not a mail address or a domain name`},
		{"peer at this instance", `http: {listen: "127.0.0.1:0"}`, `http: {listen: "127.0.0.1:9471"}` + "\ntoken-file: token\npeers: [{name: b, url: \"http://127.0.0.1:9471\"}]",
			`:6: peers[0].url: "http://127.0.0.1:9471" is this instance's own http.listen`},
		{"peer twice", `http: {listen: "127.0.0.1:0"}`, `http: {listen: "127.0.0.1:9471"}` + "\ntoken-file: token\npeers: [{name: b, url: \"http://192.0.2.2:9471\"}, {name: c, url: \"http://192.0.2.2:9471/\"}]",
			`:6: peers[1].url: "http://192.0.2.2:9471/" is also b's url`},
		{"second document", "      - {port: 8080, protocol: TCP, probe: \"tcp\"}\n", "      - {port: 8080, protocol: TCP, probe: \"tcp\"}\n---\nzone: x.test.\n",
			":13: a second YAML document"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(base, tc.from) {
				t.Fatalf("the test configuration has no %q", tc.from)
			}
			text := strings.Replace(base, tc.from, tc.to, 1)
			if strings.Contains(tc.to, "secrets:") {
				text = strings.Replace(text, `probe: "tcp"`, `probe: "mysql user=probe secret=db"`, 1)
			}
			file := writeConfig(t, dir, text)
			var out, errOut bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run([]string{"standalone", "--config", file, "--check"}, &out, &errOut) }()
			select {
			case code := <-done:
				if code != 2 || !strings.Contains(errOut.String(), tc.want) {
					t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("--check did not return within 5s")
			}
		})
	}
}
