package report

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
)

var (
	now     = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	since   = now.Add(-time.Hour)
	changed = now.Add(-time.Minute)
	failing = now.Add(-70 * time.Second)
	// notAfter has a fraction of a second and a zone, which a report drops.
	notAfter = time.Date(2031, 3, 4, 5, 6, 7, 500, time.FixedZone("x", 3600))

	resUp   = prober.Result{Outcome: prober.L4OK, Detail: "connected"}
	resDown = prober.Result{Outcome: prober.L4CON, Err: errors.New("connecting: connection refused")}
)

// status returns a concluded status of key at addr.
func status(key, addr string, state prober.State, last prober.Result) prober.TargetStatus {
	return prober.TargetStatus{Key: key, Addr: netip.MustParseAddrPort(addr), State: state, Since: since, Last: last}
}

func TestStatus(t *testing.T) {
	webA := contract.TargetKey("shop/web", "TCP", 443, "a")
	webB := contract.TargetKey("shop/web", "TCP", 443, "b")
	dnsA := contract.TargetKey("shop/dns", "UDP", 53, "a")
	web := func(node string) Target {
		return Target{Service: "shop/web", Port: 443, PortProtocol: "TCP", Protocol: probespec.HTTPS, Node: node}
	}
	targets := map[string]Target{
		webA:                     web("a"),
		webB:                     web("b"),
		dnsA:                     {Service: "shop/dns", Port: 53, PortProtocol: "UDP", Protocol: probespec.DNS, Node: "a"},
		contract.BeaconKey("a"):  {Beacon: true, Node: "a", Protocol: probespec.TCP},
		contract.BeaconKey("b"):  {Beacon: true, Node: "b", Protocol: probespec.TCP},
		contract.BeaconKey("zz"): {Beacon: true, Node: "zz", Protocol: probespec.TCP},
	}
	header := v1alpha1.ProbeReportStatus{HeartbeatTime: metav1.NewTime(now), HeartbeatSeconds: 10}
	obs := func(node, addr string, state v1alpha1.State, last prober.Result) v1alpha1.Observation {
		return v1alpha1.Observation{Node: node, Address: addr, State: state, Outcome: last.Outcome.String(),
			Since: metav1.NewTime(since), Message: last.Message()}
	}

	tests := []struct {
		name string
		snap []prober.TargetStatus
		want v1alpha1.ProbeReportStatus
	}{
		{name: "nothing probed", want: header},
		{
			name: "unknown and undescribed targets are left out",
			snap: []prober.TargetStatus{
				status(webA, "10.0.0.1:443", prober.StateUnknown, resUp),
				status("shop/gone:TCP/80@a", "10.0.0.1:80", prober.StateUp, resUp),
			},
			want: header,
		},
		{
			name: "results sorted by target key, beacons by node, with counts",
			// In no particular order: the report's does not depend on it.
			snap: []prober.TargetStatus{
				status(contract.BeaconKey("zz"), "10.0.0.9:9472", prober.StateDown, resDown),
				status(webB, "10.0.0.2:443", prober.StateDown, resDown),
				status(contract.BeaconKey("b"), "10.0.0.2:9472", prober.StateUp, resUp),
				status(webA, "10.0.0.1:443", prober.StateUp, resUp),
				status(dnsA, "10.0.0.1:53", prober.StateUp, resUp),
			},
			want: func() v1alpha1.ProbeReportStatus {
				st := header
				st.Targets, st.Down, st.BeaconCount, st.BeaconsDown = 3, 1, 2, 1
				st.Results = []v1alpha1.ProbeResult{
					{Service: "shop/dns", Port: 53, PortProtocol: "UDP", Protocol: "dns", Observation: obs("a", "10.0.0.1:53", v1alpha1.StateUp, resUp)},
					{Service: "shop/web", Port: 443, PortProtocol: "TCP", Protocol: "https", Observation: obs("a", "10.0.0.1:443", v1alpha1.StateUp, resUp)},
					{Service: "shop/web", Port: 443, PortProtocol: "TCP", Protocol: "https", Observation: obs("b", "10.0.0.2:443", v1alpha1.StateDown, resDown)},
				}
				st.Beacons = []v1alpha1.BeaconResult{
					{Observation: obs("b", "10.0.0.2:9472", v1alpha1.StateUp, resUp)},
					{Observation: obs("zz", "10.0.0.9:9472", v1alpha1.StateDown, resDown)},
				}
				return st
			}(),
		},
		{
			name: "what the scheduler knows besides the state",
			snap: []prober.TargetStatus{func() prober.TargetStatus {
				s := status(webA, "10.0.0.1:443", prober.StateDown, resDown)
				s.LastChange, s.FailingSince, s.RTT, s.CertNotAfter = changed, failing, 3*time.Millisecond, notAfter
				return s
			}()},
			want: func() v1alpha1.ProbeReportStatus {
				st := header
				st.Targets, st.Down = 1, 1
				o := obs("a", "10.0.0.1:443", v1alpha1.StateDown, resDown)
				o.LastChange = ptr.To(metav1.NewTime(changed))
				o.FailingSince = ptr.To(metav1.NewTime(failing))
				o.Latency = &metav1.Duration{Duration: 3 * time.Millisecond}
				o.CertNotAfter = &metav1.Time{Time: time.Date(2031, 3, 4, 4, 6, 7, 0, time.UTC)}
				st.Results = []v1alpha1.ProbeResult{{Service: "shop/web", Port: 443, PortProtocol: "TCP", Protocol: "https", Observation: o}}
				return st
			}(),
		},
		{
			name: "long message cut",
			snap: []prober.TargetStatus{status(webA, "10.0.0.1:443", prober.StateDown,
				prober.Result{Outcome: prober.L7STS, Err: errors.New(strings.Repeat("x", 300))})},
			want: func() v1alpha1.ProbeReportStatus {
				st := header
				st.Targets, st.Down = 1, 1
				o := obs("a", "10.0.0.1:443", v1alpha1.StateDown, prober.Result{Outcome: prober.L7STS})
				o.Message = strings.Repeat("x", 253) + "..."
				st.Results = []v1alpha1.ProbeResult{{Service: "shop/web", Port: 443, PortProtocol: "TCP", Protocol: "https", Observation: o}}
				return st
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Status(now, 10*time.Second, tt.snap, targets)
			if !reflect.DeepEqual(got, tt.want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				w, _ := json.MarshalIndent(tt.want, "", "  ")
				t.Errorf("Status() =\n%s\nwant\n%s", g, w)
			}
		})
	}
}

