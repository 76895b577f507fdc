package loopback

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/prober"
)

// TestServe probes the server Serve starts for each protocol with the
// prober for the same spec, as `pulselb check --serve` does.
func TestServe(t *testing.T) {
	tests := []string{
		"tcp send=ping expect=^ping",
		"udp send=hello expect=hello",
		"tls verify=false alpn=h2",
		"http path=/healthz status=200",
		"https verify=false",
		"dns name=web.example.test answer=true",
	}
	for _, text := range tests {
		t.Run(text, func(t *testing.T) {
			spec, err := probespec.Parse(text)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			srv, err := Serve(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			p, err := prober.New(spec, prober.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r := p.Probe(ctx, srv.Addr); !r.Up() {
				t.Errorf("probe of %s: %s %v, want up", srv.Addr, r.Outcome, r.Err)
			}
		})
	}
}

func TestServeUnknownProtocol(t *testing.T) {
	spec, err := probespec.Parse("mysql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Serve(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "no built-in mysql server") {
		t.Errorf("Serve(mysql) error %v, want no built-in server", err)
	}
}
