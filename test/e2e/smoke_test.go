package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// TestSmoke is the harness' own scenario: a ClusterIP Service in front of a
// Deployment is reachable from a pod on another node through kube-proxy, a
// hostPort is reachable from outside on nodeIP:hostPort, a node taken down
// turns NotReady after the grace period, and nothing is left afterwards.
// Each step is a method of smokeEnv, run in this order on the same cluster.
func TestSmoke(t *testing.T) {
	e := newSmokeEnv(t)
	t.Run("ClusterIPFromAnotherNode", e.clusterIPFromAnotherNode)
	t.Run("HostPortFromClient", e.hostPortFromClient)
	t.Run("UDPHostPortFromClient", e.udpHostPortFromClient)
	t.Run("ReadinessProbeDrivesEndpointSlice", e.readinessProbeDrivesEndpointSlice)
	t.Run("LivenessProbeRestartsContainer", e.livenessProbeRestartsContainer)
	t.Run("VolumesAndEnv", e.volumesAndEnv)
	t.Run("NodeDownTurnsNotReady", e.nodeDownTurnsNotReady)
	t.Run("CleanedUp", e.cleanedUp)
}

// smokeGrace is TestSmoke's node grace period: how long a node may miss
// heartbeats before it turns NotReady.
const smokeGrace = 6 * time.Second

// smokeEnv is TestSmoke's cluster: three nodes, nothing of pulselb.
type smokeEnv struct {
	ctx context.Context
	c   *cluster.Cluster
	cs  kubernetes.Interface
}

// newSmokeEnv starts the cluster with a node grace period of smokeGrace.
func newSmokeEnv(t *testing.T) *smokeEnv {
	began := time.Now()
	c := cluster.ForTest(t, cluster.Options{Nodes: 3, NodeGracePeriod: smokeGrace, WaitForMachine: 20 * time.Minute})
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	return &smokeEnv{ctx: t.Context(), c: c, cs: c.Client}
}

// clusterIPFromAnotherNode checks that two echo pods on node-1 behind a
// ClusterIP Service both answer a pod on node-2 through kube-proxy.
func (e *smokeEnv) clusterIPFromAnotherNode(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	dep := cluster.EchoDeployment("default", "echo", 2, corev1.ContainerPort{ContainerPort: 8080})
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-1"}
	labels := dep.Spec.Selector.MatchLabels
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
}

// nodeIP returns node's IP.
func (e *smokeEnv) nodeIP(t *testing.T, node string) string {
	t.Helper()
	ip, err := e.c.NodeIP(node)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

// hostPortFromClient checks that a hostPort on node-3 answers the client
// namespace on node-3's IP.
func (e *smokeEnv) hostPortFromClient(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	createPod(ctx, t, cs, "hostport", "node-3", []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 30080}})
	ip := e.nodeIP(t, "node-3")
	url := fmt.Sprintf("http://%s:30080/", ip)
	poll(ctx, t, 20*time.Second, "hostPort answering on "+url+" from the client namespace", func() bool {
		out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "2", url)
		name, _ := field(string(out), "name")
		return err == nil && name == "default/hostport"
	})
}

// udpHostPortFromClient checks that a UDP hostPort on node-2 echoes a
// datagram from the client namespace.
func (e *smokeEnv) udpHostPortFromClient(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	createPod(ctx, t, cs, "udp-hostport", "node-2", []corev1.ContainerPort{{ContainerPort: 5353, HostPort: 30053, Protocol: corev1.ProtocolUDP}})
	ip := e.nodeIP(t, "node-2")
	// bash's /dev/udp: one datagram out, the echo back.
	script := fmt.Sprintf("exec 3<>/dev/udp/%s/30053; printf ping-udp >&3; head -c 8 <&3", ip)
	poll(ctx, t, 20*time.Second, "the UDP hostPort echoing on "+ip+":30053 to the client namespace", func() bool {
		out, err := c.ClientExec(ctx, "timeout", "2", "bash", "-c", script)
		return err == nil && string(out) == "ping-udp"
	})
}

