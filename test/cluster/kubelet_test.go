package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestWithConditionsKeepsOthers(t *testing.T) {
	old := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "NodeStatusUnknown"},
		{Type: "pulselb.io/ProxiesDrained", Status: corev1.ConditionTrue},
	}
	own := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	got := withConditions(old, own)
	if len(got) != 2 || got[0].Reason != "KubeletReady" || got[1].Type != "pulselb.io/ProxiesDrained" {
		t.Errorf("withConditions = %+v, want the kubelet's Ready and pulselb's condition kept", got)
	}
}
