package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// podRuntime is a pod running on a simulated node.
type podRuntime struct {
	k     *kubelet
	key   string
	uid   types.UID
	node  *simNode
	netns string // the pod's namespace, or the node's for hostNetwork pods
	ownNS bool
	// hostVeth is the node's end of the veth of a pod with its own namespace.
	hostVeth string
	ip       string
	since    metav1.Time
	cancel   context.CancelFunc
	done     chan struct{}
	// terminating is closed when the pod's termination begins, kill when
	// its grace period ends (see terminate.go).
	terminating, kill chan struct{}
	killOnce          sync.Once

	mu         sync.Mutex
	initDone   bool
	containers map[string]*containerState
	hostPorts  [][]string // iptables rules to delete
	killAt     time.Time  // when SIGKILL is due; zero until termination begins
	killTimer  *time.Timer
	terminal   bool // every container exited after termination began
}

// containerState is what the status of one container reports.
type containerState struct {
	init      bool
	running   bool
	finished  bool
	exitCode  int32
	restarts  int32
	startedAt metav1.Time
	lastExit  *corev1.ContainerStateTerminated
	proc      *process
	// started and ready are the startup and readiness probes' results for
	// the running instance (true without such a probe).
	started, ready bool
	// killedBy says which probe stopped the running instance, if one did.
	killedBy string
	// waiting explains why a container is not started yet
	// (CreateContainerConfigError and its message).
	waitingReason, waitingMessage string
}

func (k *kubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.syncPod(ctx, key); err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Pod sync failed, retrying", "pod", key, "err", err)
			k.queue.AddRateLimited(key)
		}
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *kubelet) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil //nolint:nilerr // a malformed key never becomes valid
	}
	pod, err := k.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		k.mu.Lock()
		uid, ok := k.podKeys[key]
		k.mu.Unlock()
		if ok {
			k.removeRuntime(ctx, uid)
		}
		return nil
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	n := k.nodes[pod.Spec.NodeName]
	rt := k.pods[pod.UID]
	if oldUID, ok := k.podKeys[key]; ok && oldUID != pod.UID {
		// A new pod with the name of an old one (StatefulSet, manual).
		k.mu.Unlock()
		k.removeRuntime(ctx, oldUID)
		k.mu.Lock()
	}
	k.mu.Unlock()
	if n == nil || n.real != nil {
		return nil // not ours, or a real kubelet's
	}
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		return nil // a dead node's kubelet does nothing
	}
	if pod.DeletionTimestamp != nil {
		if rt != nil {
			k.terminate(ctx, pod, rt)
			return k.updateStatus(ctx, pod, rt)
		}
		// Never started here, or already torn down.
		err := k.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptrInt64(0),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting pod %s: %w", key, err)
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	if rt == nil {
		if rt, err = k.startPod(ctx, n, pod); err != nil {
			return err
		}
	}
	return k.updateStatus(ctx, pod, rt)
}

func ptrInt64(v int64) *int64 { return &v }

// removeRuntime stops a pod's processes and removes its namespace.
func (k *kubelet) removeRuntime(ctx context.Context, uid types.UID) {
	k.mu.Lock()
	rt := k.pods[uid]
	delete(k.pods, uid)
	if rt != nil && k.podKeys[rt.key] == uid {
		delete(k.podKeys, rt.key)
	}
	k.mu.Unlock()
	if rt != nil {
		rt.stop(ctx)
	}
}

