package status

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionAllowListApplied says, for a Service with source ranges, whether
// every proxy applies the allow-list its workload carries.
const ConditionAllowListApplied = "pulselb.io/AllowListApplied"

// Reasons of ConditionAllowListApplied and of its Events.
const (
	ReasonAllowListApplied    = "Applied"
	ReasonAllowListNotApplied = "AllowListNotApplied"
)

// AllowList is what the proxies of a Service with source ranges report
// about its allow-list (contract.PodConditionAllowList on each pod).
type AllowList struct {
	// Hash is the list the workload carries (contract.AllowListHash).
	Hash string
	// Proxies is how many running proxies report it.
	Proxies int
	// Failing names each proxy that does not apply it, and why: it
	// refused the list (and refuses every client), or still applies an
	// older one, or does not say (an older proxy) past the grace period.
	Failing []string
}

// allowListCondition returns the AllowListApplied condition, or nil when
// the Service has no allow-list to apply.
func allowListCondition(a *AllowList) *metav1.Condition {
	if a == nil {
		return nil
	}
	c := &metav1.Condition{Type: ConditionAllowListApplied, Status: metav1.ConditionTrue, Reason: ReasonAllowListApplied,
		Message: "every running proxy applies allow-list " + a.Hash}
	if len(a.Failing) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonAllowListNotApplied
		c.Message = "allow-list " + a.Hash + " not applied: " + strings.Join(a.Failing, "; ")
	}
	return c
}

// allowListEvents warns when the proxies stop applying the allow-list, or
// the reason changes.
func allowListEvents(old []metav1.Condition, now *metav1.Condition) []Event {
	if now == nil || now.Status == metav1.ConditionTrue {
		return nil
	}
	if o := findCondition(old, ConditionAllowListApplied); o != nil && o.Status == now.Status && o.Message == now.Message {
		return nil
	}
	return []Event{{Type: corev1.EventTypeWarning, Reason: ReasonAllowListNotApplied, Message: now.Message}}
}
