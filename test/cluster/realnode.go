package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Real kubelet nodes ("kubelet-N", Options.KubeletNodes) run the upstream
// kubelet with containerd, runc and the CNI bridge, host-local and portmap
// plugins, in a network namespace on the same bridge as the namespace
// nodes, with the same addressing, routes, kube-proxy and fault chains.
// Only the kubelet differs: pods are real containers from the images of
// images.go, imported into each node's containerd without a registry.
//
// What this machine kind needs (measured; see issue 21): one containerd per
// node with its own root, state, socket and runc root, pod network
// namespaces under its state directory, NRI off and restrict_oom_score_adj
// (the VM drops CAP_SYS_RESOURCE, so runc cannot raise oom_score_adj);
// the daemons entered with nsenter, not `ip netns exec`, which remounts
// /sys and hides /sys/fs/cgroup; cgroup v1 with the cgroupfs driver under a
// cgroup root per node, made beforehand in every hierarchy.

// LabelNodeKind value of real kubelet nodes.
const nodeKindKubelet = "kubelet"

// realNode is what the harness keeps of a kubelet node besides its simNode
// entry (name, namespace, addresses), which the fault injection shares.
type realNode struct {
	dir        string // DIR/nodes/<name>
	cgroupRoot string // "/pulselb-<name>", in every cgroup v1 hierarchy
	socket     string // containerd's
	network    string // CNI network name
	shimDir    string // containerd's shim sockets (the path must be short)
	containerd *process
	kubelet    *process
}

// Images every kubelet node has, imported from archives (images.go).
const (
	// PulselbImage is this checkout's pulselb, as the Dockerfile builds it.
	PulselbImage = "pulselb.test/pulselb:dev"
	// KubeletEchoImage runs pulselb-echo on kubelet nodes; unlike the
	// simulator, a kubelet does not derive its ports: give them as args
	// (--tcp=8080 --udp=5353 --name=...).
	KubeletEchoImage = "pulselb.test/echo:dev"
	// PauseImage is the pod sandbox image.
	PauseImage = "pulselb.test/pause:dev"
)

// kernelTunables are the sysctls a kubelet sets on the machine at start
// (protectKernelDefaults false); the harness puts them back on teardown.
var kernelTunables = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// cgroupV1Root is where the v1 hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// addRealNode creates kubelet node name with index index: the namespace
// node's network, then containerd, the images (the harness' own, then the
// multi-platform archives with every platform's content), and a kubelet
// that registers the Node itself.
func (k *kubelet) addRealNode(ctx context.Context, name string, index int, images, multiPlatform []string) error {
	c := k.c
	n := &simNode{
		name: name, index: index, ns: NodeNamespace(name),
		zone:       fmt.Sprintf("zone-%c", 'a'+(index-1)%c.opts.Zones),
		internalIP: nodeInternalIP(index), podCIDR: nodePodCIDR(index),
		usedIPs: map[string]bool{},
	}
	rn := &realNode{
		dir:        filepath.Join(c.Dir, "nodes", name),
		cgroupRoot: "/pulselb-" + name,
		network:    "plt-" + name,
		shimDir:    filepath.Join(stateDir, name),
	}
	rn.socket = filepath.Join(rn.dir, "containerd", "containerd.sock")
	n.real = rn
	if err := c.net.setupNode(ctx, index, n.ns, false); err != nil {
		return err
	}
	if err := k.routeNode(ctx, n); err != nil {
		return err
	}
	// Blackhole and partition cut the node off from everyone but the API
	// server, as on a simulated node whose heartbeats come from the
	// harness: the kubelet's and kube-proxy's own connections (from the
	// node's address) are let through before the fault chains.
	exempt := [][]string{
		{"-t", "raw", "PREROUTING", "-i", "eth0", "-s", bridgeIP, "-d", n.internalIP, "-p", "tcp", "--sport", strconv.Itoa(apiServerPort), "-j", "ACCEPT"},
		{"-t", "mangle", "POSTROUTING", "-o", "eth0", "-s", n.internalIP, "-d", bridgeIP, "-p", "tcp", "--dport", strconv.Itoa(apiServerPort), "-j", "ACCEPT"},
	}
	for _, r := range exempt {
		args := append([]string{"iptables", "-w", r[0], r[1], "-I", r[2], "1"}, r[3:]...)
		if err := nsRun(ctx, n.ns, args...); err != nil {
			return fmt.Errorf("setting up node namespace %s: %w", n.ns, err)
		}
	}
	for _, d := range []string{"containerd", "kubelet", "pod-logs", "cni/net.d", "cni/ipam", "certs"} {
		if err := os.MkdirAll(filepath.Join(rn.dir, d), 0o755); err != nil {
			return fmt.Errorf("creating node dir: %w", err)
		}
	}
	// Everything below is undone by one record item, replayed before the
	// namespace goes: processes in the node's cgroups, mounts under its
	// directory, its cgroups, and what kubelet and CNI leave outside.
	if err := c.rec.add(item{Kind: "kubelet-node", Name: rn.dir, Args: []string{rn.cgroupRoot, rn.network, rn.shimDir}}); err != nil {
		return err
	}
	if err := makeNodeCgroups(rn.cgroupRoot); err != nil {
		return err
	}
	if err := k.startContainerd(ctx, n, rn); err != nil {
		return err
	}
	for i, img := range append(slices.Clone(images), multiPlatform...) {
		args := []string{"--address", rn.socket, "--namespace", "k8s.io", "images", "import", "--local"}
		if i >= len(images) {
			// Only the node's platform is unpacked; which manifest a
			// container runs is the CRI's choice when it creates it.
			args = append(args, "--all-platforms")
		}
		if _, err := output(ctx, filepath.Join(c.bin, "ctr"), append(args, img)...); err != nil {
			return fmt.Errorf("importing %s into node %s: %w", filepath.Base(img), name, err)
		}
	}
	if err := k.startRealKubelet(ctx, n, rn); err != nil {
		return err
	}
	k.mu.Lock()
	k.nodes[name] = n
	k.mu.Unlock()
	if !c.opts.NoKubeProxy {
		return k.startKubeProxy(ctx, n)
	}
	return nil
}

