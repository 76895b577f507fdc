package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// TestFaults injects each fault the harness offers and checks what a user
// of the cluster would see.
func TestFaults(t *testing.T) {
	const grace = 6 * time.Second
	c := cluster.ForTest(t, cluster.Options{Nodes: 3, NodeGracePeriod: grace, ExternalIPs: true, WaitForMachine: 20 * time.Minute})
	ctx := t.Context()
	cs := c.Client
	for i := 1; i <= 3; i++ {
		createPod(ctx, t, cs, fmt.Sprintf("hp-%d", i), fmt.Sprintf("node-%d", i), []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 30080}})
	}
	// reach reports whether the hostPort on node answers from fromNode's
	// namespace, or from the client namespace when fromNode is empty.
	reach := func(fromNode, node string) bool {
		ip, err := c.NodeIP(node)
		if err != nil {
			t.Fatal(err)
		}
		argv := []string{"curl", "-sS", "--max-time", "1", fmt.Sprintf("http://%s:30080/", ip)}
		if fromNode == "" {
			_, err = c.ClientExec(ctx, argv...)
		} else {
			_, err = c.Exec(ctx, fromNode, argv...)
		}
		return err == nil
	}
	ready := func(node string) corev1.ConditionStatus {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting node %s: %v", node, err)
		}
		return cluster.NodeReady(n)
	}
	poll(ctx, t, 10*time.Second, "every hostPort reachable from the client", func() bool {
		return reach("", "node-1") && reach("", "node-2") && reach("", "node-3")
	})

	t.Run("ExternalIPs", func(t *testing.T) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ext string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeExternalIP {
				ext = a.Address
			}
		}
		if ext != "198.18.2.2" {
			t.Fatalf("node-2 ExternalIP = %q, want 198.18.2.2", ext)
		}
		if _, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", "http://"+ext+":30080/"); err != nil {
			t.Errorf("hostPort on the ExternalIP: %v", err)
		}
	})

	t.Run("HostNetworkPod", func(t *testing.T) {
		pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hostnet", Namespace: "default", Labels: map[string]string{"app": "hostnet"}},
			Spec: corev1.PodSpec{
				NodeName: "node-2", HostNetwork: true,
				Containers: []corev1.Container{{Name: "echo", Image: "echo", Ports: []corev1.ContainerPort{{ContainerPort: 8081}}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitPodsRunning(ctx, t, cs, "app=hostnet", 1)
		got, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.PodIP != "198.18.1.2" {
			t.Errorf("hostNetwork pod IP = %s, want node-2's 198.18.1.2", got.Status.PodIP)
		}
		poll(ctx, t, 10*time.Second, "hostNetwork pod answering on 198.18.1.2:8081", func() bool {
			_, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "1", "http://198.18.1.2:8081/")
			return err == nil
		})
	})

	t.Run("BlackholeKeepsNodeReady", func(t *testing.T) {
		if err := c.NodeBlackhole(ctx, "node-1"); err != nil {
			t.Fatal(err)
		}
		if reach("", "node-1") || reach("node-2", "node-1") {
			t.Errorf("blackholed node-1 still reachable")
		}
		// Heartbeats go on: still Ready well past the grace period.
		deadline := time.Now().Add(grace + 3*time.Second)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(deadline) {
			if s := ready("node-1"); s != corev1.ConditionTrue {
				t.Fatalf("blackholed node-1 Ready=%s; heartbeats should continue", s)
			}
			<-tick.C
		}
		if err := c.NodeHeal(ctx, "node-1"); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, 5*time.Second, "node-1 reachable after heal", func() bool { return reach("", "node-1") })
	})

	t.Run("Partition", func(t *testing.T) {
		if err := c.NodePartition(ctx, "node-1", "node-2"); err != nil {
			t.Fatal(err)
		}
		if reach("node-1", "node-2") || reach("node-2", "node-1") {
			t.Errorf("node-1 and node-2 still reach each other across the partition")
		}
		if !reach("node-3", "node-2") || !reach("node-3", "node-1") || !reach("", "node-1") {
			t.Errorf("the partition cut more than node-1 from node-2")
		}
		if err := c.NodeHeal(ctx, "node-2"); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, 5*time.Second, "node-1 and node-2 reach each other after heal", func() bool {
			return reach("node-1", "node-2") && reach("node-2", "node-1")
		})
	})

	t.Run("KillContainerRestartsIt", func(t *testing.T) {
		if err := c.KillContainer("default", "hp-3", "echo"); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, 15*time.Second, "hp-3 restarted and ready", func() bool {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "hp-3", metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			st := p.Status.ContainerStatuses[0]
			return st.RestartCount == 1 && st.Ready && st.LastTerminationState.Terminated != nil
		})
		poll(ctx, t, 5*time.Second, "hp-3 answering again", func() bool { return reach("", "node-3") })
	})

	t.Run("RestartAPIServer", func(t *testing.T) {
		if err := c.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, 20*time.Second, "nodes Ready after the API server restart", func() bool {
			return ready("node-1") == corev1.ConditionTrue && ready("node-3") == corev1.ConditionTrue
		})
	})
}

// blackhole cuts victim off from every other node until the test ends or
// the fault's Heal, failing t if it cannot.
func blackhole(ctx context.Context, t *testing.T, c *cluster.Cluster, victim string) *scenario.Blackhole {
	t.Helper()
	b, err := scenario.BlackholeNode(ctx, c, victim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Heal(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	})
	return b
}

// blackholeUntilGone cuts victim off as blackhole does, and waits up to
// 15 s, while ctl runs, until ips leave the status rec records; it
// returns the fault and how long after it each IP left.
func blackholeUntilGone(ctx context.Context, t *testing.T, c *cluster.Cluster, rec *scenario.StatusRecorder, ctl *controllerProcess,
	victim string, ips ...string) (*scenario.Blackhole, []time.Duration) {
	t.Helper()
	b := blackhole(ctx, t, c, victim)
	dropped, err := b.WaitGone(ctx, rec, 15*time.Second, ctl.Alive, ips...)
	if err != nil {
		t.Fatal(err)
	}
	return b, dropped
}
