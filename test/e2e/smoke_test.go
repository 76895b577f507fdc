package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/test/cluster"
)

// TestSmoke is the harness' own scenario: a ClusterIP Service in front of a
// Deployment is reachable from a pod on another node through kube-proxy, a
// hostPort is reachable from outside on nodeIP:hostPort, a node taken down
// turns NotReady after the grace period, and nothing is left afterwards.
func TestSmoke(t *testing.T) {
	const grace = 6 * time.Second
	began := time.Now()
	c := cluster.ForTest(t, cluster.Options{Nodes: 3, NodeGracePeriod: grace})
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	ctx := t.Context()
	cs := c.Client

	t.Run("ClusterIPFromAnotherNode", func(t *testing.T) {
		labels := map[string]string{"app": "echo"}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(2)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector: map[string]string{corev1.LabelHostname: "node-1"},
						Containers: []corev1.Container{{
							Name: "echo", Image: "registry.example/echo:1",
							Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						}},
					},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating deployment: %v", err)
		}
		svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
			Spec: corev1.ServiceSpec{
				Selector: labels,
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating service: %v", err)
		}
		client := createPod(ctx, t, cs, "client", "node-2", nil)
		waitPodsRunning(ctx, t, cs, "app=echo", 2)

		// Both endpoints answer through the ClusterIP, from node-2's pod.
		url := fmt.Sprintf("http://%s/", svc.Spec.ClusterIP)
		seen := map[string]bool{}
		poll(ctx, t, 30*time.Second, "both echo pods answering on "+url+" from a pod on node-2", func() bool {
			out, err := c.PodExec(ctx, "default", client.Name, "curl", "-sS", "--max-time", "2", url)
			if err != nil {
				return false
			}
			if name, ok := field(string(out), "name"); ok {
				seen[name] = true
			}
			return len(seen) == 2
		})
		t.Logf("answers from %v", keys(seen))
	})

	t.Run("HostPortFromClient", func(t *testing.T) {
		createPod(ctx, t, cs, "hostport", "node-3", []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 30080}})
		ip, err := c.NodeIP("node-3")
		if err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://%s:30080/", ip)
		poll(ctx, t, 20*time.Second, "hostPort answering on "+url+" from the client namespace", func() bool {
			out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
			name, _ := field(string(out), "name")
			return err == nil && name == "default/hostport"
		})
	})

	t.Run("NodeDownTurnsNotReady", func(t *testing.T) {
		ip, err := c.NodeIP("node-3")
		if err != nil {
			t.Fatal(err)
		}
		down := time.Now()
		if err := c.NodeDown(ctx, "node-3"); err != nil {
			t.Fatalf("taking node-3 down: %v", err)
		}
		if out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "1", "http://"+ip+":30080/"); err == nil {
			t.Errorf("node-3 still reachable while down: %s", out)
		}
		poll(ctx, t, grace+20*time.Second, "node-3 NotReady", func() bool {
			n, err := cs.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
			return err == nil && cluster.NodeReady(n) != corev1.ConditionTrue
		})
		took := time.Since(down)
		t.Logf("node-3 NotReady %s after going down (grace period %s)", took.Round(100*time.Millisecond), grace)
		// The last heartbeat can be up to grace/4 before the link went down.
		if took < grace-grace/4-500*time.Millisecond {
			t.Errorf("node-3 NotReady after %s, before the grace period %s", took, grace)
		}
		if err := c.NodeUp(ctx, "node-3"); err != nil {
			t.Fatalf("bringing node-3 up: %v", err)
		}
		poll(ctx, t, 20*time.Second, "node-3 Ready again", func() bool {
			n, err := cs.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
			return err == nil && cluster.NodeReady(n) == corev1.ConditionTrue
		})
	})

	t.Run("CleanedUp", func(t *testing.T) {
		dir := c.Dir
		if err := c.Stop(context.Background()); err != nil {
			t.Fatalf("stopping: %v", err)
		}
		if left := cluster.Leftovers(dir); len(left) > 0 {
			t.Errorf("left behind after Stop: %v", left)
		}
		if _, err := os.Stat("/sys/class/net/plt-br0"); err == nil {
			t.Errorf("bridge plt-br0 left behind")
		}
	})
}

// createPod creates an echo pod pinned to node, with ports (default 8080).
func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, node string, ports []corev1.ContainerPort) *corev1.Pod {
	t.Helper()
	if ports == nil {
		ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "echo", Image: "registry.example/echo:1", Ports: ports}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	waitPodsRunning(ctx, t, cs, "app="+name, 1)
	return pod
}

// waitPodsRunning waits until n pods matching selector are Running and Ready.
func waitPodsRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, selector string, n int) {
	t.Helper()
	poll(ctx, t, 30*time.Second, fmt.Sprintf("%d pods %s running and ready", n, selector), func() bool {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == n
	})
}

// poll checks cond every 200 ms until it holds, failing t after timeout.
func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// field returns the value of key=value in the echo backend's answer.
func field(answer, key string) (string, bool) {
	for _, f := range strings.Fields(answer) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
