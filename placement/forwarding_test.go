package placement

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSysctlForbidden(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := func(node string, phase corev1.PodPhase, reason string, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase, Reason: reason}}
	}
	refused := func(node string, created time.Time) *corev1.Pod {
		return pod(node, corev1.PodFailed, ReasonSysctlForbidden, created)
	}
	for _, tc := range []struct {
		name     string
		refused  map[string]time.Time
		pods     []*corev1.Pod
		want     []string
		wantWait time.Duration
	}{
		{name: "none", pods: []*corev1.Pod{pod("n1", corev1.PodRunning, "", t0)}},
		{name: "refused pods", pods: []*corev1.Pod{refused("n2", t0), refused("n1", t0.Add(-time.Minute)), pod("n3", corev1.PodRunning, "", t0)},
			want: []string{"n1", "n2"}, wantWait: SysctlRetry},
		{name: "another failure is no refusal", pods: []*corev1.Pod{pod("n1", corev1.PodFailed, "Evicted", t0)}},
		{name: "a newer pod runs there", pods: []*corev1.Pod{refused("n1", t0.Add(-time.Second)), pod("n1", corev1.PodRunning, "", t0)},
			wantWait: SysctlRetry - time.Second},
		{name: "an older pod runs there", pods: []*corev1.Pod{refused("n1", t0), pod("n1", corev1.PodRunning, "", t0.Add(-time.Hour))},
			want: []string{"n1"}, wantWait: SysctlRetry},
		{name: "a newer pod pending there", pods: []*corev1.Pod{refused("n1", t0.Add(-2*time.Minute)), pod("n1", corev1.PodPending, "", t0)},
			want: []string{"n1"}},
		{name: "remembered", refused: map[string]time.Time{"n1": t0}, want: []string{"n1"}},
		{name: "remembered, then a newer pod runs", refused: map[string]time.Time{"n1": t0}, pods: []*corev1.Pod{pod("n1", corev1.PodRunning, "", t0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SysctlForbidden(tc.refused, tc.pods); !slices.Equal(got, tc.want) {
				t.Errorf("SysctlForbidden = %v, want %v", got, tc.want)
			}
			if got := SysctlWait(tc.pods, t0); got != tc.wantWait {
				t.Errorf("SysctlWait = %s, want %s", got, tc.wantWait)
			}
		})
	}
}
