package placement

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/dnsexport"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		kv      []string
		check   func(s Settings) bool
		problem string // key of the one expected problem; "" for none
		reason  string // part of its reason
	}{
		{"defaults", nil, func(s Settings) bool {
			return s.Mode == ModeDeployment && s.Replicas == 2 && s.AddressType == AddressAuto && s.ProbeInterval == time.Second &&
				s.ProbeTimeout == 0 && s.Rise == 2 && s.Fall == 2 && s.PublishWhen == PublishAllPorts && s.AllDown == AllDownPublishAll && s.DNSTTL == 5
		}, "", ""},
		{"proxy-mode", []string{AnnotationProxyMode, "daemonset"}, func(s Settings) bool { return s.Mode == ModeDaemonSet }, "", ""},
		{"bad proxy-mode", []string{AnnotationProxyMode, "DaemonSet"}, func(s Settings) bool { return s.Mode == ModeDeployment }, AnnotationProxyMode, "deployment or daemonset"},
		{"replicas", []string{AnnotationReplicas, "3"}, func(s Settings) bool { return s.Replicas == 3 }, "", ""},
		{"zero replicas", []string{AnnotationReplicas, "0"}, func(s Settings) bool { return s.Replicas == 2 }, AnnotationReplicas, "1 to 1000"},
		{"node-selector", []string{AnnotationNodeSelector, "edge"}, func(s Settings) bool { return len(s.NodeSelector) == 1 }, "", ""},
		{"empty node-selector", []string{AnnotationNodeSelector, " "}, func(s Settings) bool { return s.NodeSelector == nil }, AnnotationNodeSelector, "empty"},
		{"address-type", []string{AnnotationAddressType, "both"}, func(s Settings) bool { return s.AddressType == AddressBoth }, "", ""},
		{"bad address-type", []string{AnnotationAddressType, "public"}, func(s Settings) bool { return s.AddressType == AddressAuto }, AnnotationAddressType, "auto, external, internal, both"},
		{"probe", []string{AnnotationProbe, "http path=/healthz"}, func(s Settings) bool { return s.Probes[""] == "http path=/healthz" }, "", ""},
		{"bad probe", []string{AnnotationProbe, "smtp"}, func(s Settings) bool { return len(s.Probes) == 0 }, AnnotationProbe, ""},
		{"probe by port name", []string{AnnotationProbePrefix + "dns", "dns name=example.org"}, func(s Settings) bool { return s.Probes["dns"] != "" }, "", ""},
		{"probe by port number", []string{AnnotationProbePrefix + "80", "http"}, func(s Settings) bool { return s.Probes["80"] == "http" }, "", ""},
		{"probe of unknown port", []string{AnnotationProbePrefix + "443", "tls"}, func(s Settings) bool { return len(s.Probes) == 0 }, AnnotationProbePrefix + "443", "no port"},
		{"tcp probe on a udp port", []string{AnnotationProbePrefix + "dns", "http"}, func(s Settings) bool { return len(s.Probes) == 0 }, AnnotationProbePrefix + "dns", "UDP port"},
		{"probe-interval", []string{AnnotationProbeInterval, "500ms"}, func(s Settings) bool { return s.ProbeInterval == 500*time.Millisecond }, "", ""},
		{"bad probe-interval", []string{AnnotationProbeInterval, "1"}, func(s Settings) bool { return s.ProbeInterval == time.Second }, AnnotationProbeInterval, "duration"},
		{"probe-timeout too long", []string{AnnotationProbeTimeout, "2h"}, func(s Settings) bool { return s.ProbeTimeout == 0 }, AnnotationProbeTimeout, "100ms to 1m"},
		{"rise and fall", []string{AnnotationRise, "3", AnnotationFall, "4"}, func(s Settings) bool { return s.Rise == 3 && s.Fall == 4 }, "", ""},
		{"bad fall", []string{AnnotationFall, "-1"}, func(s Settings) bool { return s.Fall == 2 }, AnnotationFall, "1 to 100"},
		{"publish-when", []string{AnnotationPublishWhen, "any-port"}, func(s Settings) bool { return s.PublishWhen == PublishAnyPort }, "", ""},
		{"bad publish-when", []string{AnnotationPublishWhen, "some"}, func(s Settings) bool { return s.PublishWhen == PublishAllPorts }, AnnotationPublishWhen, "all-ports"},
		{"all-down", []string{AnnotationAllDown, "publish-none"}, func(s Settings) bool { return s.AllDown == AllDownPublishNone }, "", ""},
		{"bad all-down", []string{AnnotationAllDown, "none"}, func(s Settings) bool { return s.AllDown == AllDownPublishAll }, AnnotationAllDown, "publish-all"},
		{"hostnames from three annotations", []string{AnnotationHostname, "b.example.org, a.example.org.", AnnotationExternalDNSHostname, "a.example.org", AnnotationExternalDNSAlphaHostname, "c.example.org"},
			func(s Settings) bool {
				return slices.Equal(s.Hostnames, []string{"a.example.org", "b.example.org", "c.example.org"})
			}, "", ""},
		{"bad hostname", []string{AnnotationHostname, "ok.example.org,bad_name!"}, func(s Settings) bool { return slices.Equal(s.Hostnames, []string{"ok.example.org"}) }, AnnotationHostname, "not a DNS name"},
		{"dns-ttl", []string{AnnotationDNSTTL, "30"}, func(s Settings) bool { return s.DNSTTL == 30 }, "", ""},
		{"dns-ttl with unit", []string{AnnotationDNSTTL, "30s"}, func(s Settings) bool { return s.DNSTTL == 30 }, "", ""},
		{"dns-ttl of a day", []string{AnnotationDNSTTL, "86400"}, func(s Settings) bool { return s.DNSTTL == 86400 }, "", ""},
		{"zero dns-ttl", []string{AnnotationDNSTTL, "0"}, func(s Settings) bool { return s.DNSTTL == 5 }, AnnotationDNSTTL, "1 to 86400"},
		{"dns-ttl over a day", []string{AnnotationDNSTTL, "86401"}, func(s Settings) bool { return s.DNSTTL == 5 }, AnnotationDNSTTL, "1 to 86400"},
		{"bad dns-ttl", []string{AnnotationDNSTTL, "5m"}, func(s Settings) bool { return s.DNSTTL == 5 }, AnnotationDNSTTL, "seconds"},
		{"written annotations are not settings", []string{AnnotationNodes, "n1", AnnotationExternalIPs, "x"}, func(s Settings) bool { return true }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, problems := Parse(service(annotate(tt.kv...)))
			if !tt.check(s) {
				t.Errorf("settings %+v", s)
			}
			if tt.problem == "" {
				if len(problems) > 0 {
					t.Errorf("problems %q, want none", problems)
				}
				return
			}
			if len(problems) != 1 || problems[0].Key != tt.problem || !strings.Contains(problems[0].Reason, tt.reason) {
				t.Fatalf("problems %q, want one for %s with reason containing %q", problems, tt.problem, tt.reason)
			}
			msg := problems[0].String()
			value := ""
			for i := 0; i+1 < len(tt.kv); i += 2 {
				if tt.kv[i] == tt.problem {
					value = tt.kv[i+1]
				}
			}
			if !strings.Contains(msg, tt.problem) || !strings.Contains(msg, value) || !strings.Contains(msg, "using ") {
				t.Errorf("message %q does not name the key, the value %q and the default", msg, value)
			}
		})
	}
}

// TestDNSTTLAgreesWithDNSExport: dnsexport uses pulselb.io/dns-ttl and
// placement reports it, so a value one rejects and the other uses would
// either be served silently wrong or be reported while in use.
func TestDNSTTLAgreesWithDNSExport(t *testing.T) {
	for _, v := range []string{"0", "1", "30", "30s", " 30 ", "86400", "86401", "-1", "5m", "", "1.5", "4294967296"} {
		t.Run(v, func(t *testing.T) {
			svc := service(annotate(AnnotationDNSTTL, v))
			s, problems := Parse(svc)
			d, errs := dnsexport.FromService(svc)
			if placementOK, dnsOK := len(problems) == 0, len(errs) == 0; placementOK != dnsOK {
				t.Fatalf("placement accepts %q: %t (problems %q); dnsexport: %t (errors %v)", v, placementOK, problems, dnsOK, errs)
			}
			if len(problems) == 0 && d.TTL != s.DNSTTL {
				t.Errorf("TTL %d in placement, %d in dnsexport", s.DNSTTL, d.TTL)
			}
		})
	}
}
