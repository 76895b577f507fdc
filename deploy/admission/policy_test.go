// Package admission holds no code: its test checks the admission policy
// manifests shipped next to it.
package admission

import (
	"bytes"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

func TestProbeReportPolicyParses(t *testing.T) {
	b, err := os.ReadFile("probereport-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the policy and its binding", len(docs))
	}
	var policy admissionv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict(docs[0], &policy); err != nil {
		t.Fatalf("policy: %v", err)
	}
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict(docs[1], &binding); err != nil {
		t.Fatalf("binding: %v", err)
	}
	if policy.Kind != "ValidatingAdmissionPolicy" || binding.Kind != "ValidatingAdmissionPolicyBinding" {
		t.Fatalf("kinds %q, %q", policy.Kind, binding.Kind)
	}
	if binding.Spec.PolicyName != policy.Name {
		t.Errorf("binding names policy %q, want %q", binding.Spec.PolicyName, policy.Name)
	}
	if len(binding.Spec.ValidationActions) != 1 || binding.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Errorf("validationActions %v, want [Deny]", binding.Spec.ValidationActions)
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", policy.Spec.FailurePolicy)
	}
	rules := policy.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !strings.Contains(strings.Join(rules[0].Resources, ","), "probereports") || rules[0].APIGroups[0] != "pulselb.io" {
		t.Errorf("resource rules %+v, want pulselb.io probereports", rules)
	}
	if len(policy.Spec.Validations) != 1 {
		t.Fatalf("%d validations, want 1", len(policy.Spec.Validations))
	}
	expr := policy.Spec.Validations[0].Expression
	for _, want := range []string{`request.userInfo.extra["authentication.kubernetes.io/node-name"][0] == request.name`} {
		if !strings.Contains(expr, want) {
			t.Errorf("validation %q does not compare %s", expr, want)
		}
	}
}
