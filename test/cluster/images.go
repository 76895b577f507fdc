package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pulselb/pulselb/test/image"
)

// debianPath is the PATH of a Debian image.
const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// writeImages writes the archives of the kubelet nodes' images into
// dir/images and returns their paths:
//   - PulselbImage: the Dockerfile's runtime stage (Debian 12 with iptables,
//     --no-install-recommends) made from this machine's Debian packages,
//     the static pulselb binary at /pulselb, user 65532;
//   - KubeletEchoImage: the static pulselb-echo, user 65532;
//   - PauseImage: the static pulselb-pause, user 65535 as upstream's;
//
// and extra, each in an archive of its own.
func writeImages(dir, bin string, extra ...image.Image) ([]string, error) {
	static := filepath.Join(bin, "static")
	pulselb, err := image.StaticBinary(filepath.Join(static, "pulselb"), "/pulselb")
	if err != nil {
		return nil, err
	}
	echo, err := image.StaticBinary(filepath.Join(static, "pulselb-echo"), "/pulselb-echo")
	if err != nil {
		return nil, err
	}
	pause, err := image.StaticBinary(filepath.Join(static, "pulselb-pause"), "/pause")
	if err != nil {
		return nil, err
	}
	iptables, err := image.DebianPackages("iptables")
	if err != nil {
		return nil, fmt.Errorf("collecting the pulselb image's iptables: %w", err)
	}
	base := []image.File{{Path: "/tmp", Dir: true, Mode: 0o1777}, {Path: "/run", Dir: true, Mode: 0o755}}
	images := []image.Image{
		{Name: PulselbImage, Entrypoint: []string{"/pulselb"}, User: "65532:65532", Env: []string{debianPath},
			Files: append(append([]image.File{pulselb}, base...), iptables...)},
		{Name: KubeletEchoImage, Entrypoint: []string{"/pulselb-echo"}, User: "65532:65532", Env: []string{debianPath},
			Files: append([]image.File{echo}, base...)},
		{Name: PauseImage, Entrypoint: []string{"/pause"}, User: "65535:65535", Files: []image.File{pause}},
	}
	images = append(images, extra...)
	out := filepath.Join(dir, "images")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("creating image dir: %w", err)
	}
	var paths []string
	for i, im := range images {
		p := filepath.Join(out, fmt.Sprintf("%02d.tar", i))
		if err := im.WriteFile(p); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// TagImage gives the image src the reference dst on every kubelet node,
// as a registry serves a new tag of the same build: a pod spec moved to
// dst rolls its pods, and each kubelet finds dst without a pull.
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	tagged := 0
	for _, n := range c.kubelet.nodeList() {
		if n.real == nil {
			continue
		}
		if _, err := output(ctx, filepath.Join(c.bin, "ctr"), "--address", n.real.socket, "--namespace", "k8s.io",
			"images", "tag", "--force", src, dst); err != nil {
			return fmt.Errorf("tagging %s as %s on node %s: %w", src, dst, n.name, err)
		}
		tagged++
	}
	if tagged == 0 {
		return errors.New("tagging images: the cluster has no kubelet nodes")
	}
	return nil
}

// ContainerImageLayers returns the chain ID of the image layers under the
// root filesystem of container of pod, which runs on a kubelet node: the
// parent of the snapshot that containerd's CRI made for the container (the
// snapshot is named after the container's ID). Of a multi-platform image
// it tells which platform's image the container was made from
// (oci.PlatformImage.ChainID).
func (c *Cluster) ContainerImageLayers(ctx context.Context, namespace, pod, container string) (string, error) {
	p, err := c.kubelet.podLister.Pods(namespace).Get(pod)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, pod, err)
	}
	n, err := c.kubelet.node(p.Spec.NodeName)
	if err != nil || n.real == nil {
		return "", fmt.Errorf("pod %s/%s is not on a kubelet node", namespace, pod)
	}
	var id string
	for _, st := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if st.Name == container {
			id = st.ContainerID
		}
	}
	id, ok := strings.CutPrefix(id, "containerd://")
	if !ok {
		return "", fmt.Errorf("container %s of pod %s/%s has no containerd ID (%q)", container, namespace, pod, id)
	}
	out, err := output(ctx, filepath.Join(c.bin, "ctr"), "--address", n.real.socket, "--namespace", "k8s.io",
		"snapshots", "--snapshotter", "overlayfs", "info", id)
	if err != nil {
		return "", fmt.Errorf("snapshot of container %s of pod %s/%s: %w", container, namespace, pod, err)
	}
	var info struct{ Parent string }
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Parent == "" {
		return "", fmt.Errorf("snapshot of container %s of pod %s/%s: no parent in %q (%v)", container, namespace, pod, out, err)
	}
	return info.Parent, nil
}
