package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// saMountPath is where in-cluster clients find the service-account token
// (/var/run is a link to /run on the machines the harness supports).
const saMountPath = "/run/secrets/kubernetes.io/serviceaccount"

// serviceAccountDir writes the pod's projected service-account volume (a
// bound token, ca.crt, namespace) for containers running pulselb and returns
// its directory; ok is false when the pod gets no token.
func (rt *podRuntime) serviceAccountDir(ctx context.Context, pod *corev1.Pod, c corev1.Container) (dir string, ok bool, err error) {
	if !strings.Contains(c.Image, "pulselb") || (pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken) {
		return "", false, nil
	}
	if err := ensureMountPoint(rt.k.c.rec); err != nil {
		return "", false, err
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := rt.k.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptrInt64(3607), // the API server extends this magic value for pod-bound tokens
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", false, fmt.Errorf("requesting token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	dir = filepath.Join(rt.k.c.Dir, "pods", string(pod.UID), "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("creating service-account dir: %w", err)
	}
	ca, err := os.ReadFile(rt.k.c.cp.pki.path("ca.crt"))
	if err != nil {
		return "", false, fmt.Errorf("reading ca: %w", err)
	}
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(pod.Namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", false, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return dir, true, nil
}

// mountsServiceAccount reports whether mounts cover the service-account
// token's path.
func mountsServiceAccount(mounts []bindMount) bool {
	for _, m := range mounts {
		if m.dst == saMountPath || m.dst == "/var"+saMountPath {
			return true
		}
	}
	return false
}

// ensureMountPoint creates the empty directory the token is mounted on in
// each container's private mount namespace, recording its removal.
func ensureMountPoint(rec *record) error {
	if _, err := os.Stat(saMountPath); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", saMountPath, err)
	}
	if err := rec.add(item{Kind: "command", Args: []string{"rmdir", saMountPath, filepath.Dir(saMountPath), filepath.Dir(filepath.Dir(saMountPath))}}); err != nil {
		return err
	}
	if err := os.MkdirAll(saMountPath, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", saMountPath, err)
	}
	return nil
}
