package placement

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestLoadBalancerIP(t *testing.T) {
	addr := func(ip string) nodeOpt {
		return func(n *corev1.Node) {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
	}
	three := []*corev1.Node{node("n1", addr("198.18.1.1")), node("n2", addr("198.18.1.2")), node("n3", addr("198.18.1.3"))}
	tests := []struct {
		name, ip     string
		wantEligible []string
		wantReplicas int32
		wantProblem  string
	}{
		{name: "unset", wantEligible: []string{"n1", "n2", "n3"}, wantReplicas: 2},
		{name: "a node's address: one proxy there", ip: "198.18.1.2", wantEligible: []string{"n2"}, wantReplicas: 1},
		{name: "no node's address", ip: "192.0.2.7", wantEligible: []string{"n1", "n2", "n3"}, wantReplicas: 2,
			wantProblem: `spec.loadBalancerIP="192.0.2.7": no node has this address, and pulselb publishes node addresses`},
		{name: "not an address", ip: "lb.example", wantEligible: []string{"n1", "n2", "n3"}, wantReplicas: 2,
			wantProblem: `spec.loadBalancerIP="lb.example": not an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := service(func(s *corev1.Service) { s.Spec.LoadBalancerIP = tt.ip })
			w, problems := Desired(svc, three, testCfg)
			if w.Deployment == nil {
				t.Fatal("no Deployment")
			}
			if !slices.Equal(w.EligibleNodes, tt.wantEligible) {
				t.Errorf("eligible nodes %v, want %v", w.EligibleNodes, tt.wantEligible)
			}
			if got := *w.Deployment.Spec.Replicas; got != tt.wantReplicas {
				t.Errorf("replicas %d, want %d", got, tt.wantReplicas)
			}
			var msgs []string
			for _, p := range problems {
				msgs = append(msgs, p.String())
			}
			if tt.wantProblem == "" && len(msgs) > 0 || tt.wantProblem != "" && !slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, tt.wantProblem) }) {
				t.Errorf("problems %q, want %q", msgs, tt.wantProblem)
			}
			pinned := false
			for _, term := range w.Deployment.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				for _, r := range term.MatchExpressions {
					if r.Key == corev1.LabelHostname && slices.Equal(r.Values, []string{"n2"}) {
						pinned = true
					}
				}
			}
			if pinned != (tt.ip == "198.18.1.2") {
				t.Errorf("required node affinity to n2: %v", pinned)
			}
		})
	}
}
