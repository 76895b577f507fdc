package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/pulselb/pulselb/test/cluster"
)

// ProbeReports is the resource of pulselb's ProbeReport objects.
var ProbeReports = schema.GroupVersionResource{Group: "pulselb.io", Version: "v1alpha1", Resource: "probereports"}

// Names of the prober pieces InstallProbers creates.
const (
	ProberName = "pulselb-prober" // ServiceAccount, roles, DaemonSet and app.kubernetes.io/name label
	BeaconPort = 9472
)

// InstallProbeReportCRD creates the ProbeReport CRD from deploy/crds and
// waits until ProbeReports can be listed in namespace.
func InstallProbeReportCRD(ctx context.Context, dyn dynamic.Interface, namespace string) error {
	mod, err := cluster.ModuleDir()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(mod, "..", "deploy", "crds", "pulselb.io_probereports.yaml"))
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("reading the ProbeReport CRD: %w", err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the ProbeReport CRD: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(ProbeReports).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ProbeReport CRD is not served after 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// InstallProbers creates, in namespace, the prober's ServiceAccount, its
// roles as docs/health.md lists them, and a DaemonSet running
// `pulselb prober` with extraArgs, without the rest of deploy/: tests that
// run the controller as a process use it.
func InstallProbers(ctx context.Context, cs kubernetes.Interface, namespace string, extraArgs ...string) error {
	const name = ProberName
	read := []string{"get", "list", "watch"}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: namespace}}
	labels := map[string]string{"app.kubernetes.io/name": name}
	steps := []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: read}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subject}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"pods", "secrets"}, Verbs: read},
					{APIGroups: []string{"pulselb.io"}, Resources: []string{"probereports"}, Verbs: []string{"get", "create", "update"}},
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
				}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subject}, metav1.CreateOptions{})
			return err
		},
		func() error {
			args := append([]string{"prober", "--namespace=" + namespace, fmt.Sprintf("--beacon-port=%d", BeaconPort)}, extraArgs...)
			_, err := cs.AppsV1().DaemonSets(namespace).Create(ctx, &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Spec: appsv1.DaemonSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							ServiceAccountName: name,
							Containers: []corev1.Container{{
								Name: "prober", Image: "ghcr.io/pulselb/pulselb:dev", Args: args,
								Env: []corev1.EnvVar{{Name: "PULSELB_NODE_NAME", ValueFrom: &corev1.EnvVarSource{
									FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
								Ports: []corev1.ContainerPort{{Name: "beacon", ContainerPort: BeaconPort, HostPort: BeaconPort}},
							}},
						},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("installing the prober: %w", err)
		}
	}
	return nil
}