// readinessProbeDrivesEndpointSlice checks that a failing readiness probe takes
// the pod out of its Service's ready endpoints without restarting it, and a
// passing one puts it back.
func (e *smokeEnv) readinessProbeDrivesEndpointSlice(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	probe := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}},
		PeriodSeconds: 1, FailureThreshold: 2, SuccessThreshold: 1, TimeoutSeconds: 1,
	}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probed", Namespace: "default", Labels: map[string]string{"app": "probed"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{Name: "echo", Image: "registry.example/echo:1",
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: probe}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "probed", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "probed"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service: %v", err)
	}
	waitPodsRunning(ctx, t, cs, "app=probed", 1)
	p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := p.Status.PodIP
	poll(ctx, t, 30*time.Second, "pod "+ip+" a ready endpoint of service probed", func() bool {
		return endpointReady(ctx, t, cs, "probed", ip) == "ready"
	})

	if out, err := c.PodExec(ctx, "default", "probed", "curl", "-sS", "--max-time", "2", "http://127.0.0.1:8080/health/fail"); err != nil {
		t.Fatalf("failing the readiness endpoint: %v %s", err, out)
	}
	failed := time.Now()
	poll(ctx, t, 20*time.Second, "pod probed NotReady", func() bool { return !podReady(ctx, t, cs, "probed") })
	t.Logf("NotReady %s after the readiness endpoint failed (period 1s, failureThreshold 2)", time.Since(failed).Round(100*time.Millisecond))
	poll(ctx, t, 20*time.Second, "pod "+ip+" no longer a ready endpoint of service probed", func() bool {
		return endpointReady(ctx, t, cs, "probed", ip) != "ready"
	})
	p, err = cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("a failing readiness probe must not restart the container: phase %s, status %+v", p.Status.Phase, p.Status.ContainerStatuses[0])
	}

	if out, err := c.PodExec(ctx, "default", "probed", "curl", "-sS", "--max-time", "2", "http://127.0.0.1:8080/health/pass"); err != nil {
		t.Fatalf("healing the readiness endpoint: %v %s", err, out)
	}
	poll(ctx, t, 20*time.Second, "pod "+ip+" a ready endpoint of service probed again", func() bool {
		return endpointReady(ctx, t, cs, "probed", ip) == "ready"
	})
}