// routeNode routes node n's pod CIDR from every other namespace node and
// the root namespace, and theirs from n.
func (k *kubelet) routeNode(ctx context.Context, n *simNode) error {
	for _, o := range k.nodeList() {
		if o.light {
			continue
		}
		if err := k.c.net.routePodCIDR(ctx, n.ns, o.index); err != nil {
			return err
		}
		if err := k.c.net.routePodCIDR(ctx, o.ns, n.index); err != nil {
			return err
		}
	}
	return k.c.net.routePodCIDR(ctx, "", n.index)
}

// cgroupHierarchies returns the mounted cgroup v1 hierarchies (cpu, memory,
// the named systemd one, ...), or an error on a cgroup v2 machine.
func cgroupHierarchies() ([]string, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(cgroupV1Root, &fs); err != nil {
		return nil, fmt.Errorf("reading %s: %w", cgroupV1Root, err)
	}
	const cgroup2Magic = 0x63677270
	if fs.Type == cgroup2Magic {
		return nil, fmt.Errorf("%s is cgroup v2: kubelet nodes are set up for cgroup v1 machines", cgroupV1Root)
	}
	entries, err := os.ReadDir(cgroupV1Root)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", cgroupV1Root, err)
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupV1Root, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out, nil
}

// makeNodeCgroups creates root and root/system in every hierarchy; cpuset
// groups start empty, so they get the machine's CPUs and memory nodes.
func makeNodeCgroups(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		for _, d := range []string{root, root + "/system"} {
			p := filepath.Join(h, d)
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", p, err)
			}
			if filepath.Base(h) != "cpuset" {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return fmt.Errorf("reading cgroup %s: %w", f, err)
				}
				if err := os.WriteFile(filepath.Join(p, f), b, 0o644); err != nil {
					return fmt.Errorf("writing cgroup %s/%s: %w", p, f, err)
				}
			}
		}
	}
	return nil
}

// joinCgroup moves pid into root/system in every hierarchy: containerd's
// shims and the containers they start inherit it, so teardown finds every
// process of the node in the node's cgroups.
func joinCgroup(root string, pid int) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		p := filepath.Join(h, root, "system", "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving process %d to cgroup %s: %w", pid, p, err)
		}
	}
	return nil
}

// nsenterArgv runs argv in node n's network namespace (not `ip netns exec`:
// it remounts /sys in a private mount namespace, hiding /sys/fs/cgroup).
func nsenterArgv(n *simNode, argv ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + n.ns, "--"}, argv...)
}

