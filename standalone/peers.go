package standalone

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/pulselb/pulselb/api/contract"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
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

// ErrInvalidReport is returned when a peer's report holds a value no
// pulselb instance writes; the whole report is refused.
var ErrInvalidReport = errors.New("peer sent an invalid report")

// ErrSelf is returned when a peer's report is this instance's own: its
// URL reaches this instance.
var ErrSelf = errors.New("peer is this instance")

// peerState is the last report fetched from one peer.
type peerState struct {
	report *v1alpha1.ProbeReport
	// remote is the name the peer's report gives itself: two peers whose
	// reports carry the same name are one instance listed twice.
	remote string
	// err is why the last poll failed; nil after a good one.
	err error
	// sameAs names the earlier peer this one is the same instance as,
	// while its report is left out for that.
	sameAs string
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

// fetchReport gets a peer's report, checked by checkReport, and the name
// the peer gives itself. Its heartbeat is stamped with the local time it
// arrived, so a peer's clock being off does not make its reports stale or
// fresh: a report is as current as the moment it was served.
func fetchReport(ctx context.Context, client *http.Client, p Peer, token string, heartbeat time.Duration, now func() time.Time) (*v1alpha1.ProbeReport, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+ReportPath, nil)
	if err != nil {
		return nil, "", fmt.Errorf("polling peer %s: %w", p.Name, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("polling peer %s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, "", fmt.Errorf("polling peer %s: %w", p.Name, ErrUnauthorized)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, "", fmt.Errorf("polling peer %s: %w (HTTP %s to %.200q); set its url to the address that serves the report",
			p.Name, ErrRedirected, resp.Status, resp.Header.Get("Location"))
	case resp.StatusCode != http.StatusOK:
		return nil, "", fmt.Errorf("polling peer %s: HTTP %s", p.Name, resp.Status)
	}
	var rep v1alpha1.ProbeReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReportBytes)).Decode(&rep); err != nil {
		return nil, "", fmt.Errorf("polling peer %s: decoding report: %w", p.Name, err)
	}
	if err := checkReport(&rep, now()); err != nil {
		return nil, "", fmt.Errorf("polling peer %s: %w: %w", p.Name, ErrInvalidReport, err)
	}
	// The report counts under the name we know the peer by, whatever it
	// calls itself; what it calls itself is returned to find this
	// instance, or one instance listed twice.
	remote := rep.Name
	rep.Name = p.Name
	rep.Status.HeartbeatTime = metav1.NewTime(now())
	rep.Status.HeartbeatSeconds = contract.HeartbeatSeconds(heartbeat)
	return &rep, remote, nil
}

// Bounds of what a peer's report may say.
const (
	// maxPeerLatency is the longest latency a report may carry: a probe
	// never takes longer than the longest timeout.
	maxPeerLatency = probespec.MaxTimeout
	// maxClockAhead is how far in the future a peer's times may be: the
	// instances' clocks need not agree, but by more than a day is a
	// broken clock or a forged report, and would show as negative ages
	// and failover durations.
	maxClockAhead = 24 * time.Hour
)

// checkReport returns what in a peer's report no pulselb instance writes,
// naming the field: states other than Up and Down, unknown outcomes,
// latencies outside 0 to maxPeerLatency, times more than maxClockAhead
// ahead of now, messages longer than a report carries, ports and
// addresses that are none, negative counts, and beacons or the external
// mark, which standalone reports never carry and which would change how
// the quorum reads the report.
func checkReport(rep *v1alpha1.ProbeReport, now time.Time) error {
	st := &rep.Status
	switch {
	case !isLabel(rep.Name):
		return fmt.Errorf("metadata.name %.80q is not an instance name", rep.Name)
	case st.External:
		return errors.New("status.external: a peer is no external vantage")
	case len(st.Beacons) > 0:
		return errors.New("status.beacons: standalone instances send no node beacons")
	case st.Targets < 0 || st.Down < 0 || st.BeaconCount < 0 || st.BeaconsDown < 0:
		return errors.New("status: a negative count")
	}
	for i := range st.Results {
		res := &st.Results[i]
		at := fmt.Sprintf("status.results[%d]", i)
		switch {
		case res.Port < 1 || res.Port > 65535:
			return fmt.Errorf("%s.port: %d is not a port", at, res.Port)
		case res.PortProtocol != "TCP" && res.PortProtocol != "UDP":
			return fmt.Errorf("%s.portProtocol: %.20q is not TCP or UDP", at, res.PortProtocol)
		}
		if err := checkObservation(&res.Observation, now); err != nil {
			return fmt.Errorf("%s.%w", at, err)
		}
	}
	return nil
}

func checkObservation(o *v1alpha1.Observation, now time.Time) error {
	var outcome prober.Outcome
	switch {
	case o.State != v1alpha1.StateUp && o.State != v1alpha1.StateDown:
		return fmt.Errorf("state: %.20q is not Up or Down", o.State)
	case o.Outcome != "" && (outcome.UnmarshalText([]byte(o.Outcome)) != nil || outcome == prober.OutcomeUnknown):
		return fmt.Errorf("outcome: %.20q is not a probe outcome", o.Outcome)
	case len(o.Message) > report.MaxMessage:
		return fmt.Errorf("message: %d bytes, more than %d", len(o.Message), report.MaxMessage)
	case o.Latency != nil && (o.Latency.Duration < 0 || o.Latency.Duration > maxPeerLatency):
		return fmt.Errorf("latency: %s is outside 0 to %s", o.Latency.Duration, maxPeerLatency)
	case !isLabel(o.Node):
		return fmt.Errorf("node: %.80q is not a host name", o.Node)
	}
	if _, err := netip.ParseAddrPort(o.Address); err != nil {
		return fmt.Errorf("address: %.60q is not an address and port", o.Address)
	}
	late := now.Add(maxClockAhead)
	for _, t := range []struct {
		name string
		t    *metav1.Time
	}{{"since", &o.Since}, {"lastChange", o.LastChange}, {"failingSince", o.FailingSince}} {
		if t.t != nil && t.t.After(late) {
			return fmt.Errorf("%s: %s is more than %s ahead of this instance's clock", t.name, t.t.UTC().Format(time.RFC3339), maxClockAhead)
		}
	}
	return nil
}