// livenessProbeRestartsContainer checks that a failing liveness probe
// restarts the container once, and its last termination says why.
func (e *smokeEnv) livenessProbeRestartsContainer(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: "default", Labels: map[string]string{"app": "live"}},
		Spec: corev1.PodSpec{
			NodeName: "node-2",
			Containers: []corev1.Container{{Name: "echo", Image: "registry.example/echo:1",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				StartupProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 10,
					ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
				LivenessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 2,
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	waitPodsRunning(ctx, t, cs, "app=live", 1)
	if out, err := c.PodExec(ctx, "default", "live", "curl", "-sS", "--max-time", "2", "http://127.0.0.1:8080/health/fail"); err != nil {
		t.Fatalf("failing the liveness endpoint: %v %s", err, out)
	}
	var st corev1.ContainerStatus
	poll(ctx, t, 30*time.Second, "container live/echo restarted by its liveness probe and running again", func() bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "live", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		st = p.Status.ContainerStatuses[0]
		return st.RestartCount == 1 && st.State.Running != nil && st.Ready
	})
	last := st.LastTerminationState.Terminated
	if last == nil || !strings.Contains(last.Message, "Liveness probe failed") {
		t.Errorf("last termination %+v, want one saying the liveness probe failed", last)
	}
}

// volumesAndEnv checks that a pod sees its ConfigMap, Secret, downward
// API, emptyDir and projected volumes and its environment, only in its own
// mount namespace, and that its emptyDir survives a container restart.
func (e *smokeEnv) volumesAndEnv(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	const base = "/etc/plt-smoke"
	if _, err := os.Stat(base); err == nil {
		t.Fatalf("%s exists on this machine; the test needs it absent", base)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-cfg"}, Data: map[string]string{"GREETING": "hello", "app.conf": "port=8080"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-creds"}, Data: map[string][]byte{"password": []byte("s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := volumesPod(base)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	waitPodsRunning(ctx, t, cs, "app=vols", 1)
	p, err := cs.CoreV1().Pods("default").Get(ctx, "vols", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := func(argv ...string) string {
		t.Helper()
		out, err := c.ContainerExec(ctx, "default", "vols", "app", argv...)
		if err != nil {
			t.Errorf("%v: %v: %s", argv, err, out)
		}
		return string(out)
	}
	checks := []struct{ argv, want string }{
		{"cat " + base + "/config/conf/app.conf", "port=8080"},
		{"stat -c %a " + base + "/config/conf/app.conf", "600\n"},
		{"cat " + base + "/secret/password", "s3cret"},
		{"stat -c %a " + base + "/secret/password", "400\n"},
		{"cat " + base + "/podinfo/name", "vols"},
		{"grep -c -x -e 'app=\"vols\"' -e 'tier=\"front\"' " + base + "/podinfo/labels", "2\n"},
		{"cat " + base + "/projected/greeting " + base + "/projected/password", "hellos3cret"},
		{"test -s " + base + "/projected/token && echo token", "token\n"},
		{"ls -A " + base + "/missing", ""},
		{"echo $CFG_GREETING $PASSWORD $POD_IP $MEM_LIMIT [$OPTIONAL]", "hello s3cret " + p.Status.PodIP + " 64 []\n"},
		{"touch " + base + "/secret/x 2>/dev/null || echo read-only", "read-only\n"},
		{"echo kept > " + base + "/scratch/f && cat " + base + "/scratch/f", "kept\n"},
	}
	for _, ck := range checks {
		if got := in("sh", "-c", ck.argv); got != ck.want {
			t.Errorf("%s in the container: %q, want %q", ck.argv, got, ck.want)
		}
	}
	// Names that are no shell identifiers reach the process too
	// (printenv runs without a shell in between).
	if got := in("printenv", "CFG_app.conf"); got != "port=8080\n" {
		t.Errorf("printenv CFG_app.conf in the container: %q, want port=8080", got)
	}
	// The mounts exist only in the container's mount namespace.
	if _, err := os.Stat(base + "/secret/password"); err == nil {
		t.Errorf("%s/secret/password visible outside the container", base)
	}
	// emptyDir survives a container restart.
	if err := c.KillContainer("default", "vols", "app"); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 30*time.Second, "container vols/app restarted and ready", func() bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "vols", metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].Ready
	})
	if got := in("cat", base+"/scratch/f"); got != "kept\n" {
		t.Errorf("emptyDir after a restart: %q, want kept", got)
	}
}

// volumesPod is the VolumesAndEnv pod on node-1: ConfigMap smoke-cfg and
// Secret smoke-creds as volumes, projected and in its environment, the
// downward API, an emptyDir and optional references to a missing ConfigMap,
// all mounted under base, and an exec readiness probe that reads them.
func volumesPod(base string) *corev1.Pod {
	cmRef := corev1.LocalObjectReference{Name: "smoke-cfg"}
	secretRef := corev1.LocalObjectReference{Name: "smoke-creds"}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vols", Namespace: "default", Labels: map[string]string{"app": "vols", "tier": "front"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: cmRef,
					Items: []corev1.KeyToPath{{Key: "app.conf", Path: "conf/app.conf", Mode: ptr.To(int32(0o600))}}}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "smoke-creds", DefaultMode: ptr.To(int32(0o400))}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: cmRef, Items: []corev1.KeyToPath{{Key: "GREETING", Path: "greeting"}}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: secretRef}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "smoke"}}}}}},
				{Name: "missing", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "no-such-cm"}, Optional: ptr.To(true)}}},
			},
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/echo:1",
				Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: cmRef}, Prefix: "CFG_"}},
				Env: []corev1.EnvVar{
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: secretRef, Key: "password"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "MEM_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
					{Name: "OPTIONAL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "no-such-cm"}, Key: "x", Optional: ptr.To(true)}}},
				},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "cfg", MountPath: base + "/config"},
					{Name: "creds", MountPath: base + "/secret", ReadOnly: true},
					{Name: "info", MountPath: base + "/podinfo"},
					{Name: "scratch", MountPath: base + "/scratch"},
					{Name: "all", MountPath: base + "/projected"},
					{Name: "missing", MountPath: base + "/missing"},
				},
				// An exec probe runs in the container with its volumes
				// and environment.
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
					Command: []string{"sh", "-c", `test "$CFG_GREETING" = hello && test "$(cat ` + base + `/projected/greeting)" = hello`}}}},
			}},
		},
	}
}

