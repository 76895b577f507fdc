package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/test/cluster"
)

// CreateVantage creates the external vantage name as
// docs/external-vantages.md shows for the kustomize base (a ServiceAccount,
// its token Secret, bindings to the base's pulselb-external-vantage roles)
// and writes its kubeconfig with `pulselb vantage-kubeconfig` into the
// cluster's directory, returning the file.
func CreateVantage(ctx context.Context, c *cluster.Cluster, name string) (string, error) {
	cs := c.Client
	sa := "pulselb-vantage-" + name
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: SystemNamespace}}
	steps := []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(SystemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Secrets(SystemNamespace).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: sa + "-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}},
				Type:       corev1.SecretTypeServiceAccountToken}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pulselb-external-vantage"}, Subjects: subject}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().RoleBindings(SystemNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pulselb-external-vantage"}, Subjects: subject}, metav1.CreateOptions{})
			return err
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return "", fmt.Errorf("creating external vantage %s: %w", name, err)
		}
	}
	file := filepath.Join(c.Dir, "vantage-"+name+".kubeconfig")
	// It waits for the token controller to fill the Secret in.
	out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir(), "pulselb"), "vantage-kubeconfig", "--kubeconfig="+c.Kubeconfig,
		"--vantage-name="+name, "--server="+cluster.APIServerURL, "--output="+file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pulselb vantage-kubeconfig: %w: %s", err, out)
	}
	return file, nil
}

// Vantage is an external vantage (`pulselb prober --external`) running
// in the client namespace, the harness' stand-in for a machine outside
// the cluster.
type Vantage struct {
	// Log is the file its output goes to.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // how it exited, once done is closed
}

// StartVantage runs external vantage name with kubeconfig in the client
// namespace, heartbeating every 2 s, its output in the cluster's logs.
// It dies with the calling process; Stop ends it before.
func StartVantage(c *cluster.Cluster, name, kubeconfig string) (*Vantage, error) {
	v := &Vantage{Log: filepath.Join(c.Dir, "logs", "pulselb-vantage-"+name+".log"), done: make(chan struct{})}
	logf, err := os.Create(v.Log)
	if err != nil {
		return nil, err
	}
	v.cmd = exec.Command("ip", "netns", "exec", cluster.ClientNamespace, filepath.Join(c.BinDir(), "pulselb"), "prober", "--external",
		"--vantage-name="+name, "--kubeconfig="+kubeconfig, "--heartbeat=2s", "--metrics-address=", "--v=2")
	v.cmd.Stdout, v.cmd.Stderr = logf, logf
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Started from a locked thread: a Pdeathsig child dies with the thread
	// that forked it (cluster.StartLocked).
	if err := cluster.StartLocked(v.cmd, func(err error) {
		v.err = err
		logf.Close()
		close(v.done)
	}); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting external vantage %s: %w", name, err)
	}
	return v, nil
}

// ErrVantageExited is a vantage that has exited before Stop.
var ErrVantageExited = errors.New("external vantage exited")

// Alive returns ErrVantageExited, with how it exited and its log's last
// lines, once the vantage has exited.
func (v *Vantage) Alive() error {
	select {
	case <-v.done:
		b, _ := os.ReadFile(v.Log)
		if v.err != nil {
			return fmt.Errorf("%w (%w): %s", ErrVantageExited, v.err, Tail(string(b), 20))
		}
		return fmt.Errorf("%w: %s", ErrVantageExited, Tail(string(b), 20))
	default:
		return nil
	}
}

// Stop sends the vantage SIGTERM and waits up to 15 s for it to exit,
// then kills it; it returns an error when it had to.
func (v *Vantage) Stop() error {
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-v.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = v.cmd.Process.Kill()
		<-v.done
		return fmt.Errorf("external vantage did not stop within 15 s of SIGTERM; log %s", v.Log)
	}
}