func TestObservationCertNotAfter(t *testing.T) {
	want := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name     string
		notAfter time.Time
		want     *time.Time
	}{
		{"utc", want, &want},
		{"local time zone", want.In(time.FixedZone("x", 3600)), &want},
		{"fraction of a second", want.Add(999 * time.Millisecond), &want},
		{"no handshake seen", time.Time{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := status("k", "10.0.0.1:443", prober.StateUp, prober.Result{Outcome: prober.L4CON})
			s.CertNotAfter = tt.notAfter
			obs := Observation(s, "n1")
			switch {
			case tt.want == nil && obs.CertNotAfter != nil:
				t.Errorf("CertNotAfter = %v, want none", obs.CertNotAfter)
			case tt.want != nil && (obs.CertNotAfter == nil || !obs.CertNotAfter.Time.Equal(*tt.want) || obs.CertNotAfter.Location() != time.UTC):
				t.Errorf("CertNotAfter = %v, want %v in UTC", obs.CertNotAfter, *tt.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "short", 256, "short"},
		{"exactly n", strings.Repeat("x", 256), 256, strings.Repeat("x", 256)},
		{"ascii cut", strings.Repeat("x", 257), 256, strings.Repeat("x", 253) + "..."},
		// "é" is 2 bytes: byte 253 is the middle of one, so the cut
		// backs off to 252 and keeps 126 of them.
		{"never splits a rune", strings.Repeat("é", 200), 256, strings.Repeat("é", 126) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncate(tt.in, tt.n)
			if got != tt.want {
				t.Errorf("truncate = %q (%d bytes), want %q", got, len(got), tt.want)
			}
			if len(got) > tt.n {
				t.Errorf("truncate = %d bytes, more than %d", len(got), tt.n)
			}
		})
	}
}

// TestChanged: a report is rewritten for what its readers judge by, not
// for its write time or a probe's latency, which move every probe.
func TestChanged(t *testing.T) {
	key := contract.TargetKey("shop/web", "TCP", 443, "a")
	targets := map[string]Target{
		key:                     {Service: "shop/web", Port: 443, PortProtocol: "TCP", Protocol: probespec.TCP, Node: "a"},
		contract.BeaconKey("a"): {Beacon: true, Node: "a", Protocol: probespec.TCP},
	}
	base := func() []prober.TargetStatus {
		s := status(key, "10.0.0.1:443", prober.StateUp, resUp)
		s.RTT = time.Millisecond
		b := status(contract.BeaconKey("a"), "10.0.0.1:9472", prober.StateUp, resUp)
		b.RTT = time.Millisecond
		return []prober.TargetStatus{s, b}
	}
	was := Status(now, 10*time.Second, base(), targets)
	tests := []struct {
		name   string
		later  time.Duration
		change func(s []prober.TargetStatus) []prober.TargetStatus
		want   bool
		kind   string // Change's answer
	}{
		{"nothing but the write time", time.Minute, func(s []prober.TargetStatus) []prober.TargetStatus { return s }, false, ""},
		{"latencies", time.Second, func(s []prober.TargetStatus) []prober.TargetStatus {
			s[0].RTT, s[1].RTT = 7*time.Millisecond, 9*time.Millisecond
			return s
		}, false, ""},
		{"a target goes down", 0, func(s []prober.TargetStatus) []prober.TargetStatus {
			s[0] = status(key, "10.0.0.1:443", prober.StateDown, resDown)
			return s
		}, true, ChangeState},
		{"the beacon goes down", 0, func(s []prober.TargetStatus) []prober.TargetStatus {
			s[1] = status(contract.BeaconKey("a"), "10.0.0.1:9472", prober.StateDown, resDown)
			return s
		}, true, ChangeState},
		{"a single failed probe while still up", 0, func(s []prober.TargetStatus) []prober.TargetStatus {
			s[0].FailingSince = failing
			s[0].Last = resDown
			return s
		}, false, ""},
		{"why a down target is down", 0, func(s []prober.TargetStatus) []prober.TargetStatus {
			s[0] = status(key, "10.0.0.1:443", prober.StateDown, resDown)
			s[0].FailingSince = failing
			return s
		}, true, ChangeState},
		{"a certificate's expiry", 0, func(s []prober.TargetStatus) []prober.TargetStatus {
			s[0].CertNotAfter = notAfter
			return s
		}, true, ChangeDetail},
		{"a target no longer assigned", 0, func(s []prober.TargetStatus) []prober.TargetStatus { return s[1:] }, true, ChangeTargets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := Status(now.Add(tt.later), 10*time.Second, tt.change(base()), targets)
			if got := Changed(was, is); got != tt.want {
				t.Errorf("Changed = %v, want %v", got, tt.want)
			}
			if got := Changed(is, was); got != tt.want {
				t.Errorf("Changed (reversed) = %v, want %v", got, tt.want)
			}
			if got := Change(was, is); got != tt.kind {
				t.Errorf("Change = %q, want %q", got, tt.kind)
			}
		})
	}
	if was.Results[0].Latency == nil {
		t.Error("Changed dropped a latency of the status it was given")
	}

	// A Down target's reason is news: verdicts and Events quote it.
	down := func(last prober.Result) v1alpha1.ProbeReportStatus {
		s := base()
		s[0] = status(key, "10.0.0.1:443", prober.StateDown, last)
		s[0].FailingSince = failing
		return Status(now, 10*time.Second, s, targets)
	}
	refused, timeout := down(resDown), down(prober.Result{Outcome: prober.L4TOUT, Err: errors.New("connecting: i/o timeout")})
	if !Changed(refused, timeout) || Change(refused, timeout) != ChangeDetail {
		t.Errorf("a Down target's new outcome and message are not a change of detail (Change %q)", Change(refused, timeout))
	}
	if Changed(refused, down(resDown)) {
		t.Error("the same Down result is a change")
	}
}
