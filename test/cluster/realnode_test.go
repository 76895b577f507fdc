package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/a":                "/tmp/a",
		`/tmp/with\040space`:    "/tmp/with space",
		`/tmp/tab\011and\134bs`: "/tmp/tab\tand\\bs",
		`/tmp/trailing\04`:      `/tmp/trailing\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTeardownKubeletNodeRejectsForeignRecords checks a damaged or foreign
// record never makes teardown kill the processes of, or remove, another
// cgroup or directory.
func TestTeardownKubeletNodeRejectsForeignRecords(t *testing.T) {
	for name, args := range map[string][]string{
		"short":               {"/pulselb-kubelet-1", "plt-kubelet-1"},
		"machine cgroup root": {"/", "plt-kubelet-1", stateDir + "/kubelet-1"},
		"system cgroup":       {"/system.slice", "plt-kubelet-1", stateDir + "/kubelet-1"},
		"shim dir elsewhere":  {"/pulselb-kubelet-1", "plt-kubelet-1", "/run/containerd"},
	} {
		t.Run(name, func(t *testing.T) {
			err := teardownKubeletNode(context.Background(), item{Kind: "kubelet-node", Name: t.TempDir(), Args: args})
			if err == nil || !strings.Contains(err.Error(), "kubelet node record") {
				t.Errorf("teardown of %v = %v, want a record error", args, err)
			}
		})
	}
}

// TestNodeConfigs checks what each node's containerd and CNI get is the
// node's own: socket, state, runc root, pod CIDR, the pause image.
func TestNodeConfigs(t *testing.T) {
	n := &simNode{name: "kubelet-2", index: 5, internalIP: nodeInternalIP(5), podCIDR: nodePodCIDR(5)}
	rn := &realNode{dir: "/tmp/c/nodes/kubelet-2", cgroupRoot: "/pulselb-kubelet-2", network: "plt-kubelet-2",
		socket: "/tmp/c/nodes/kubelet-2/containerd/containerd.sock", shimDir: stateDir + "/kubelet-2"}
	cfg := containerdConfig(n, rn)
	for _, want := range []string{
		`address = "/tmp/c/nodes/kubelet-2/containerd/containerd.sock"`,
		`state = "/tmp/c/nodes/kubelet-2/containerd/state"`,
		`Root = "/tmp/c/nodes/kubelet-2/containerd/runc"`,
		`socket_dir = "` + stateDir + `/kubelet-2/s"`,
		`sandbox = "` + PauseImage + `"`,
		"netns_mounts_under_state_dir = true",
		"restrict_oom_score_adj = true",
		`disabled_plugins = ["io.containerd.nri.v1.nri"]`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, cfg)
		}
	}
	b, err := cniConfig(n, rn)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name    string `json:"name"`
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				DataDir string                `json:"dataDir"`
				Ranges  [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Name != "plt-kubelet-2" || len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("CNI config %s: want network plt-kubelet-2 with bridge and portmap", b)
	}
	if r := conf.Plugins[0].IPAM.Ranges; len(r) != 1 || r[0][0]["subnet"] != "198.18.133.0/24" || r[0][0]["gateway"] != "198.18.133.1" {
		t.Errorf("ranges %v, want the node's pod CIDR 198.18.133.0/24", r)
	}
	if !strings.HasPrefix(conf.Plugins[0].IPAM.DataDir, rn.dir+"/") {
		t.Errorf("host-local dataDir %s outside the node directory", conf.Plugins[0].IPAM.DataDir)
	}
}