// containerdConfig is containerd 2.x's configuration (version 3) for a node.
func containerdConfig(n *simNode, rn *realNode) string {
	d := filepath.Join(rn.dir, "containerd")
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.shim.v1.manager"]
  socket_dir = %[10]q

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = %[6]q
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[7]q

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = %[8]q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni", "/opt/cni/bin"]
    conf_dir = %[9]q
    max_conf_num = 1
`, filepath.Join(d, "root"), filepath.Join(d, "state"), rn.socket, rn.socket+".ttrpc", filepath.Join(d, "opt"),
		n.internalIP, PauseImage, filepath.Join(d, "runc"), filepath.Join(rn.dir, "cni", "net.d"), filepath.Join(rn.shimDir, "s"))
}

// cniConfig is the node's CNI network: pods on the node's bridge cbr0 with
// addresses from its pod CIDR, hostPorts through portmap.
func cniConfig(n *simNode, rn *realNode) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       rn.network,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": filepath.Join(rn.dir, "cni", "ipam"),
					"ranges":  [][]map[string]string{{{"subnet": n.podCIDR, "gateway": nodePodGateway(n.index)}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
}

func (k *kubelet) startContainerd(ctx context.Context, n *simNode, rn *realNode) error {
	c := k.c
	cfgPath := filepath.Join(rn.dir, "containerd.toml")
	if err := os.WriteFile(cfgPath, []byte(containerdConfig(n, rn)), 0o644); err != nil {
		return fmt.Errorf("writing containerd config: %w", err)
	}
	cni, err := cniConfig(n, rn)
	if err != nil {
		return fmt.Errorf("encoding CNI config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(rn.dir, "cni", "net.d", "10-pulselb-test.conflist"), cni, 0o644); err != nil {
		return fmt.Errorf("writing CNI config: %w", err)
	}
	// containerd finds its shim and runc, CNI plugins find iptables, in PATH.
	env := []string{"PATH=" + c.bin + ":" + os.Getenv("PATH")}
	p, err := startProcess(ctx, c.rec, filepath.Join(c.Dir, "logs"), "containerd-"+n.name, "", env,
		nsenterArgv(n, filepath.Join(c.bin, "containerd"), "--config", cfgPath)...)
	if err != nil {
		return err
	}
	rn.containerd = p
	if err := joinCgroup(rn.cgroupRoot, p.cmd.Process.Pid); err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("containerd of node %s exited: %w (see logs/containerd-%s.log)", n.name, p.err, n.name)
		}
		_, err := output(ctx, filepath.Join(c.bin, "ctr"), "--address", rn.socket, "version")
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for containerd of node %s: %w", n.name, err)
	}
	return nil
}

// kubeletConfig is the node's KubeletConfiguration.
func kubeletConfig(c *Cluster, n *simNode, rn *realNode) string {
	// The node lifecycle controller's grace period is short (8 s by
	// default): the Lease is renewed every quarter of its duration.
	lease := max(int(c.opts.NodeGracePeriod.Seconds()), 4)
	extra := ""
	if c.opts.ClusterDNS != "" {
		extra = fmt.Sprintf("clusterDNS: [%q]\n", c.opts.ClusterDNS)
	}
	if sysctls := c.opts.KubeletAllowedUnsafeSysctls[n.name]; len(sysctls) > 0 {
		quoted := make([]string, len(sysctls))
		for i, s := range sysctls {
			quoted[i] = strconv.Quote(s)
		}
		extra += "allowedUnsafeSysctls: [" + strings.Join(quoted, ", ") + "]\n"
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]s
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%[3]s
cgroupDriver: cgroupfs
cgroupRoot: %[4]s
failCgroupV1: false
failSwapOn: false
podLogsDir: %[5]s
resolvConf: ""
clusterDomain: cluster.local
nodeLeaseDurationSeconds: %[6]d
nodeStatusUpdateFrequency: 2s
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
evictionPressureTransitionPeriod: 5s
shutdownGracePeriod: 0s
%[7]s`, n.internalIP, c.cp.pki.path("ca.crt"), rn.socket, rn.cgroupRoot, filepath.Join(rn.dir, "pod-logs"), lease, extra)
}

