package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pulselb/pulselb/test/cluster"
)

// TestPulselbPod runs a pod whose image is pulselb's: the simulator runs
// the pulselb binary built from this checkout with the container's command,
// args and environment (ConfigMap, downward API, $(VAR) expansion), and
// mounts a bound service-account token that authenticates as the pod's
// service account.
func TestPulselbPod(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{Nodes: 2})
	ctx := t.Context()
	cs := c.Client

	createPod(ctx, t, cs, "backend", "node-1", nil)
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "backend", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "backend"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Data:       map[string]string{"spec": "http path=/from-pulselb status=200"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap: %v", err)
	}
	_, err = cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "checker", Namespace: "default", Labels: map[string]string{"app": "checker"}},
		Spec: corev1.PodSpec{
			NodeName: "node-2",
			// Runs to completion before the main container starts.
			InitContainers: []corev1.Container{{
				Name: "init", Image: "ghcr.io/pulselb/pulselb:dev",
				Args: []string{"check", "--serve", "tcp"},
			}},
			Containers: []corev1.Container{{
				Name: "check", Image: "ghcr.io/pulselb/pulselb:dev",
				Command: []string{"/pulselb"},
				Args:    []string{"check", "--count", "600", "--interval", "500ms", "$(SPEC)", "$(TARGET)"},
				Env: []corev1.EnvVar{
					{Name: "SPEC", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "probe"}, Key: "spec"}}},
					{Name: "TARGET", Value: svc.Spec.ClusterIP + ":80"},
					{Name: "MY_NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pulselb pod: %v", err)
	}
	waitPodsRunning(ctx, t, cs, "app=checker", 1)

	t.Run("InitContainerCompleted", func(t *testing.T) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "checker", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Status.InitContainerStatuses) != 1 {
			t.Fatalf("init container statuses = %+v, want one", p.Status.InitContainerStatuses)
		}
		if st := p.Status.InitContainerStatuses[0].State.Terminated; st == nil || st.ExitCode != 0 {
			t.Errorf("init container state = %+v, want terminated with exit code 0", p.Status.InitContainerStatuses[0].State)
		}
		log, err := c.ContainerLog("default", "checker", "init")
		if err != nil || !strings.Contains(string(log), "UP") {
			t.Errorf("init container log = %q, %v; want pulselb check's UP line", log, err)
		}
	})

	t.Run("ProbesTheServiceThroughKubeProxy", func(t *testing.T) {
		poll(ctx, t, 20*time.Second, "pulselb check reporting the backend UP", func() bool {
			log, err := c.ContainerLog("default", "checker", "check")
			return err == nil && strings.Contains(string(log), "UP L7OK")
		})
	})

	t.Run("ServiceAccountToken", func(t *testing.T) {
		pid, err := c.ContainerPID("default", "checker", "check")
		if err != nil {
			t.Fatal(err)
		}
		// The token is visible only in the container's own mount namespace
		// (/run, not /var/run: that absolute link would resolve outside it).
		dir := fmt.Sprintf("/proc/%d/root/run/secrets/kubernetes.io/serviceaccount/", pid)
		token, err := os.ReadFile(dir + "token")
		if err != nil {
			t.Fatalf("reading the token from the container's view: %v", err)
		}
		if ns, err := os.ReadFile(dir + "namespace"); err != nil || string(ns) != "default" {
			t.Errorf("namespace file = %q, %v; want default", ns, err)
		}
		if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
			t.Errorf("token visible outside the container's mount namespace")
		}
		cfg := rest.AnonymousClientConfig(c.RESTConfig)
		cfg.BearerToken = string(token)
		podClient, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		review, err := podClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("self subject review with the pod's token: %v", err)
		}
		if got, want := review.Status.UserInfo.Username, "system:serviceaccount:default:default"; got != want {
			t.Errorf("token authenticates as %q, want %q", got, want)
		}
	})

	t.Run("DownwardAPIEnv", func(t *testing.T) {
		pid, err := c.ContainerPID("default", "checker", "check")
		if err != nil {
			t.Fatal(err)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"MY_NODE=node-2", "KUBERNETES_SERVICE_HOST=" + cluster.APIServiceIP} {
			if !strings.Contains(string(env), want) {
				t.Errorf("container environment lacks %s", want)
			}
		}
	})

	t.Run("DeletingThePodStopsIt", func(t *testing.T) {
		pid, err := c.ContainerPID("default", "checker", "check")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().Pods("default").Delete(ctx, "checker", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The simulated kubelet stops the processes and confirms the deletion.
		poll(ctx, t, 20*time.Second, "pod checker gone", func() bool {
			_, err := cs.CoreV1().Pods("default").Get(ctx, "checker", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("process %d of the deleted pod still running", pid)
		}
	})
}
