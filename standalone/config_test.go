package standalone

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/httpserver"
)

func TestLoadExample(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "pulselb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Instance != "a" || cfg.Zone != "lb.example.test." || cfg.DNS.Listen != "127.0.0.1:5353" || cfg.DNS.TTL != 5 ||
		cfg.HTTP.Listen != "127.0.0.1:8080" || cfg.HTTP.MaxConnections != 512 || !cfg.Metrics {
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
	if cfg.Zone != "lb.example.test." || cfg.Interval != DefaultInterval || cfg.HTTP.Listen != "127.0.0.1:9471" || cfg.HTTP.MaxConnections != httpserver.DefaultMaxConns ||
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
