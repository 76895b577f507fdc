package status

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestProgressing(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason}
	}
	valid := cond(ConditionConfigValid, metav1.ConditionTrue, ReasonValid)
	tests := []struct {
		name  string
		conds []metav1.Condition
		want  bool
	}{
		{"pending, no proxy ready", []metav1.Condition{cond(ConditionProxiesScheduled, metav1.ConditionFalse, ReasonPending),
			cond(ConditionHealthy, metav1.ConditionFalse, ReasonNoProxyReady), valid}, true},
		{"scheduled, not ready", []metav1.Condition{cond(ConditionProxiesScheduled, metav1.ConditionTrue, ReasonScheduled),
			cond(ConditionHealthy, metav1.ConditionFalse, ReasonNoProxyReady), valid}, true},
		{"another controller's condition False", []metav1.Condition{cond("example.test/Other", metav1.ConditionFalse, "Whatever"), valid}, true},
		{"port conflict", []metav1.Condition{cond(ConditionProxiesScheduled, metav1.ConditionFalse, ReasonPortConflict), valid}, false},
		{"no eligible node", []metav1.Condition{cond(ConditionProxiesScheduled, metav1.ConditionFalse, ReasonNoEligibleNode), valid}, false},
		{"invalid config", []metav1.Condition{cond(ConditionConfigValid, metav1.ConditionFalse, ReasonInvalidConfig)}, false},
		{"all down", []metav1.Condition{cond(ConditionHealthy, metav1.ConditionFalse, ReasonAllDown), valid}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Progressing(tt.conds); got != tt.want {
				t.Errorf("Progressing = %v, want %v", got, tt.want)
			}
		})
	}

}