func (k *kubelet) startRealKubelet(ctx context.Context, n *simNode, rn *realNode) error {
	c := k.c
	// The Node authorizer and NodeRestriction know a kubelet by its
	// certificate: user system:node:<name> in group system:nodes.
	cert := "node-" + n.name
	if err := c.cp.pki.issue(cert, "system:node:"+n.name, []string{"system:nodes"}, nil, nil); err != nil {
		return err
	}
	kubeconfig := filepath.Join(rn.dir, "kubelet.kubeconfig")
	if err := c.cp.writeKubeconfig(kubeconfig, cert); err != nil {
		return err
	}
	cfgPath := filepath.Join(rn.dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(kubeletConfig(c, n, rn)), 0o644); err != nil {
		return fmt.Errorf("writing kubelet config: %w", err)
	}
	// The kubelet sets a few kernel tunables machine-wide; put them back.
	for _, key := range kernelTunables {
		v, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
		if err != nil {
			continue
		}
		if err := c.rec.add(item{Kind: "command", Args: []string{"sysctl", "-q", "-w", key + "=" + strings.TrimSpace(string(v))}}); err != nil {
			return err
		}
	}
	labels := LabelZone + "=" + n.zone + "," + LabelNodeKind + "=" + nodeKindKubelet
	env := []string{"PATH=" + c.bin + ":" + os.Getenv("PATH")}
	p, err := startProcess(ctx, c.rec, filepath.Join(c.Dir, "logs"), "kubelet-"+n.name, "", env,
		nsenterArgv(n, filepath.Join(c.bin, "kubelet"),
			"--config="+cfgPath,
			"--kubeconfig="+kubeconfig,
			"--root-dir="+filepath.Join(rn.dir, "kubelet"),
			"--cert-dir="+filepath.Join(rn.dir, "certs"),
			"--hostname-override="+n.name,
			"--node-ip="+n.internalIP,
			"--node-labels="+labels,
			"--v=1")...)
	if err != nil {
		return err
	}
	rn.kubelet = p
	if err := joinCgroup(rn.cgroupRoot, p.cmd.Process.Pid); err != nil {
		return err
	}
	klog.FromContext(ctx).V(1).Info("Started kubelet node", "node", n.name, "dir", rn.dir)
	return nil
}

// teardownKubeletNode removes what a kubelet node leaves once its kubelet
// and containerd are gone: the processes in its cgroups (shims,
// containers), every mount under its directory (container root
// filesystems, pod network namespaces), its cgroups, the kubelet's links
// in /var/log/containers, CNI's result cache in /var/lib/cni and the shim
// sockets' directory. The
// node's logs stay; containerd's and the kubelet's state go.
func teardownKubeletNode(ctx context.Context, it item) error {
	if len(it.Args) != 3 || !strings.HasPrefix(it.Args[0], "/pulselb-") || !strings.HasPrefix(it.Args[2], stateDir+"/") {
		return fmt.Errorf("kubelet node record %v: want [cgroup root, CNI network, shim socket dir]", it.Args)
	}
	dir, root, network, shimDir := it.Name, it.Args[0], it.Args[1], it.Args[2]
	var errs []error
	// On a machine where the node never got its cgroups (cgroup v2: Start
	// failed), there are none to empty; the rest is still removed.
	hs, _ := cgroupHierarchies()
	procs := func() []int {
		var pids []int
		for _, h := range hs {
			_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil //nolint:nilerr // a cgroup removed while walking
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids = append(pids, pid)
					}
				}
				return nil
			})
		}
		return pids
	}
	if err := poll(ctx, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		pids := procs()
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0, nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("killing the processes of %s: %w", root, err))
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first: a cgroup with children cannot be removed.
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	if links, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, l := range links {
			p := filepath.Join("/var/log/containers", l.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
	// Result files are named <network>-<sandbox ID>-<interface>; the
	// sandbox's loopback is containerd's network cni-loopback.
	if cached, err := filepath.Glob(filepath.Join("/var/lib/cni/results", network+"-*")); err == nil {
		for _, p := range cached {
			id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), network+"-"), "-eth0")
			_ = os.Remove(filepath.Join("/var/lib/cni/results", "cni-loopback-"+id+"-lo"))
			_ = os.Remove(p)
		}
	}
	for _, d := range []string{filepath.Join(dir, "containerd"), filepath.Join(dir, "kubelet"), filepath.Join(dir, "cni"), shimDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing node state: %w", err))
		}
	}
	klog.FromContext(ctx).V(2).Info("Tore down kubelet node", "dir", dir)
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// stop stops the kubelet, then containerd; their containers run on until
// teardown kills what is left in the node's cgroups.
func (rn *realNode) stop() {
	if rn.kubelet != nil {
		_ = rn.kubelet.stop(5 * time.Second)
	}
	if rn.containerd != nil {
		_ = rn.containerd.stop(5 * time.Second)
	}
}

