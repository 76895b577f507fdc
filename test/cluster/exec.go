package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Exec runs argv in a node's network namespace and returns its combined
// output.
func (c *Cluster) Exec(ctx context.Context, node string, argv ...string) ([]byte, error) {
	if _, err := c.netNode(node); err != nil {
		return nil, err
	}
	return execIn(ctx, NodeNamespace(node), argv...)
}

// ClientExec runs argv in the client namespace, a machine outside the
// cluster on the nodes' network.
func (c *Cluster) ClientExec(ctx context.Context, argv ...string) ([]byte, error) {
	return execIn(ctx, clientNS, argv...)
}

// PodExec runs argv in a pod's network namespace.
func (c *Cluster) PodExec(ctx context.Context, namespace, pod string, argv ...string) ([]byte, error) {
	c.kubelet.mu.Lock()
	uid, ok := c.kubelet.podKeys[namespace+"/"+pod]
	rt := c.kubelet.pods[uid]
	c.kubelet.mu.Unlock()
	if !ok || rt == nil || rt.netns == "" {
		return c.realPodExec(ctx, namespace, pod, argv...)
	}
	return execIn(ctx, rt.netns, argv...)
}

func execIn(ctx context.Context, ns string, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("running %v in %s: %w", argv, ns, err)
	}
	return out, nil
}

// ContainerPID returns the pid of a running container's process.
func (c *Cluster) ContainerPID(namespace, pod, container string) (int, error) {
	c.kubelet.mu.Lock()
	rt := c.kubelet.pods[c.kubelet.podKeys[namespace+"/"+pod]]
	c.kubelet.mu.Unlock()
	if rt == nil {
		return 0, fmt.Errorf("pod %s/%s is not running", namespace, pod)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st := rt.containers[container]
	if st == nil || st.proc == nil || st.proc.exited() {
		return 0, fmt.Errorf("container %s of pod %s/%s is not running", container, namespace, pod)
	}
	return st.proc.cmd.Process.Pid, nil
}

// ContainerLog returns what a container wrote to stdout and stderr, over
// all its restarts.
func (c *Cluster) ContainerLog(namespace, pod, container string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "logs", fmt.Sprintf("pod-%s-%s-%s.log", namespace, pod, container)))
	if errors.Is(err, os.ErrNotExist) {
		if b, rerr := c.realContainerLog(namespace, pod, container); rerr == nil {
			return b, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading log of %s/%s/%s: %w", namespace, pod, container, err)
	}
	return b, nil
}

// ContainerExec runs argv inside a running container: in its network and
// mount namespaces (so its volumes are at their mount paths), with its
// environment, like `kubectl exec`. It returns the combined output.
func (c *Cluster) ContainerExec(ctx context.Context, namespace, pod, container string, argv ...string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("exec in %s/%s/%s: no command", namespace, pod, container)
	}
	pid, err := c.ContainerPID(namespace, pod, container)
	if err != nil {
		return nil, err
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, fmt.Errorf("reading environment of %s/%s/%s: %w", namespace, pod, container, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", "-m", "--"}, argv...)...)
	cmd.Env = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("running %v in %s/%s/%s: %w", argv, namespace, pod, container, err)
	}
	return out, nil
}
