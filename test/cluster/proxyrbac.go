package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// SystemNamespace is pulselb's namespace in an install.
const SystemNamespace = "pulselb-system"

// proxyRBACFile is the install's proxy ServiceAccount, Role and RoleBinding,
// relative to the repository root.
const proxyRBACFile = "deploy/base/proxy-rbac.yaml"

// installProxyRBAC creates, in namespace, what deploy/base gives proxy pods:
// their ServiceAccount and its Role (read the proxy workloads, where each
// proxy finds its allow-list, and report it on its pod) and the admission
// policy that keeps each proxy to its own pod. The policy names
// pulselb-system, as deploy/base does. Scenarios that run the controller as a
// process rather than from deploy/base get it with the namespace, read from
// the install's own file, so their proxies run as installed ones do.
func (c *Cluster) installProxyRBAC(ctx context.Context, namespace string) error {
	mod, err := ModuleDir()
	if err != nil {
		return err
	}
	path := filepath.Join(filepath.Dir(mod), proxyRBACFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading proxy RBAC: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			// Comments only.
			continue
		}
		opts := metav1.CreateOptions{}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = namespace
			_, err = c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, o, opts)
		case *rbacv1.Role:
			o.Namespace = namespace
			_, err = c.Client.RbacV1().Roles(namespace).Create(ctx, o, opts)
		case *rbacv1.RoleBinding:
			o.Namespace = namespace
			for i := range o.Subjects {
				o.Subjects[i].Namespace = namespace
			}
			_, err = c.Client.RbacV1().RoleBindings(namespace).Create(ctx, o, opts)
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, opts)
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, opts)
		default:
			return fmt.Errorf("%s: unexpected %T", path, obj)
		}
		if err != nil {
			return fmt.Errorf("creating proxy RBAC from %s: %w", path, err)
		}
	}
}
