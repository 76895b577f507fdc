package controller

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/status"
)

// externalReport is external vantage name's report on svc's port 80 on
// nodes n1 and n2.
func externalReport(name string, n1, n2 v1alpha1.State) *v1alpha1.ProbeReport {
	r := report(contract.ExternalReportPrefix+name, 0)
	r.Status.External = true
	svc := newService("web")
	withResult(r, svc, 80, "n1", n1)
	withResult(r, svc, 80, "n2", n2)
	return r
}

func TestExternalVantages(t *testing.T) {
	tests := []struct {
		name     string
		mode     string
		external []*v1alpha1.ProbeReport
		ips      []string
		cond     string
		event    string
	}{
		{"advisory: status unchanged, Event", contract.ExternalAdvisory,
			[]*v1alpha1.ProbeReport{externalReport("vps", v1alpha1.StateDown, v1alpha1.StateUp)},
			[]string{"10.0.0.1", "10.0.0.2"}, "False/" + status.ReasonUnreachable, status.ReasonExternalPathDown},
		{"required: the unreachable node leaves the status", contract.ExternalRequired,
			[]*v1alpha1.ProbeReport{externalReport("vps", v1alpha1.StateDown, v1alpha1.StateUp)},
			[]string{"10.0.0.2"}, "False/" + status.ReasonUnreachable, status.ReasonExternalPathDown},
		{"required: one of two vantages is no majority", contract.ExternalRequired,
			[]*v1alpha1.ProbeReport{externalReport("vps", v1alpha1.StateDown, v1alpha1.StateUp), externalReport("home", v1alpha1.StateUp, v1alpha1.StateUp)},
			[]string{"10.0.0.1", "10.0.0.2"}, "True/" + status.ReasonReachable, ""},
		{"required: a cut-off vantage changes nothing", contract.ExternalRequired,
			[]*v1alpha1.ProbeReport{externalReport("vps", v1alpha1.StateDown, v1alpha1.StateDown)},
			[]string{"10.0.0.1", "10.0.0.2"}, "False/" + status.ReasonExternalCutOff, status.ReasonExternalCutOff},
		{"off: ignored", contract.ExternalOff,
			[]*v1alpha1.ProbeReport{externalReport("vps", v1alpha1.StateDown, v1alpha1.StateUp)},
			[]string{"10.0.0.1", "10.0.0.2"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			svc := published(newService("web"), "n1,n2")
			svc.Annotations[contract.AnnotationExternalVantages] = tt.mode
			f := newFixture(t, cluster(svc)...)
			reports := append(meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": v1alpha1.StateUp}), tt.external...)
			c := f.healthController(ctx, reports...)
			if err := c.evaluate(ctx, healthKey); err != nil {
				t.Fatal(err)
			}
			if err := c.sync(ctx, key(svc)); err != nil {
				t.Fatal(err)
			}
			got := f.service(ctx, "shop", "web")
			if ips := ingressIPs(got); !slices.Equal(ips, tt.ips) {
				t.Errorf("ingress %v, want %v", ips, tt.ips)
			}
			var cond string
			for _, c := range got.Status.Conditions {
				if c.Type == status.ConditionExternallyReachable {
					cond = string(c.Status) + "/" + c.Reason
				}
			}
			if cond != tt.cond {
				t.Errorf("condition %s = %q, want %q", status.ConditionExternallyReachable, cond, tt.cond)
			}
			ev := f.events()
			if tt.event != "" && !hasEvent(ev, tt.event) {
				t.Errorf("events %v, want %s", ev, tt.event)
			}
			if tt.event == "" && (hasEvent(ev, status.ReasonExternalPathDown) || hasEvent(ev, status.ReasonExternalCutOff)) {
				t.Errorf("events %v, want no external Warning", ev)
			}
			if tt.mode != contract.ExternalOff {
				if n := testutil.ToFloat64(c.metrics.externalVantages.WithLabelValues("usable")) + testutil.ToFloat64(c.metrics.externalVantages.WithLabelValues("cutOff")); n != float64(len(tt.external)) {
					t.Errorf("external_vantages usable+cutOff = %v, want %d", n, len(tt.external))
				}
			}
		})
	}
}

// An address held out by the external verdict stays listed for the
// external vantages to probe, and comes back once they reach it.
func TestExternalUnreachableComesBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := published(newService("web"), "n1,n2")
	svc.Annotations[contract.AnnotationExternalVantages] = contract.ExternalRequired
	f := newFixture(t, cluster(svc)...)
	mesh := meshReports(svc, map[string]v1alpha1.State{"n1": v1alpha1.StateUp, "n2": v1alpha1.StateUp})
	ext := externalReport("vps", v1alpha1.StateDown, v1alpha1.StateUp)
	c := f.healthController(ctx, append(mesh, ext)...)
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	got := f.service(ctx, "shop", "web")
	if v := got.Annotations[contract.AnnotationExternalUnreachable]; v != "10.0.0.1" {
		t.Fatalf("%s = %q, want 10.0.0.1", contract.AnnotationExternalUnreachable, v)
	}
	// The informer sees the write.
	if err := f.cluster.Core().V1().Services().Informer().GetIndexer().Update(got); err != nil {
		t.Fatal(err)
	}
	back := externalReport("vps", v1alpha1.StateUp, v1alpha1.StateUp)
	back.ResourceVersion = "2"
	if err := c.cfg.Health.Reports.GetStore().Update(back); err != nil {
		t.Fatal(err)
	}
	if err := c.evaluate(ctx, healthKey); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	got = f.service(ctx, "shop", "web")
	if ips := ingressIPs(got); !slices.Equal(ips, []string{"10.0.0.2", "10.0.0.1"}) {
		t.Errorf("ingress %v, want both back, the one that stayed first", ips)
	}
	if _, ok := got.Annotations[contract.AnnotationExternalUnreachable]; ok {
		t.Errorf("%s still set: %v", contract.AnnotationExternalUnreachable, got.Annotations)
	}
	if ev := f.events(); !hasEvent(ev, status.ReasonExternalPathUp) {
		t.Errorf("events %v, want %s", ev, status.ReasonExternalPathUp)
	}
}