// startPod sets up a pod's network and starts its containers.
func (k *kubelet) startPod(ctx context.Context, n *simNode, pod *corev1.Pod) (*podRuntime, error) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", n.name)
	key := pod.Namespace + "/" + pod.Name
	rctx, cancel := context.WithCancel(ctx)
	rt := &podRuntime{
		k: k, key: key, uid: pod.UID, node: n, since: metav1.Now(), cancel: cancel, done: make(chan struct{}),
		terminating: make(chan struct{}), kill: make(chan struct{}),
		containers: map[string]*containerState{},
	}
	for _, c := range pod.Spec.InitContainers {
		rt.containers[c.Name] = &containerState{init: true}
	}
	for _, c := range pod.Spec.Containers {
		rt.containers[c.Name] = &containerState{}
	}
	switch {
	case n.light:
		k.mu.Lock()
		rt.ip = lightPodIP(k.lightNext)
		k.lightNext++
		k.mu.Unlock()
		if pod.Spec.HostNetwork {
			rt.ip = n.internalIP4
		}
	case pod.Spec.HostNetwork:
		rt.netns, rt.ip = n.ns, n.internalIP4
	default:
		ip, err := n.allocateIP()
		if err != nil {
			cancel()
			return nil, err
		}
		rt.ip, rt.ownNS = ip, true
		id := strings.ReplaceAll(string(pod.UID), "-", "")
		rt.netns, rt.hostVeth = "plt-p-"+id[:12], "vp"+id[:10]
		if err := k.c.net.setupPod(ctx, n.ns, n.index, rt.netns, rt.hostVeth, ip); err != nil {
			_ = removePod(ctx, n.ns, rt.hostVeth, rt.netns)
			n.releaseIP(ip)
			cancel()
			return nil, err
		}
		if k.c.opts.hasIPv6() {
			if err := setupPod6(ctx, n.index, rt.netns, ip); err != nil {
				_ = removePod(ctx, n.ns, rt.hostVeth, rt.netns)
				n.releaseIP(ip)
				cancel()
				return nil, err
			}
		}
		if err := rt.mapHostPorts(ctx, pod); err != nil {
			close(rt.done) // no container ran: stop must not wait for them
			rt.stop(ctx)
			return nil, err
		}
	}
	k.mu.Lock()
	k.pods[pod.UID] = rt
	k.podKeys[key] = pod.UID
	k.mu.Unlock()
	logger.V(2).Info("Started pod", "ip", rt.ip)
	go func() {
		defer close(rt.done)
		rt.run(rctx, pod.DeepCopy())
	}()
	return rt, nil
}

func (n *simNode) allocateIP() (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := 2; i < 255; i++ {
		ip := fmt.Sprintf("198.18.%d.%d", 128+n.index, i)
		if !n.usedIPs[ip] {
			n.usedIPs[ip] = true
			return ip, nil
		}
	}
	return "", fmt.Errorf("node %s: pod CIDR %s exhausted", n.name, n.podCIDR)
}

func (n *simNode) releaseIP(ip string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.usedIPs, ip)
}

// mapHostPorts DNATs the pod's hostPorts on the node, like CNI portmap.
func (rt *podRuntime) mapHostPorts(ctx context.Context, pod *corev1.Pod) error {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			for _, ip := range rt.podIPs() {
				rule := []string{"-t", "nat", "PLT-HOSTPORTS", "-p", proto, "--dport", strconv.Itoa(int(p.HostPort)),
					"-m", "comment", "--comment", rt.key, "-j", "DNAT", "--to-destination", net.JoinHostPort(ip, strconv.Itoa(int(p.ContainerPort)))}
				tool := iptablesFor(ip)
				add := append([]string{tool, "-w", rule[0], rule[1], "-A"}, rule[2:]...)
				if err := nsRun(ctx, rt.node.ns, add...); err != nil {
					return fmt.Errorf("mapping hostPort %d: %w", p.HostPort, err)
				}
				rt.mu.Lock()
				rt.hostPorts = append(rt.hostPorts, append([]string{tool, "-w", rule[0], rule[1], "-D"}, rule[2:]...))
				rt.mu.Unlock()
			}
		}
	}
	return nil
}

// stop ends the pod's containers, at once unless they have exited
// already, and removes its network.
func (rt *podRuntime) stop(ctx context.Context) {
	rt.beginTermination(0)
	rt.cancel()
	<-rt.done
	rt.mu.Lock()
	rules := rt.hostPorts
	rt.hostPorts = nil
	rt.mu.Unlock()
	for _, r := range rules {
		_ = nsRun(ctx, rt.node.ns, r...)
	}
	if rt.ownNS {
		// The address is free again only once no namespace answers at it.
		if err := removePod(ctx, rt.node.ns, rt.hostVeth, rt.netns, rt.podIPs()...); err != nil {
			klog.FromContext(ctx).Error(err, "Removing pod network", "pod", rt.key)
		}
		rt.node.releaseIP(rt.ip)
	}
	if err := os.RemoveAll(filepath.Join(rt.k.c.Dir, "pods", string(rt.uid))); err != nil {
		klog.FromContext(ctx).Error(err, "Removing pod volumes", "pod", rt.key)
	}
}

