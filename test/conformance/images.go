package conformance

import (
	"fmt"
	"slices"

	imageutils "k8s.io/kubernetes/test/utils/image"

	"github.com/pulselb/pulselb/test/image"
)

// agnhostPackages are the Debian packages of the agnhost image's tools
// that the specs run in their pods (`kubectl exec -- /bin/sh -c "curl ..."`,
// wget, nc, seq): upstream builds the image from Alpine with the same tools.
var agnhostPackages = []string{"dash", "bash", "coreutils", "curl", "netcat-openbsd", "wget", "iproute2", "bind9-dnsutils"}

// Images returns the images the specs use, under the names the e2e binary
// asks for (test/utils/image): agnhost, built from k8s.io/kubernetes at the
// harness' version, with its tools from this machine's Debian packages,
// and the pause image, which is the harness' own pause process.
func Images(agnhost, pause string) ([]image.Image, error) {
	bin, err := image.StaticBinary(agnhost, "/agnhost")
	if err != nil {
		return nil, fmt.Errorf("agnhost: %w", err)
	}
	tools, err := image.DebianPackages(agnhostPackages...)
	if err != nil {
		return nil, fmt.Errorf("collecting agnhost's tools: %w", err)
	}
	// Alpine's wget (busybox) tries once; GNU wget retries 20 times, which
	// turns each "not reachable" check of a spec into minutes.
	tools = slices.DeleteFunc(tools, func(f image.File) bool { return f.Path == "/etc/wgetrc" })
	files := append([]image.File{bin,
		{Path: "/etc/wgetrc", Mode: 0o644, Data: []byte("tries = 1\n")},
		{Path: "/agnhost-2", Link: "agnhost"},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/uploads", Dir: true, Mode: 0o755},
	}, tools...)
	p, err := image.StaticBinary(pause, "/pause")
	if err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	return []image.Image{
		{Name: imageutils.GetE2EImage(imageutils.Agnhost), Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Files: files},
		{Name: imageutils.GetPauseImageName(), Entrypoint: []string{"/pause"}, User: "65535:65535", Files: []image.File{p}},
	}, nil
}
