package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// Secrets resolves a mysql probe's secret= for the Services of one
// namespace: the Secret must be in the pulselb namespace (Lister's) and its
// pulselb.io/allowed-namespaces annotation must list Namespace. Errors name
// the Secret and the rule, never the value.
type Secrets struct {
	Lister    corelisters.SecretNamespaceLister
	Namespace string
}

// Password returns the key "password" of the named Secret.
func (s Secrets) Password(_ context.Context, name string) (string, error) {
	sec, err := s.Lister.Get(name)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("secret %q not found in the pulselb namespace", name)
	}
	if err != nil {
		return "", fmt.Errorf("getting secret %q: %w", name, err)
	}
	allowed := strings.Split(sec.Annotations[contract.AnnotationAllowedNamespaces], ",")
	for i := range allowed {
		allowed[i] = strings.TrimSpace(allowed[i])
	}
	if s.Namespace == "" || !slices.Contains(allowed, s.Namespace) {
		return "", fmt.Errorf("secret %q does not list namespace %q in %s", name, s.Namespace, contract.AnnotationAllowedNamespaces)
	}
	pw, ok := sec.Data["password"]
	if !ok {
		return "", fmt.Errorf("secret %q has no key \"password\"", name)
	}
	return string(pw), nil
}