// run runs init containers one after another, then the containers, each
// restarted with backoff per the restart policy, until ctx ends.
func (rt *podRuntime) run(ctx context.Context, pod *corev1.Pod) {
	notify := func() { rt.k.queue.Add(rt.key) }
	if rt.node.light {
		rt.mu.Lock()
		rt.initDone = true
		for _, c := range pod.Spec.InitContainers {
			rt.containers[c.Name].finished = true
		}
		for _, c := range pod.Spec.Containers {
			st := rt.containers[c.Name]
			st.running, st.startedAt, st.started, st.ready = true, metav1.Now(), true, true
		}
		rt.mu.Unlock()
		notify()
		select {
		case <-ctx.Done():
		case <-rt.terminating:
		}
		rt.mu.Lock()
		for _, c := range pod.Spec.Containers {
			st := rt.containers[c.Name]
			st.running, st.finished, st.ready = false, true, false
			st.lastExit = &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: st.startedAt, FinishedAt: metav1.Now()}
		}
		rt.mu.Unlock()
		notify()
		return
	}
	for _, c := range pod.Spec.InitContainers {
		for {
			code, ok := rt.runOnce(ctx, pod, c, true, notify)
			if !ok {
				return
			}
			if code == 0 {
				break
			}
			if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
				return
			}
			if !rt.backoff(ctx, rt.restarts(c.Name)) {
				return
			}
		}
	}
	rt.mu.Lock()
	rt.initDone = true
	rt.mu.Unlock()
	notify()
	var wg sync.WaitGroup
	for _, c := range pod.Spec.Containers {
		wg.Go(func() {
			for {
				code, ok := rt.runOnce(ctx, pod, c, false, notify)
				if !ok {
					return
				}
				switch pod.Spec.RestartPolicy {
				case corev1.RestartPolicyNever:
					return
				case corev1.RestartPolicyOnFailure:
					if code == 0 {
						return
					}
				}
				if !rt.backoff(ctx, rt.restarts(c.Name)) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func (rt *podRuntime) restarts(container string) int32 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.containers[container].restarts
}

// backoff waits before restart n+1, up to 10 s; false when ctx ended or
// the pod is terminating.
func (rt *podRuntime) backoff(ctx context.Context, restarts int32) bool {
	d := time.Duration(1<<min(restarts, 4)) * 500 * time.Millisecond
	select {
	case <-ctx.Done():
		return false
	case <-rt.terminating:
		return false
	case <-time.After(min(d, 10*time.Second)):
		return true
	}
}

// runOnce runs a container until it exits or ctx ends. ok is false when
// ctx ended or the pod is terminating: a terminating pod's containers get
// SIGTERM, SIGKILL when its grace period ends, and are not restarted; none
// starts once termination began. A container whose configuration cannot
// be built (a missing ConfigMap, Secret or volume) waits, like the kubelet's
// CreateContainerConfigError, and is retried without counting a restart.
func (rt *podRuntime) runOnce(ctx context.Context, pod *corev1.Pod, c corev1.Container, init bool, notify func()) (code int32, ok bool) {
	logger := klog.FromContext(ctx).WithValues("pod", rt.key, "container", c.Name)
	st := rt.containers[c.Name]
	var argv, env []string
	for {
		var err error
		if argv, env, err = rt.command(ctx, pod, c); err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, false
		}
		logger.V(2).Info("Container configuration not ready", "err", err)
		rt.mu.Lock()
		changed := st.waitingMessage != err.Error()
		st.waitingReason, st.waitingMessage = "CreateContainerConfigError", err.Error()
		rt.mu.Unlock()
		if changed {
			notify()
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-rt.terminating:
			return 0, false
		case <-time.After(time.Second):
		}
	}
	if rt.isTerminating() {
		return 0, false
	}
	name := fmt.Sprintf("pod-%s-%s-%s", pod.Namespace, pod.Name, c.Name)
	p, err := startCommand(ctx, rt.k.c.rec, filepath.Join(rt.k.c.Dir, "logs"), name, env, argv...)
	if err != nil {
		logger.Error(err, "Starting container")
		rt.mu.Lock()
		st.running, st.finished, st.exitCode = false, true, 128
		st.waitingReason, st.waitingMessage = "", ""
		st.restarts++
		rt.mu.Unlock()
		notify()
		return 128, ctx.Err() == nil
	}
	rt.mu.Lock()
	st.proc, st.running, st.finished, st.startedAt = p, true, false, metav1.Now()
	st.started, st.ready, st.killedBy = c.StartupProbe == nil, c.ReadinessProbe == nil, ""
	st.waitingReason, st.waitingMessage = "", ""
	rt.mu.Unlock()
	notify()
	probeCtx, stopProbes := context.WithCancel(ctx)
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		if !init {
			rt.runProbes(probeCtx, pod, c, st, p, env, notify)
		}
	}()
	defer func() {
		stopProbes()
		<-probesDone
	}()
	select {
	case <-p.done:
	case <-rt.terminating:
		_ = p.stopWhen(rt.kill)
	case <-ctx.Done():
		_ = p.stopWhen(closedChan)
		return 0, false
	}
	code = exitCode(p)
	terminating := rt.isTerminating()
	logger.V(2).Info("Container exited", "exitCode", code, "terminating", terminating)
	rt.mu.Lock()
	st.running, st.finished, st.exitCode, st.ready = false, true, code, false
	st.lastExit = &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: st.startedAt, FinishedAt: metav1.Now(), Reason: reason(code), Message: st.killedBy}
	if !terminating && (!init || code != 0) {
		st.restarts++
	}
	rt.mu.Unlock()
	notify()
	return code, ctx.Err() == nil && !terminating
}

