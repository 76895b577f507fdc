package cluster

import (
	"fmt"
	"os"
	"path/filepath"

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
