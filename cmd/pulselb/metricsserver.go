package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/httpserver"
)

// httpMetrics are the metrics of the process's HTTP server. A process runs
// one role, whose registry newRegistry builds once, so one value serves
// every role; it is a variable because the proxy's health port
// (serveHTTP) is wired where no registry is at hand.
var httpMetrics = httpserver.NewMetrics()

// newRegistry returns a registry with the Go and process collectors, the
// HTTP server's metrics and the metrics each of register adds.
func newRegistry(register ...func(prometheus.Registerer) error) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	register = append([]func(prometheus.Registerer) error{httpMetrics.RegisterMetrics}, register...)
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

// serveHTTP serves h at addr, the proxy's --health-address, with
// httpserver's defaults; see listenAndServe.
func serveHTTP(addr string, h http.Handler) (stop func(), err error) {
	return listenAndServe(addr, h, httpserver.Options{Name: "health"})
}

// listenAndServe listens on addr, so that a taken port fails the
// start-up, serves h there in the background with opts and returns the
// function that stops the server.
func listenAndServe(addr string, h http.Handler, opts httpserver.Options) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	opts.Metrics = httpMetrics
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("http"))
	srv := httpserver.New(ctx, h, opts)
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// serveMetrics serves h at addr, the --metrics-address of a role (empty
// serves nothing), holding at most maxConns connections
// (--metrics-max-connections), and returns the function that stops it.
func serveMetrics(addr string, maxConns int, h http.Handler) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	stop, err = listenAndServe(addr, h, httpserver.Options{Name: "metrics", MaxConns: maxConns})
	if err != nil {
		return nil, startFailed(err, "Listening for metrics failed", "address", addr)
	}
	return stop, nil
}
