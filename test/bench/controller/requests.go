package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/test/bench/apimetrics"
)

// requests are the API server's requests served so far
// (apiserver_request_total), by verb and resource, e.g. "POST events" or
// "PUT services/status".
type requests map[string]float64

// apiRequests reads the API server's request counters.
func apiRequests(ctx context.Context, cs kubernetes.Interface) (requests, error) {
	metrics, err := apimetrics.Read(ctx, cs)
	if err != nil {
		return nil, err
	}
	samples, ok := metrics["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("the API server's metrics have no apiserver_request_total")
	}
	out := requests{}
	for _, m := range samples {
		res := m.Labels["resource"]
		if m.Labels["subresource"] != "" {
			res += "/" + m.Labels["subresource"]
		}
		out[m.Labels["verb"]+" "+res] += m.Value
	}
	return out, nil
}

// summary formats the requests served between before and r: writes
// (POST, PUT, PATCH, DELETE) with the largest kinds by name, then reads
// (GET, LIST) and watches.
func (r requests) summary(before requests) string {
	type kind struct {
		name string
		n    float64
	}
	var writes []kind
	var nWrites, nReads, nWatches float64
	for k, v := range r {
		n := v - before[k]
		if n <= 0 {
			continue
		}
		verb, _, _ := strings.Cut(k, " ")
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
			nWrites += n
			writes = append(writes, kind{k, n})
		case "GET", "LIST":
			nReads += n
		case "WATCH", "WATCHLIST":
			nWatches += n
		}
	}
	slices.SortFunc(writes, func(a, b kind) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.name, b.name)) })
	var top []string
	for i, w := range writes {
		if i == 8 {
			break
		}
		top = append(top, fmt.Sprintf("%s %.0f", w.name, w.n))
	}
	return fmt.Sprintf("%.0f writes (%s), %.0f reads, %.0f watches", nWrites, strings.Join(top, ", "), nReads, nWatches)
}
