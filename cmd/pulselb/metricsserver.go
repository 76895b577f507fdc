package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newRegistry returns a registry with the Go and process collectors and
// the metrics each of register adds.
func newRegistry(register ...func(prometheus.Registerer) error) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	errs := make([]error, len(register))
	for i, r := range register {
		errs[i] = r(reg)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, startFailed(err, "Registering metrics failed")
	}
	return reg, nil
}

// metricsHandler serves g at /metrics and answers /healthz with "ok"
// while the process serves HTTP at all.
func metricsHandler(g prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// serveHTTP listens on addr, so that a taken port fails the start-up,
// serves h there in the background and returns the function that stops
// the server.
func serveHTTP(addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// serveMetrics serves h at addr, the --metrics-address of a role (empty
// serves nothing), and returns the function that stops it.
func serveMetrics(addr string, h http.Handler) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	stop, err = serveHTTP(addr, h)
	if err != nil {
		return nil, startFailed(err, "Listening for metrics failed", "address", addr)
	}
	return stop, nil
}
