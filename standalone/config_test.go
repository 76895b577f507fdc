package standalone

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/httpserver"
	"github.com/pulselb/pulselb/prober"
)

func TestLoadExample(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "pulselb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Instance != "a" || cfg.Zone != "lb.example.test." || cfg.DNS.Listen != "127.0.0.1:5353" || cfg.DNS.TTL != 5 ||
		cfg.HTTP.Listen != "127.0.0.1:8080" || cfg.HTTP.MaxConnections != 512 || cfg.HTTP.DashboardRows != 300 || cfg.HTTP.DashboardRate != 10 || !cfg.Metrics {
		t.Errorf("top level = %+v", cfg)
	}
	if cfg.Interval != 2*time.Second || cfg.Timeout != 500*time.Millisecond || cfg.Rise != 3 || cfg.Fall != 2 {
		t.Errorf("timing = %+v", cfg.Timing)
	}
	if cfg.Token != "a-shared-token-of-32-characters!" || len(cfg.Peers) != 1 || cfg.Peers[0] != (Peer{"b", "http://127.0.0.1:8081"}) {
		t.Errorf("peers %+v, token read: %v", cfg.Peers, cfg.Token != "")
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, cfg); strings.Contains(out, "a-shared-token") {
			t.Errorf("printing the configuration with %s shows the token", format)
		}
	}
	if want := filepath.Join("testdata", "secrets"); cfg.SecretsDir != want {
		t.Errorf("secrets dir %q, want %q (relative to the file)", cfg.SecretsDir, want)
	}
	if len(cfg.Services) != 2 {
		t.Fatalf("%d services", len(cfg.Services))
	}
	web := cfg.Services[0]
	if web.Name != "web" || web.TTL != 30 || web.PublishWhen != contract.PublishAnyPort || web.AllDown != contract.AllDownPublishNone ||
		web.Interval != time.Second || web.Rise != 3 || len(web.Hostnames) != 1 || web.Hostnames[0] != "www.lb.example.test." {
		t.Errorf("web = %+v", web)
	}
	b := web.Hosts[1]
	if len(b.Addresses) != 2 || b.Addresses[1] != netip.MustParseAddr("::1") || b.ProbeAddress != netip.MustParseAddr("127.0.0.12") {
		t.Errorf("host b = %+v", b)
	}
	if p := web.Ports[1]; p.Protocol != "UDP" || p.Port != 53 || p.Name != "dns" || p.Probe != "dns name=example.test." {
		t.Errorf("port = %+v", p)
	}
	db := cfg.Services[1]
	if db.PublishWhen != contract.PublishAllPorts || db.Interval != 2*time.Second || db.Ports[0].Protocol != "TCP" || db.Ports[0].Spec.Secret != "db" {
		t.Errorf("db = %+v (defaults from the top level)", db)
	}
	if len(db.Hosts[0].Addresses) != 1 || db.Hosts[0].ProbeAddress != netip.MustParseAddr("127.0.0.11") {
		t.Errorf("db host = %+v", db.Hosts[0])
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte(`zone: lb.example.test
instance: x
dns: {listen: "127.0.0.1:0"}
services:
  - name: web
    hosts: [{name: a, address: 192.0.2.1}]
    ports: [{port: 53, protocol: udp}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Zone != "lb.example.test." || cfg.Interval != probespec.DefaultInterval || cfg.HTTP.Listen != "127.0.0.1:9471" || cfg.HTTP.MaxConnections != httpserver.DefaultMaxConns || cfg.HTTP.DashboardRows != 200 || cfg.HTTP.DashboardRate != 20 ||
		cfg.DNS.TTL != 5 || cfg.AllDown != contract.AllDownPublishAll || cfg.PublishWhen != contract.PublishAllPorts {
		t.Errorf("defaults = %+v", cfg)
	}
	if p := cfg.Services[0].Ports[0]; p.Protocol != "UDP" || p.Probe != "udp" {
		t.Errorf("a UDP port without a probe is probed with %q (%s)", p.Probe, p.Protocol)
	}
	if ns := cfg.DNS.NameServers; len(ns) != 1 || ns[0].Name != "ns.lb.example.test." || ns[0].Addrs[0] != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("default name server %+v", ns)
	}
}

// TestConfigErrors checks that every problem names the file, the line and
// the field, so a user can go straight to it.
func TestConfigErrors(t *testing.T) {
	const head = "zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:0\"}\n"
	const svc = "services:\n  - name: web\n    hosts:\n      - {name: a, address: 127.0.0.11}\n    ports:\n"
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"misspelt probe option", head + svc + "      - {port: 8080, protocol: TCP, probe: \"http stauts=200\"}\n",
			[]string{`pulselb.yaml:9: services[0].ports[0].probe: unknown option "stauts" for http (did you mean "status"?)`}},
		{"unknown top-level key", "zoen: x.\n" + head + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:1: zoen: unknown key (did you mean "zone"?)`}},
		{"unknown key in a host", head + "services:\n  - name: web\n    hosts:\n      - {name: a, addresz: 127.0.0.11}\n    ports: [{port: 80}]\n",
			[]string{`pulselb.yaml:7: services[0].hosts[0].addresz: unknown key (did you mean "address"?)`,
				`pulselb.yaml:7: services[0].hosts[0].address: required`}},
		{"bad address", head + "services:\n  - name: web\n    hosts:\n      - name: a\n        address: 127.0.0.300\n    ports: [{port: 80}]\n",
			[]string{`pulselb.yaml:8: services[0].hosts[0].address: "127.0.0.300" is not an IP address`}},
		{"port out of range", head + svc + "      - {port: 70000}\n",
			[]string{`pulselb.yaml:9: services[0].ports[0].port: 70000 is out of range: want 1 to 65535`}},
		{"bad protocol", head + svc + "      - {port: 80, protocol: SCTP}\n",
			[]string{`pulselb.yaml:9: services[0].ports[0].protocol: "SCTP" is not TCP or UDP`}},
		{"duplicate port", head + svc + "      - {port: 80}\n      - {port: 80}\n",
			[]string{`pulselb.yaml:10: services[0].ports[1]: port TCP/80 is listed twice`}},
		{"dashboard rows out of range", head + "http: {dashboard-rows: 5, dashboard-rate: 0}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: http.dashboard-rows: 5 is out of range: want 10 to 100000`, `pulselb.yaml:4: http.dashboard-rate: 0 is out of range: want 1 to 10000`}},
		{"too few http connections", head + "http: {max-connections: 4}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: http.max-connections: 4 is out of range: want 8 to 65536`}},
		{"bad interval", "interval: 10ms\n" + head + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:1: interval: 10ms is out of range: want 100ms to 1h0m0s`}},
		{"bad all-down", head + "all-down: publish-nne\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: all-down: "publish-nne" is not one of publish-all, publish-none (did you mean "publish-none"?)`}},
		{"missing zone", "instance: a\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:1: zone: required`}},
		{"peers without token", "http: {listen: \"127.0.0.1:0\"}\n" + head + "peers:\n  - {name: b, url: \"http://127.0.0.1:1\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:5: peers: peers need token-file`}},
		{"peers without http.listen", head + "token-file: testdata/token\npeers:\n  - {name: b, url: \"http://192.0.2.2:9471\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:5: http.listen: required with peers: they poll this instance's report over HTTP, and the default 127.0.0.1:9471 is reachable from this host only`}},
		{"peer named like the instance", "http: {listen: \"127.0.0.1:0\"}\n" + head + "token-file: testdata/token\npeers:\n  - {name: a, url: \"ftp://x\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:7: peers[0].name: "a" is this instance's own name`, `pulselb.yaml:7: peers[0].url: "ftp://x" is not an http or https URL`}},
		{"secret without secrets dir", head + svc + "      - {port: 3306, probe: \"mysql user=u secret=db\"}\n",
			[]string{`pulselb.yaml:9: services[0].ports[0].probe: secret=db needs secrets.dir`}},
		{"service name not a label", head + "services:\n  - name: Web_1\n    hosts: [{name: a, address: 127.0.0.1}]\n    ports: [{port: 80}]\n",
			[]string{`pulselb.yaml:5: services[0].name: "Web_1" is not a DNS label`}},
		{"wrong type", head + "services: {name: web}\n",
			[]string{`pulselb.yaml:4: services: want a list, got a mapping`}},
		{"duplicate key", head + "zone: other.\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: zone: given twice (first on line 1)`}},
		{"yaml syntax", head + "services: [\n",
			[]string{`pulselb.yaml:4: did not find expected node content`}},
		{"external vantage without kubeconfig", head + "external-vantage: {name: home}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: external-vantage.kubeconfig: required`}},
		{"external vantage with a missing kubeconfig and a bad name", head + "external-vantage: {kubeconfig: testdata/nope, name: Home}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: external-vantage.kubeconfig: stat testdata/nope: no such file`, `pulselb.yaml:4: external-vantage.name: vantage name "Home": want lower-case`}},
		{"a second yaml document", head + svc + "      - {port: 80}\n---\nzone: other.test.\n",
			[]string{`pulselb.yaml:11: a second YAML document: the file must hold one configuration`}},
		{"an empty second yaml document", head + svc + "      - {port: 80}\n---\n",
			[]string{`pulselb.yaml:11: a second YAML document`}},
		{"http listen on the dns port", "zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:5353\"}\nhttp: {listen: \"127.0.0.1:5353\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: http.listen: "127.0.0.1:5353" takes dns.listen's port ("127.0.0.1:5353")`}},
		{"http listen on every address at the dns port", "zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:5353\"}\nhttp: {listen: \":5353\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:4: http.listen: ":5353" takes dns.listen's port`}},
		{"dns listen on the http default", "zone: lb.example.test.\ninstance: a\ndns: {listen: \":9471\", nameservers: [ns.example.test]}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:3: dns.listen: ":9471" takes the port of http.listen's default ("127.0.0.1:9471")`}},
		{"hostmaster with markup", "zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:0\", hostmaster: \"<script>\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:3: dns.hostmaster: "<script>" is not a mail address or a domain name`}},
		{"hostmaster with a bad local part", "zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:0\", hostmaster: \"a b@example.test\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:3: dns.hostmaster: "a b@example.test" is not a mail address or a domain name: ' ' before the @`}},
		{"hostmaster with a bad domain", "zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:0\", hostmaster: \"dns@exa_mple.test\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:3: dns.hostmaster: "dns@exa_mple.test" is not a mail address or a domain name: domain "exa_mple.test"`}},
		{"peer at this instance's http.listen", "http: {listen: \"127.0.0.1:9471\"}\n" + head + "token-file: testdata/token\npeers:\n  - {name: b, url: \"http://127.0.0.1:9471/\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:7: peers[0].url: "http://127.0.0.1:9471/" is this instance's own http.listen (127.0.0.1:9471)`}},
		{"peer at localhost while listening everywhere", "http: {listen: \":9471\"}\n" + head + "token-file: testdata/token\npeers:\n  - {name: b, url: \"http://LOCALHOST:9471\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:7: peers[0].url: "http://LOCALHOST:9471" is this instance's own http.listen (:9471)`}},
		{"the same peer url twice", "http: {listen: \"127.0.0.1:9471\"}\n" + head + "token-file: testdata/token\npeers:\n  - {name: b, url: \"http://192.0.2.2\"}\n  - {name: c, url: \"HTTP://192.0.2.2:80/\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:8: peers[1].url: "HTTP://192.0.2.2:80/" is also b's url`}},
		{"dns listen without address needs name servers", "zone: lb.example.test.\ninstance: a\ndns: {listen: \":5353\"}\n" + svc + "      - {port: 80}\n",
			[]string{`pulselb.yaml:1: dns.nameservers: required when dns.listen (":5353") names no single address`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("pulselb.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d =\n  %s\nwant prefix\n  %s", i, lines[i], w)
				}
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "pulselb.yaml" || ce.Line == 0 {
				t.Errorf("error is not a *ConfigError with a position: %#v", err)
			}
		})
	}
}

func TestConfigExternalVantage(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "home.kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const svc = "services:\n  - name: web\n    hosts: [{name: a, address: 192.0.2.1}]\n    ports: [{port: 80}]\n"
	cfg, err := Parse(filepath.Join(dir, "pulselb.yaml"), []byte("zone: lb.example.test.\ninstance: home\ndns: {listen: \"127.0.0.1:0\"}\n"+
		"external-vantage: {kubeconfig: home.kubeconfig}\n"+svc))
	if err != nil {
		t.Fatal(err)
	}
	if ev := cfg.ExternalVantage; ev == nil || ev.Kubeconfig != kc || ev.Name != "home" || ev.Namespace != DefaultExternalNamespace || ev.ClassOnly {
		t.Errorf("external vantage %+v, want the kubeconfig next to the file, named after the instance, in %s", ev, DefaultExternalNamespace)
	}
	cfg, err = Parse(filepath.Join(dir, "pulselb.yaml"), []byte("zone: lb.example.test.\ninstance: home\ndns: {listen: \"127.0.0.1:0\"}\n"+
		"external-vantage: {kubeconfig: "+kc+", name: vps-2, namespace: lb, class-only: true}\n"+svc))
	if err != nil {
		t.Fatal(err)
	}
	if ev := cfg.ExternalVantage; ev == nil || ev.Name != "vps-2" || ev.Namespace != "lb" || !ev.ClassOnly {
		t.Errorf("external vantage %+v", ev)
	}
	cfg, err = Parse("x.yaml", []byte("zone: lb.example.test.\ninstance: home\ndns: {listen: \"127.0.0.1:0\"}\n"+svc))
	if err != nil || cfg.ExternalVantage != nil {
		t.Errorf("without the section: %+v, %v; want no external vantage", cfg.ExternalVantage, err)
	}
}

func TestConfigTokenFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := "zone: z.test.\ninstance: a\ndns: {listen: \"127.0.0.1:0\"}\ntoken-file: short\nservices:\n  - name: w\n    hosts: [{name: a, address: 127.0.0.1}]\n    ports: [{port: 1}]\n"
	_, err := Parse(filepath.Join(dir, "p.yaml"), []byte(text))
	if err == nil || !strings.Contains(err.Error(), "p.yaml:4: token-file: the token in") || strings.Contains(err.Error(), "abc") {
		t.Fatalf("err = %v; want a short-token error that does not show the token", err)
	}
	_, err = Parse(filepath.Join(dir, "p.yaml"), []byte(strings.Replace(text, "short", "missing", 1)))
	if err == nil || !strings.Contains(err.Error(), "p.yaml:4: token-file: reading the token") {
		t.Fatalf("err = %v", err)
	}
}

// TestLoadRefusesHugeAndSpecialFiles: a file larger than MaxConfigBytes,
// and anything that is not a regular file (/dev/zero, a directory), is
// refused with an error naming it, instead of being read into memory
// without end.
func TestLoadRefusesHugeAndSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.yaml")
	// A valid YAML comment, one byte over the cap.
	if err := os.WriteFile(huge, append([]byte("#"), bytes.Repeat([]byte(" "), MaxConfigBytes)...), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"larger than the cap", huge, "huge.yaml is larger than 4 MiB, the most a configuration file may hold"},
		{"device", "/dev/zero", "/dev/zero is not a regular file"},
		{"directory", dir, dir + " is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load(%s) = %v; want an error containing %q", tt.path, err, tt.want)
			}
		})
	}
}

// FuzzConfig checks that Parse never panics on any input up to 64 KiB,
// and that it returns a configuration or errors that are all
// *ConfigError, never both nor neither.
func FuzzConfig(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("testdata", "pulselb.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("zone: lb.example.test\ninstance: x\ndns: {listen: \"127.0.0.1:0\"}\nservices:\n  - name: web\n    hosts: [{name: a, address: 192.0.2.1}]\n    ports: [{port: 53, protocol: udp}]\n"))
	f.Add([]byte("a: &a [*a]\nservices: *a\n"))
	f.Add([]byte("services: [{hosts: [{name: a, addresses: [\"::1\", 127.0.0.1]}], ports: [{port: 0}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		cfg, err := Parse("fuzz.yaml", data)
		switch {
		case err == nil && cfg == nil:
			t.Fatal("no configuration and no error")
		case err != nil && cfg != nil:
			t.Fatalf("a configuration and an error: %v", err)
		case err != nil:
			for _, e := range unjoin(err) {
				var ce *ConfigError
				if !errors.As(e, &ce) || ce.File != "fuzz.yaml" {
					t.Fatalf("error %v is not a *ConfigError naming the file", e)
				}
			}
		}
	})
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestListenOverlap(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:53", "127.0.0.1:53", true},
		{":53", "127.0.0.1:53", true},
		{"[::]:53", "127.0.0.1:53", true},
		{"0.0.0.0:53", "127.0.0.1:53", true},
		{"0.0.0.0:53", "[::1]:53", false},
		{"127.0.0.1:53", "127.0.0.2:53", false},
		{"127.0.0.1:53", "127.0.0.1:54", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"[::ffff:127.0.0.1]:53", "127.0.0.1:53", true},
	} {
		if got := listenOverlap(tt.a, tt.b); got != tt.want {
			t.Errorf("listenOverlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := listenOverlap(tt.b, tt.a); got != tt.want {
			t.Errorf("listenOverlap(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestHostmasterAccepted(t *testing.T) {
	for _, h := range []string{"hostmaster@example.test", "john.doe+dns@example.test", "dns_admin@lb.example.test.", "hostmaster.example.test"} {
		cfg, err := Parse("p.yaml", []byte("zone: lb.example.test.\ninstance: a\ndns: {listen: \"127.0.0.1:0\", hostmaster: \""+h+"\"}\n"+
			"services:\n  - name: w\n    hosts: [{name: a, address: 127.0.0.1}]\n    ports: [{port: 1}]\n"))
		if err != nil || cfg.DNS.Hostmaster != h {
			t.Errorf("hostmaster %q: %v", h, err)
		}
	}
}

// TestConfigRefusesSpecialStateFiles: a state file, a serial file or a
// mysql password file that is a named pipe, a device or larger than its
// cap is an error of the check naming the file, found without reading it:
// a pipe would block the reader forever, /dev/zero fill its memory.
func TestConfigRefusesSpecialStateFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sparse := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err == nil {
			err = f.Truncate(size)
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	hugeState, hugeSerial := sparse("huge-state", MaxStateBytes+1), sparse("huge-serial", MaxSerialBytes+1)
	secret := func(name, target string) {
		if err := os.MkdirAll(filepath.Join(dir, "secrets", name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "secrets", name, "password")); err != nil {
			t.Fatal(err)
		}
	}
	secret("fifo", fifo)
	secret("zero", "/dev/zero")
	secret("huge", sparse("huge-secret", prober.MaxSecretBytes+1))

	const head = "zone: lb.example.test.\ninstance: a\n"
	const svc = "services:\n  - name: w\n    hosts: [{name: a, address: 127.0.0.1}]\n    ports: [{port: 3306, probe: \"%s\"}]\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"state file a pipe", head + "dns: {listen: \"127.0.0.1:0\"}\nstate-file: fifo\n" + fmt.Sprintf(svc, "tcp"), "p.yaml:4: state-file: " + fifo + " is not a regular file but a named pipe"},
		{"state file /dev/zero", head + "dns: {listen: \"127.0.0.1:0\"}\nstate-file: zero\n" + fmt.Sprintf(svc, "tcp"), "p.yaml:4: state-file: " + zero + " is not a regular file but a character device"},
		{"state file too large", head + "dns: {listen: \"127.0.0.1:0\"}\nstate-file: huge-state\n" + fmt.Sprintf(svc, "tcp"), "p.yaml:4: state-file: " + hugeState + " is larger than 64 MiB, the most a state file may hold"},
		{"serial file a pipe", head + "dns: {listen: \"127.0.0.1:0\", serial-file: fifo}\n" + fmt.Sprintf(svc, "tcp"), "p.yaml:3: dns.serial-file: " + fifo + " is not a regular file but a named pipe"},
		{"serial file /dev/zero", head + "dns: {listen: \"127.0.0.1:0\", serial-file: zero}\n" + fmt.Sprintf(svc, "tcp"), "p.yaml:3: dns.serial-file: " + zero + " is not a regular file"},
		{"serial file too large", head + "dns: {listen: \"127.0.0.1:0\", serial-file: huge-serial}\n" + fmt.Sprintf(svc, "tcp"), "p.yaml:3: dns.serial-file: " + hugeSerial + " is larger than 4 KiB, the most a serial file may hold"},
		{"password a pipe", head + "dns: {listen: \"127.0.0.1:0\"}\nsecrets: {dir: secrets}\n" + fmt.Sprintf(svc, "mysql user=u secret=fifo"), "p.yaml:8: services[0].ports[0].probe: secret=fifo: " + filepath.Join(dir, "secrets", "fifo", "password") + " is not a regular file but a named pipe"},
		{"password /dev/zero", head + "dns: {listen: \"127.0.0.1:0\"}\nsecrets: {dir: secrets}\n" + fmt.Sprintf(svc, "mysql user=u secret=zero"), "secret=zero: " + filepath.Join(dir, "secrets", "zero", "password") + " is not a regular file but a character device"},
		{"password too large", head + "dns: {listen: \"127.0.0.1:0\"}\nsecrets: {dir: secrets}\n" + fmt.Sprintf(svc, "mysql user=u secret=huge"), "is larger than 64 KiB, the most a password file may hold"},
		{"password missing", head + "dns: {listen: \"127.0.0.1:0\"}\nsecrets: {dir: secrets}\n" + fmt.Sprintf(svc, "mysql user=u secret=nope"), "secret=nope: stat " + filepath.Join(dir, "secrets", "nope", "password") + ": no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := Parse(filepath.Join(dir, "p.yaml"), []byte(tt.yaml))
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the check did not return within 5s")
			}
		})
	}
	// A state or serial file that does not exist yet is fine: pulselb
	// writes it.
	if _, err := Parse(filepath.Join(dir, "p.yaml"), []byte(head+"dns: {listen: \"127.0.0.1:0\", serial-file: new-serial}\nstate-file: new-state\n"+fmt.Sprintf(svc, "tcp"))); err != nil {
		t.Errorf("with files not yet written: %v", err)
	}
}
