package standalone

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCertExpiryKeptWhileDown: a tls target's certificate expiry reaches
// the dashboard and this instance's report, and stays there after the
// target goes down.
func TestCertExpiryKeptWhileDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.37:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Listener = ln
	srv.StartTLS()
	defer srv.Close()
	notAfter := srv.Certificate().NotAfter
	port := ln.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`instance: solo
zone: lb.example.test.
dns: {listen: "127.0.0.1:0", ttl: 5}
http: {listen: "127.0.0.1:0"}
interval: 200ms
token-file: token
services:
  - name: web
    hosts:
      - {name: a, address: 127.0.0.37}
    ports:
      - {port: %d, protocol: TCP, probe: "tls verify=false"}
`, port)
	file := filepath.Join(dir, "solo.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg)

	reported := func() time.Time {
		for _, res := range r.Report().Status.Results {
			if res.CertNotAfter != nil {
				return res.CertNotAfter.Time
			}
		}
		return time.Time{}
	}
	want := notAfter.UTC().Truncate(time.Second)
	waitFor(t, 10*time.Second, "a Up with its certificate's expiry", func() bool {
		tg := target(r.Runner, "a")
		return tg.State == "Up" && tg.CertNotAfter.Equal(notAfter) && reported().Equal(want)
	})

	srv.Close()
	waitFor(t, 10*time.Second, "a Down", func() bool { return target(r.Runner, "a").State == "Down" })
	if got := target(r.Runner, "a").CertNotAfter; !got.Equal(notAfter) {
		t.Errorf("dashboard expiry while down = %s, want %s", got, notAfter)
	}
	if got := reported(); !got.Equal(want) {
		t.Errorf("reported expiry while down = %s, want %s", got, want)
	}
}
