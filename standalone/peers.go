package standalone

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober/report"
)

// ReportPath is where an instance serves its own ProbeReport to its peers.
const ReportPath = "/api/v1/report"

// maxReportBytes bounds a peer's report read into memory.
const maxReportBytes = 8 << 20

// ErrUnauthorized is returned when a peer refuses our token.
var ErrUnauthorized = errors.New("peer refused the token")

// ErrRedirected is returned when a peer answers with a redirect, which is
// never followed.
var ErrRedirected = errors.New("peer answered with a redirect")

// newPeerClient returns the client that polls peers. It follows no
// redirect: the token is for the URL the configuration names, and
// following would send it, and a Referer, wherever a response points.
func newPeerClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// peerState is the last report fetched from one peer.
type peerState struct {
	report *v1alpha1.ProbeReport
	// err is why the last poll failed; nil after a good one.
	err error
}

// authorized reports whether r carries the bearer token, comparing in
// constant time so the comparison leaks nothing about the token.
func authorized(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// serveReport serves this instance's report to peers holding the token.
func (r *Runner) serveReport(w http.ResponseWriter, req *http.Request) {
	token := r.config().Token
	if token == "" {
		http.Error(w, "peer reports are off: no token-file configured", http.StatusNotFound)
		return
	}
	if !authorized(req, string(token)) {
		r.metrics.reportRequests.WithLabelValues("unauthorized").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="pulselb"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	r.metrics.reportRequests.WithLabelValues("ok").Inc()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Report())
}

// fetchReport gets a peer's report. Its heartbeat is stamped with the local
// time it arrived, so a peer's clock being off does not make its reports
// stale or fresh: a report is as current as the moment it was served.
func fetchReport(ctx context.Context, client *http.Client, p Peer, token string, heartbeat time.Duration, now func() time.Time) (*v1alpha1.ProbeReport, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+ReportPath, nil)
	if err != nil {
		return nil, fmt.Errorf("polling peer %s: %w", p.Name, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("polling peer %s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("polling peer %s: %w", p.Name, ErrUnauthorized)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, fmt.Errorf("polling peer %s: %w (HTTP %s to %.200q); set its url to the address that serves the report",
			p.Name, ErrRedirected, resp.Status, resp.Header.Get("Location"))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("polling peer %s: HTTP %s", p.Name, resp.Status)
	}
	var rep v1alpha1.ProbeReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReportBytes)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("polling peer %s: decoding report: %w", p.Name, err)
	}
	// The report counts under the name we know the peer by, whatever it
	// calls itself.
	rep.Name = p.Name
	rep.Status.HeartbeatTime = metav1.NewTime(now())
	rep.Status.HeartbeatSeconds = report.HeartbeatSeconds(heartbeat)
	return &rep, nil
}
