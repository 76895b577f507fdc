package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
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
