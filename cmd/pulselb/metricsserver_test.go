package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsHandler checks the paths the controller's and the prober's
// Deployments probe and scrape.
func TestMetricsHandler(t *testing.T) {
	reg, err := newRegistry(func(r prometheus.Registerer) error {
		return r.Register(prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pulselb", Name: "test_total"}))
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metricsHandler(reg))
	defer srv.Close()
	tests := []struct {
		method, path string
		wantCode     int
		wantBody     string
	}{
		{"GET", "/healthz", http.StatusOK, "ok\n"},
		{"GET", "/metrics", http.StatusOK, "pulselb_test_total 0"},
		{"GET", "/metrics", http.StatusOK, "go_goroutines"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, ""},
		{"GET", "/nothing", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.wantCode || !strings.Contains(string(body), tt.wantBody) {
			t.Errorf("%s %s: %d %q, want %d and %q", tt.method, tt.path, resp.StatusCode, body, tt.wantCode, tt.wantBody)
		}
	}
}

func TestNewRegistryTwice(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pulselb", Name: "test_total"})
	register := func(r prometheus.Registerer) error { return r.Register(c) }
	if _, err := newRegistry(register, register); err == nil || !strings.Contains(err.Error(), "Registering metrics failed") {
		t.Errorf("newRegistry with a metric registered twice: error %v, want the start-up failure", err)
	}
}

// TestMetricsMaxConnectionsFlag: a metrics port must hold at least one
// connection; a bad value stops the role before it starts (exit 2).
func TestMetricsMaxConnectionsFlag(t *testing.T) {
	for _, args := range [][]string{
		{"controller", "--proxy-image", "pulselb:test", "--metrics-max-connections", "0"},
		{"prober", "--node-name", "n1", "--metrics-max-connections", "-1"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(args, &out, &errOut)
			if want := "--metrics-max-connections=" + args[len(args)-1] + ": want at least 1"; code != 2 || !strings.Contains(errOut.String(), want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), want)
			}
		})
	}
}