// podPID returns a process of the pod with uid on kubelet node rn (its
// sandbox or a container: they share the pod's network namespace), found
// in the pod's cgroup pod<uid>.
func (rn *realNode) podPID(uid string) (int, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return 0, err
	}
	for _, h := range hs {
		if filepath.Base(h) != "pids" {
			continue
		}
		pid := 0
		_ = filepath.WalkDir(filepath.Join(h, rn.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil || pid != 0 || d.IsDir() || d.Name() != "cgroup.procs" || !strings.Contains(p, "/pod"+uid+"/") {
				return nil //nolint:nilerr // a cgroup removed while walking
			}
			b, _ := os.ReadFile(p)
			if f := strings.Fields(string(b)); len(f) > 0 {
				pid, _ = strconv.Atoi(f[0])
			}
			return nil
		})
		if pid != 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of pod %s in cgroup %s", uid, rn.cgroupRoot)
}

// realPodExec runs argv in the network namespace of a pod on a kubelet
// node, entered through one of its processes.
func (c *Cluster) realPodExec(ctx context.Context, namespace, pod string, argv ...string) ([]byte, error) {
	p, err := c.kubelet.podLister.Pods(namespace).Get(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, pod, err)
	}
	n, err := c.kubelet.node(p.Spec.NodeName)
	if err != nil || n.real == nil {
		return nil, fmt.Errorf("pod %s/%s is not running on a namespace or kubelet node", namespace, pod)
	}
	pid, err := n.real.podPID(string(p.UID))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", "--"}, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("running %v in pod %s/%s: %w", argv, namespace, pod, err)
	}
	return out, nil
}

// realContainerLog returns what a container of a pod on a kubelet node
// wrote, over all its restarts, from the kubelet's pod log directory
// (CRI format: time, stream and tag before each line, which are dropped).
func (c *Cluster) realContainerLog(namespace, pod, container string) ([]byte, error) {
	p, err := c.kubelet.podLister.Pods(namespace).Get(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, pod, err)
	}
	n, err := c.kubelet.node(p.Spec.NodeName)
	if err != nil || n.real == nil {
		return nil, fmt.Errorf("pod %s/%s is not on a kubelet node", namespace, pod)
	}
	dir := filepath.Join(n.real.dir, "pod-logs", fmt.Sprintf("%s_%s_%s", namespace, pod, p.UID), container)
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no log of %s/%s/%s in %s", namespace, pod, container, dir)
	}
	restart := func(p string) int {
		i, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".log"))
		return i
	}
	sort.Slice(files, func(i, j int) bool { return restart(files[i]) < restart(files[j]) })
	var out []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading log of %s/%s/%s: %w", namespace, pod, container, err)
		}
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if fields := strings.SplitN(line, " ", 4); len(fields) == 4 {
				out = append(out, fields[3]...)
			}
		}
	}
	return out, nil
}

// kubeletLeftovers lists what kubelet nodes of the cluster in dir left on
// the machine: processes started from the node directories (shims,
// containerd), mounts under dir, node cgroups, kubelet log links, CNI
// results and shim socket directories.
func kubeletLeftovers(dir string) []string {
	var left []string
	if procs, err := os.ReadDir("/proc"); err == nil {
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmd, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
			if strings.Contains(string(cmd), dir+"/nodes/") {
				left = append(left, fmt.Sprintf("process %d %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(unescapeMount(f[4]), dir+"/") {
				left = append(left, "mount "+f[4])
			}
		}
	}
	hs, _ := cgroupHierarchies()
	for _, h := range hs {
		if m, _ := filepath.Glob(filepath.Join(h, "pulselb-kubelet-*")); len(m) > 0 {
			left = append(left, m...)
		}
	}
	if links, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, l := range links {
			if target, err := os.Readlink(filepath.Join("/var/log/containers", l.Name())); err == nil && strings.HasPrefix(target, dir+"/") {
				left = append(left, "log link "+l.Name())
			}
		}
	}
	for _, pattern := range []string{"/var/lib/cni/results/plt-kubelet-*", filepath.Join(stateDir, "kubelet-*")} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			left = append(left, m...)
		}
	}
	return left
}
