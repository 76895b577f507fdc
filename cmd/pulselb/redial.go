package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// After an API server restart, client-go's reflectors resume late: each
// failed list or watch doubles the wait before the next one (from 0.8 s,
// jittered up to twice, capped at 30 s, reset only after two quiet
// minutes), and a shared informer cannot be given another back-off. An
// outage of 15 s, or one behind the kubernetes Service while kube-proxy
// catches up, left the controller's caches up to 20 s behind an API server
// that answered again: a standby that saw the leader's node fail only
// then, and DNS answers naming a node that had left every status (the
// fault soak, docs/soak.md). redial is the controller's cure: an
// informer's GET whose connection cannot be made is tried again within a
// second, inside the one request, so the reflector sees no failure to back
// off from and resumes as soon as the server can be reached.
//
// Only the controller's informers redial: a few replicas whose caches are
// the verdicts and the DNS answers. The probers keep client-go's back-off,
// which spreads a whole fleet's reconnections over the following seconds.

// Redial waits: the first retry after redialMin, each next one after
// twice as long up to redialMax, each jittered by up to half.
const (
	redialMin = 200 * time.Millisecond
	redialMax = time.Second
)

// redialKey marks the contexts whose GETs redial.
type redialKey struct{}

// redialing returns ctx marked so that the GETs made with it (or a context
// derived from it) redial: an informer's lists and watches, when its
// factory or reflector runs with the returned context.
func redialing(ctx context.Context) context.Context {
	return context.WithValue(ctx, redialKey{}, true)
}

// redial is the RoundTripper that retries a marked GET while its
// connection cannot be made, until the request's context is done. Nothing
// was sent when a dial fails, so the retry is safe for any request; only
// the reads of informers are retried so, since other callers wait for
// errors of their own (the first reach of the API server is logged at
// once, a Lease renewal has its deadline).
type redial struct{ next http.RoundTripper }

func newRedial(next http.RoundTripper) http.RoundTripper { return redial{next: next} }

func (r redial) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Context().Value(redialKey{}) == nil {
		return r.next.RoundTrip(req)
	}
	ctx := req.Context()
	delay := redialMin
	for attempt := 1; ; attempt++ {
		resp, err := r.next.RoundTrip(req)
		if err == nil || !dialFailed(err) {
			if attempt > 1 {
				klog.FromContext(ctx).V(2).Info("Reached the API server again", "path", req.URL.Path, "attempts", attempt)
			}
			return resp, err
		}
		if attempt == 1 {
			klog.FromContext(ctx).V(2).Info("Cannot reach the API server; redialing", "path", req.URL.Path, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay + rand.N(delay/2)):
		}
		delay = min(2*delay, redialMax)
	}
}

// dialFailed reports whether err is a failure to connect: the request
// never left.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