// nodeDownTurnsNotReady takes node-3 down: it is unreachable and turns NotReady
// no sooner than the grace period allows, and Ready again once it is up.
func (e *smokeEnv) nodeDownTurnsNotReady(t *testing.T) {
	ctx, c, cs := e.ctx, e.c, e.cs
	ip := e.nodeIP(t, "node-3")
	down := time.Now()
	if err := c.NodeDown(ctx, "node-3"); err != nil {
		t.Fatalf("taking node-3 down: %v", err)
	}
	if out, err := c.ClientExec(ctx, "curl", "-sS", "--max-time", "1", "http://"+ip+":30080/"); err == nil {
		t.Errorf("node-3 still reachable while down: %s", out)
	}
	poll(ctx, t, smokeGrace+20*time.Second, "node-3 NotReady", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
		return err == nil && cluster.NodeReady(n) != corev1.ConditionTrue
	})
	took := time.Since(down)
	t.Logf("node-3 NotReady %s after going down (grace period %s)", took.Round(100*time.Millisecond), smokeGrace)
	// The last heartbeat can be up to smokeGrace/4 before the link went down.
	if took < smokeGrace-smokeGrace/4-500*time.Millisecond {
		t.Errorf("node-3 NotReady after %s, before the grace period %s", took, smokeGrace)
	}
	if err := c.NodeUp(ctx, "node-3"); err != nil {
		t.Fatalf("bringing node-3 up: %v", err)
	}
	poll(ctx, t, 20*time.Second, "node-3 Ready again", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
		return err == nil && cluster.NodeReady(n) == corev1.ConditionTrue
	})
}

// cleanedUp stops the cluster: no files, bridge or mount targets are left
// behind.
func (e *smokeEnv) cleanedUp(t *testing.T) {
	stopLeavesNothing(t, e.c)
	if _, err := os.Stat("/sys/class/net/plt-br0"); err == nil {
		t.Errorf("bridge plt-br0 left behind")
	}
	if _, err := os.Stat("/etc/plt-smoke"); err == nil {
		t.Errorf("volume mount targets under /etc/plt-smoke left behind")
	}
}

// stopLeavesNothing stops c and checks that cluster.Leftovers finds
// nothing of it left.
func stopLeavesNothing(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	dir := c.Dir
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("stopping: %v", err)
	}
	if left := cluster.Leftovers(dir); len(left) > 0 {
		t.Errorf("left behind after Stop: %v", left)
	}
}

// podReady reports whether pod default/name is Ready.
func podReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) bool {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// endpointReady says whether ip is in the EndpointSlices of service
// default/svc: "ready", "not ready", or "absent".
func endpointReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, svc, ip string) string {
	t.Helper()
	slices, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return "absent"
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if a == ip {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
						return "ready"
					}
					return "not ready"
				}
			}
		}
	}
	return "absent"
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

// poll checks cond every 200 ms until it holds, failing t after timeout
// (scenario.Poll).
func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := scenario.Poll(ctx, timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// holds checks cond every 200 ms until until, failing t at the first check
// where it does not hold: the counterpart of poll for what must not happen.
func holds(ctx context.Context, t *testing.T, until time.Time, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if !cond() {
			t.Fatalf("%s no longer holds", what)
		}
		if time.Now().After(until) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("checking %s: %v", what, ctx.Err())
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
