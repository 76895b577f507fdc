package status

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDecideDataPaths checks that the ConfigValid condition says which
// ports the proxies relay in userspace (PROXY protocol) and which they
// forward by rule, valid or not.
func TestDecideDataPaths(t *testing.T) {
	const paths = "the userspace relay carries TCP:443 with a PROXY protocol v2 header; iptables rules carry TCP:80"
	in := Input{Service: svc(), Nodes: nodeMap(node("a", "int:10.0.0.1")), Pods: []*corev1.Pod{pod("a", "ready")},
		EligibleNodes: 1, Servable: true, Now: now, DataPaths: paths}
	c := findCondition(Decide(in).Conditions, ConditionConfigValid)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.HasSuffix(c.Message, "; "+paths) {
		t.Errorf("ConfigValid %+v, want True ending with the data paths", c)
	}
	in.Problems = []Problem{{Reason: ReasonInvalidAnnotation, Message: `pulselb.io/replicas="two": not a whole number; using 2`}}
	c = findCondition(Decide(in).Conditions, ConditionConfigValid)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "replicas") || !strings.HasSuffix(c.Message, "; "+paths) {
		t.Errorf("ConfigValid %+v, want False naming the problem and the data paths", c)
	}
}
