package proxy

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewHandler serves /healthz (200 with the mode and phase while p is
// healthy, 503 with the reason otherwise) and /metrics from g. A shutdown's
// phases answer 200 as long as the data plane works: a failing liveness
// probe must not cut the drain short.
func NewHandler(p *Proxy, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := p.Healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		fmt.Fprintf(w, "ok: mode=%s phase=%s\n", p.Mode(), p.Phase())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}
