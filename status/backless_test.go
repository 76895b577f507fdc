package status

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// TestAddressBeforeBackends: a new Service whose proxies run but whose
// backends do not answer yet (every running proxy probed Down, readiness
// gates closed) is published on those proxies' nodes, failing open, so it
// has its address at once; not while a proxy waits for its first verdict
// or has served too briefly for its verdict to be on what it serves, not
// onto a node leaving, and not with all-down: publish-none.
func TestAddressBeforeBackends(t *testing.T) {
	gated := func(n string) *corev1.Pod {
		p := pod(n, "running") // Ready False: the gate is closed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
		return p
	}
	down := Health{Down: true, PortErrors: map[contract.PortKey]string{{Protocol: corev1.ProtocolTCP, Port: 80}: "down by 3 of 3 probers: L4CON connection refused"}}
	leaving := node("n3", "int:198.18.1.3")
	leaving.Labels = map[string]string{contract.LabelMaintenance: "true"}
	for _, tt := range []struct {
		name    string
		health  map[string]Health
		allDown string
		nodes   []*corev1.Node
		want    []string
		reason  string
	}{
		{"every running proxy probed down", map[string]Health{"n1": down, "n2": down}, "", nil,
			[]string{"198.18.1.1", "198.18.1.2"}, ReasonAllDown},
		{"one still waiting for its verdict", map[string]Health{"n1": down, "n2": {Down: true, Pending: true}}, "", nil, nil, ReasonNoProxyReady},
		{"no verdict at all", nil, "", nil, nil, ReasonNoProxyReady},
		// Its probers began when its pod was bound: refused by nothing
		// listening, not by the Service.
		{"one serving too briefly for its verdict", map[string]Health{"n1": down, "n2": {Down: true, Early: true, PortErrors: down.PortErrors}}, "", nil, nil, ReasonNoProxyReady},
		{"publish-none", map[string]Health{"n1": down, "n2": down}, contract.AllDownPublishNone, nil, nil, ReasonNoProxyReady},
		{"a node leaving is left out", map[string]Health{"n1": down, "n2": down, "n3": down}, "",
			[]*corev1.Node{leaving}, []string{"198.18.1.1", "198.18.1.2"}, ReasonAllDown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nodes := []*corev1.Node{node("n1", "int:198.18.1.1"), node("n2", "int:198.18.1.2")}
			pods := []*corev1.Pod{gated("n1"), gated("n2")}
			if tt.nodes != nil {
				nodes = append(nodes, tt.nodes...)
				pods = append(pods, gated("n3"))
			}
			r := Decide(Input{Service: svc(), Nodes: nodeMap(nodes...), Pods: pods, Health: tt.health, AllDown: tt.allDown,
				Servable: true, EligibleNodes: len(nodes), Now: now})
			if got := ingressIPs(r); !slices.Equal(got, tt.want) {
				t.Errorf("ingress %v, want %v", got, tt.want)
			}
			c := findCondition(r.Conditions, ConditionHealthy)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tt.reason {
				t.Errorf("Healthy condition %+v, want False %s", c, tt.reason)
			}
		})
	}
}
