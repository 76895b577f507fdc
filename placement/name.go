package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels on every proxy workload and its pods. They point back to the
// Service, so a workload can be found from its Service and a Service key
// from a workload or pod, without owner references (which cannot cross
// namespaces).
const (
	LabelAppName          = "app.kubernetes.io/name"
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	LabelServiceName      = Prefix + "service-name"
	LabelServiceNamespace = Prefix + "service-namespace"

	AppName   = "pulselb-proxy"
	ManagedBy = "pulselb"

	// AnnotationService names the Service as namespace/name on a workload.
	AnnotationService = Prefix + "service"
	// AnnotationSpecHash is the hash of the desired workload; the
	// controller updates a workload only when it differs.
	AnnotationSpecHash = Prefix + "spec-hash"
)

// maxNameLen keeps names valid as DNS-1123 labels.
const maxNameLen = 63

// hashLen is how many hex digits of sha256(namespace/name) a name carries:
// 40 bits, so a collision among a cluster's Services is not a practical
// concern, and the name stays readable.
const hashLen = 10

// Name returns the proxy workload name of the Service namespace/name:
// "pulselb-<name>-<hash>". The hash covers the namespace and the whole
// name, so Services with equal names in different namespaces, or long names
// that truncate alike, get different workloads. The result is a DNS-1123
// label and depends only on namespace and name.
func Name(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	hash := hex.EncodeToString(sum[:])[:hashLen]
	const prefix = "pulselb-"
	keep := maxNameLen - len(prefix) - 1 - hashLen
	if len(name) > keep {
		name = name[:keep]
	}
	name = strings.Trim(strings.ToLower(name), "-.")
	if name == "" {
		return prefix + hash
	}
	return prefix + name + "-" + hash
}

// Selector returns the labels selecting a Service's proxy pods. They never
// change for a Service, as a Deployment's selector is immutable.
func Selector(svc *corev1.Service) map[string]string {
	return map[string]string{
		LabelAppName:          AppName,
		LabelServiceNamespace: svc.Namespace,
		LabelServiceName:      svc.Name,
	}
}

// ServiceOf returns the Service a workload or proxy pod belongs to, from its
// labels, and whether the labels name one.
func ServiceOf(objLabels map[string]string) (types.NamespacedName, bool) {
	if objLabels[LabelAppName] != AppName {
		return types.NamespacedName{}, false
	}
	ns, name := objLabels[LabelServiceNamespace], objLabels[LabelServiceName]
	if ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}
