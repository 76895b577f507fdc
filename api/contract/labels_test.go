package contract

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCandidates(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase, ready corev1.ConditionStatus, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("a", "n1", corev1.PodRunning, corev1.ConditionTrue, false),
		pod("a2", "n1", corev1.PodRunning, corev1.ConditionTrue, false), // the node counts once
		pod("b", "n2", corev1.PodRunning, corev1.ConditionFalse, false),
		pod("c", "n3", corev1.PodPending, corev1.ConditionTrue, false),
		pod("d", "n4", corev1.PodRunning, corev1.ConditionTrue, true),
		pod("e", "n5", corev1.PodRunning, corev1.ConditionTrue, false), // node not Ready
		pod("f", "", corev1.PodRunning, corev1.ConditionTrue, false),
		pod("g", "n6", corev1.PodRunning, corev1.ConditionTrue, false),
	}
	ready := map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true, "n6": true}
	zone := map[string]string{"n1": "a", "n6": "b"}
	got := Candidates(pods, ready, zone)
	want := []Vantage{{Node: "n1", Zone: "a"}, {Node: "n6", Zone: "b"}}
	if !slices.Equal(got, want) {
		t.Errorf("Candidates = %v, want %v", got, want)
	}
}

func TestServiceOf(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	got, ok := ServiceOf(ProxySelector(svc))
	if !ok || got.Namespace != "shop" || got.Name != "web" {
		t.Errorf("ServiceOf(ProxySelector) = %v, %t", got, ok)
	}
	for _, l := range []map[string]string{
		nil,
		{LabelAppName: ProberAppName, LabelServiceNamespace: "shop", LabelServiceName: "web"},
		{LabelAppName: ProxyAppName, LabelServiceName: "web"},
	} {
		if got, ok := ServiceOf(l); ok {
			t.Errorf("ServiceOf(%v) = %v, want none", l, got)
		}
	}
}

func TestShortList(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		max  int
		want string
	}{
		{nil, 2, ""},
		{[]string{"a", "b"}, 2, "a, b"},
		{[]string{"a", "b", "c", "d"}, 2, "a, b and 2 more"},
	} {
		if got := ShortList(tt.in, tt.max); got != tt.want {
			t.Errorf("ShortList(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestExternalReportName(t *testing.T) {
	tests := []struct {
		vantage, want, err string
	}{
		{"vps-1", "external-vps-1", ""},
		{"a", "external-a", ""},
		{"", "", "1 to 47"},
		{"VPS", "", "lower-case"},
		{"-vps", "", "starting and ending"},
		{"vps-", "", "starting and ending"},
		{"vps.example", "", "lower-case"},
		{strings.Repeat("a", 48), "", "1 to 47"},
	}
	for _, tt := range tests {
		t.Run(tt.vantage, func(t *testing.T) {
			got, err := ExternalReportName(tt.vantage)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ExternalReportName(%q) = %q, %v; want an error containing %q", tt.vantage, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ExternalReportName(%q) = %q, %v; want %q", tt.vantage, got, err, tt.want)
			}
			if _, err := ProberLeaseName(got); err != nil {
				t.Fatalf("the report name %q makes no Lease name: %v", got, err)
			}
		})
	}
}