// exitCode is a finished process' exit code, 128+signal when a signal
// ended it, as container runtimes report it.
func exitCode(p *process) int32 {
	ps := p.cmd.ProcessState
	if ps == nil {
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ps.ExitCode())
}

func reason(code int32) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}

func ptrOr(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// command returns the argv and environment of a container: the pulselb
// binary for images whose name contains "pulselb", else the echo backend
// on the container's ports.
func (rt *podRuntime) command(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]string, []string, error) {
	bin := rt.k.c.bin
	env, err := rt.env(ctx, pod, c)
	if err != nil {
		return nil, nil, err
	}
	vars := map[string]string{}
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok {
			vars[k] = v
		}
	}
	expand := func(s string) string {
		return varRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := vars[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	var argv []string
	if strings.Contains(c.Image, "pulselb") {
		args := append(append([]string{}, c.Command...), c.Args...)
		if len(c.Command) > 0 && strings.Contains(filepath.Base(c.Command[0]), "pulselb") {
			args = args[1:]
		}
		exe := filepath.Join(bin, "pulselb")
		if _, err := os.Stat(exe); err != nil {
			why, _ := os.ReadFile(filepath.Join(bin, pulselbBuildError))
			return nil, nil, fmt.Errorf("no pulselb binary in %s: %s", bin, why)
		}
		argv = []string{exe}
		for _, a := range args {
			argv = append(argv, expand(a))
		}
	} else {
		argv = append([]string{filepath.Join(bin, "pulselb-echo")}, echoArgs(pod, c)...)
	}
	if rt.netns != "" {
		argv = append([]string{"ip", "netns", "exec", rt.netns}, argv...)
	}
	w := &volumeWriter{client: rt.k.client, pod: pod, podIP: rt.podIPs()[0], hostIP: rt.node.internalIP,
		dir: filepath.Join(rt.k.c.Dir, "pods", string(pod.UID), "volumes")}
	mounts, err := w.mounts(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if !mountsServiceAccount(mounts) {
		// Without the API server's projected token volume (an admission
		// plugin adds it), pulselb containers still get a token.
		if sa, ok, err := rt.serviceAccountDir(ctx, pod, c); err != nil {
			return nil, nil, err
		} else if ok {
			mounts = append(mounts, bindMount{src: sa, dst: saMountPath, readOnly: true})
		}
	}
	// A private mount namespace per container shows its volumes at their
	// mount paths. The shell that mounts them drops variables whose names
	// are not shell identifiers (the API allows them): env restores them.
	if len(mounts) > 0 {
		if odd := nonShellEnv(env); len(odd) > 0 {
			argv = append(append([]string{"env"}, odd...), argv...)
		}
	}
	if argv, err = withMounts(rt.k.c.rec, mounts, argv); err != nil {
		return nil, nil, err
	}
	return argv, env, nil
}

var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// nonShellEnv returns the NAME=value entries whose names a shell would not
// pass on.
func nonShellEnv(env []string) []string {
	var out []string
	for _, e := range env {
		if name, _, _ := strings.Cut(e, "="); !shellName.MatchString(name) {
			out = append(out, e)
		}
	}
	return out
}

func echoArgs(pod *corev1.Pod, c corev1.Container) []string {
	var tcp, udp []string
	for _, p := range c.Ports {
		if p.Protocol == corev1.ProtocolUDP {
			udp = append(udp, strconv.Itoa(int(p.ContainerPort)))
		} else {
			tcp = append(tcp, strconv.Itoa(int(p.ContainerPort)))
		}
	}
	if len(tcp) == 0 && len(udp) == 0 {
		tcp = []string{"8080"}
	}
	args := []string{"--name=" + pod.Namespace + "/" + pod.Name}
	if len(tcp) > 0 {
		args = append(args, "--tcp="+strings.Join(tcp, ","))
	}
	if len(udp) > 0 {
		args = append(args, "--udp="+strings.Join(udp, ","))
	}
	return args
}

// env is the container's environment as a kubelet builds it.
func (rt *podRuntime) env(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]string, error) {
	out := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOSTNAME=" + pod.Name,
		"KUBERNETES_SERVICE_HOST=" + rt.k.c.opts.apiServiceIP(),
		"KUBERNETES_SERVICE_PORT=443",
		"KUBERNETES_SERVICE_PORT_HTTPS=443",
		"KUBERNETES_PORT=tcp://" + net.JoinHostPort(rt.k.c.opts.apiServiceIP(), "443"),
	}
	cs := rt.k.client.CoreV1()
	for _, ef := range c.EnvFrom {
		var data map[string]string
		switch {
		case ef.ConfigMapRef != nil:
			cm, err := cs.ConfigMaps(pod.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptrOrBool(ef.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("reading configmap %s: %w", ef.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case ef.SecretRef != nil:
			s, err := cs.Secrets(pod.Namespace).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptrOrBool(ef.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("reading secret %s: %w", ef.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for _, k := range sortedKeys(data) {
			out = append(out, ef.Prefix+k+"="+data[k])
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			switch {
			case f.FieldRef != nil:
				v = rt.field(pod, f.FieldRef.FieldPath)
			case f.ConfigMapKeyRef != nil:
				cm, err := cs.ConfigMaps(pod.Namespace).Get(ctx, f.ConfigMapKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					if apierrors.IsNotFound(err) && ptrOrBool(f.ConfigMapKeyRef.Optional) {
						continue
					}
					return nil, fmt.Errorf("reading configmap %s: %w", f.ConfigMapKeyRef.Name, err)
				}
				v = cm.Data[f.ConfigMapKeyRef.Key]
			case f.SecretKeyRef != nil:
				s, err := cs.Secrets(pod.Namespace).Get(ctx, f.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					if apierrors.IsNotFound(err) && ptrOrBool(f.SecretKeyRef.Optional) {
						continue
					}
					return nil, fmt.Errorf("reading secret %s: %w", f.SecretKeyRef.Name, err)
				}
				v = string(s.Data[f.SecretKeyRef.Key])
			case f.ResourceFieldRef != nil:
				container := f.ResourceFieldRef.ContainerName
				if container == "" {
					container = c.Name
				}
				var err error
				if v, err = resourceValue(pod, container, f.ResourceFieldRef); err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
			}
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

func ptrOrBool(p *bool) bool { return p != nil && *p }

// field resolves a downward-API field path for the environment.
func (rt *podRuntime) field(pod *corev1.Pod, path string) string {
	return downwardField(pod, rt.podIPs()[0], rt.node.internalIP, path, false)
}

// updateStatus writes the pod status the runtime reports when it differs.
func (k *kubelet) updateStatus(ctx context.Context, pod *corev1.Pod, rt *podRuntime) error {
	st := rt.status(pod)
	if equality.Semantic.DeepEqual(&pod.Status, st) {
		return nil
	}
	p := pod.DeepCopy()
	p.Status = *st
	_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// The cache lags behind the scheduler's binding or another write:
		// once more from the latest version.
		fresh, gerr := k.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil || fresh.UID != pod.UID {
			return nil // gone or replaced: the next event syncs it
		}
		fresh.Status = *rt.status(fresh)
		_, err = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{})
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("updating status of pod %s: %w", rt.key, err)
	}
	return nil
}

func (rt *podRuntime) status(pod *corev1.Pod) *corev1.PodStatus {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st := pod.Status.DeepCopy()
	st.HostIP, st.HostIPs = rt.node.internalIP, nil
	for _, ip := range rt.k.c.opts.byFamily(rt.node.internalIP4, rt.node.internalIP6) {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	ips := rt.podIPs()
	st.PodIP, st.PodIPs = ips[0], nil
	for _, ip := range ips {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	st.StartTime = &rt.since
	terminating := !rt.killAt.IsZero()
	cstatus := func(c corev1.Container) corev1.ContainerStatus {
		s := rt.containers[c.Name]
		cs := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image,
			ContainerID:  fmt.Sprintf("pulselb-test://%s/%s", rt.uid, c.Name),
			RestartCount: s.restarts,
			Ready:        s.running && !s.init && s.started && s.ready,
			Started:      ptrBool(s.running && s.started),
		}
		switch {
		case s.waitingReason != "":
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: s.waitingReason, Message: s.waitingMessage}
		case s.running:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: s.startedAt}
		case s.finished && terminating && s.lastExit != nil && !s.init:
			// Stopped for good: not waiting for a restart.
			cs.State.Terminated = s.lastExit.DeepCopy()
			return cs
		case s.finished && s.init && s.exitCode == 0:
			cs.Ready = true
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: s.startedAt}
			if s.lastExit != nil {
				cs.State.Terminated.FinishedAt = s.lastExit.FinishedAt
			}
		case s.finished:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		}
		if s.lastExit != nil && !(s.init && s.finished && s.exitCode == 0) {
			cs.LastTerminationState.Terminated = s.lastExit
		}
		return cs
	}
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, cstatus(c))
	}
	st.ContainerStatuses = nil
	allReady := len(pod.Spec.Containers) > 0
	for _, c := range pod.Spec.Containers {
		cs := cstatus(c)
		allReady = allReady && cs.Ready
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	st.Phase = corev1.PodPending
	if rt.initDone {
		st.Phase = corev1.PodRunning
	}
	if rt.terminal {
		// Like the kubelet, a deleted pod whose containers all stopped
		// ends in a terminal phase before its object goes: Succeeded when
		// every container exited 0.
		st.Phase = corev1.PodSucceeded
		for _, c := range pod.Spec.Containers {
			if s := rt.containers[c.Name]; !rt.initDone || s.lastExit == nil || s.lastExit.ExitCode != 0 {
				st.Phase = corev1.PodFailed
			}
		}
	}
	setCond := func(t corev1.PodConditionType, ok bool) {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != s {
					st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = s, metav1.Now()
				}
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.Now()})
	}
	setCond(corev1.PodReadyToStartContainers, true)
	setCond(corev1.PodInitialized, rt.initDone)
	// Like the kubelet, Ready also waits for the pod's readiness gates,
	// conditions other controllers set.
	gatesOK := true
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range st.Conditions {
			ok = ok || (c.Type == g.ConditionType && c.Status == corev1.ConditionTrue)
		}
		gatesOK = gatesOK && ok
	}
	setCond(corev1.ContainersReady, rt.initDone && allReady)
	setCond(corev1.PodReady, rt.initDone && allReady && gatesOK)
	return st
}

func ptrBool(b bool) *bool { return &b }
