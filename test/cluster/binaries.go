package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Commands are the packages Binaries builds, relative to the test module.
var Commands = []string{
	"./cmd/etcd", "./cmd/kube-apiserver", "./cmd/kube-scheduler", "./cmd/kube-controller-manager",
	"./cmd/kube-proxy", "./cmd/kubelet", "./cmd/pulselb-echo",
}

// StaticCommands are built without cgo into the binaries directory's
// static/ for the images of kubelet nodes (see images.go).
var StaticCommands = []string{"./cmd/pulselb-echo", "./cmd/pulselb-pause"}

// ContainerdVersion is the containerd the kubelet nodes run, built from
// the Go module proxy like test/Makefile does.
const ContainerdVersion = "v2.4.2"

// containerdCommands are containerd's binaries the kubelet nodes need.
var containerdCommands = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// k8sLDFlags makes the Kubernetes components report the version of
// k8s.io/kubernetes in go.mod, as test/Makefile does: unset, the API
// server reports v0.0.0-master+$Format:%H$, which kubectl cannot parse.
func k8sLDFlags(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = mod
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("reading the k8s.io/kubernetes version: %w", err)
	}
	v := strings.TrimSpace(string(out))
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("k8s.io/kubernetes version %q: want vMAJOR.MINOR.PATCH", v)
	}
	var flags []string
	for _, p := range []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"} {
		flags = append(flags, "-X", p+".gitVersion="+v, "-X", p+".gitMajor="+parts[0], "-X", p+".gitMinor="+parts[1], "-X", p+".gitTreeState=clean")
	}
	return strings.Join(flags, " "), nil
}

// PulselbCommand is the pulselb binary, built from the main module.
const PulselbCommand = "github.com/pulselb/pulselb/cmd/pulselb"

// pulselbBuildError, in the binaries directory, holds why pulselb did not build.
const pulselbBuildError = "pulselb.build-error"

// ModuleDir returns the directory of the test module (github.com/pulselb/pulselb/test).
func ModuleDir() (string, error) {
	if d := os.Getenv("PULSELB_TEST_MODULE_DIR"); d != "" {
		return d, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if ok {
		d := filepath.Dir(filepath.Dir(file))
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/pulselb/pulselb/test").Output()
	if err != nil {
		return "", fmt.Errorf("locating the test module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Binaries builds the control plane, kube-proxy, the echo backend and pulselb
// into the test module's .bin directory (or $PULSELB_TEST_BIN when set, used
// as is without building) and returns it. The Go build cache makes a warm
// build take seconds; a cold one takes about ten minutes on two cores.
func Binaries(ctx context.Context) (string, error) {
	if d := os.Getenv("PULSELB_TEST_BIN"); d != "" {
		return d, nil
	}
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(mod, ".bin")
	began := time.Now()
	ldflags, err := k8sLDFlags(ctx, mod)
	if err != nil {
		return "", err
	}
	var containerd []string
	for _, c := range containerdCommands {
		containerd = append(containerd, "github.com/containerd/containerd/v2/cmd/"+c+"@"+ContainerdVersion)
	}
	steps := []struct {
		env  []string
		args []string
	}{
		{nil, append([]string{"build", "-ldflags", ldflags, "-o", out + "/"}, Commands...)},
		{[]string{"GOBIN=" + out, "CGO_ENABLED=0"}, append([]string{"install", "-tags", "no_btrfs no_devmapper no_zfs",
			"-ldflags", "-X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion}, containerd...)},
		{[]string{"CGO_ENABLED=0"}, append([]string{"build", "-o", filepath.Join(out, "static") + "/"}, StaticCommands...)},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, "go", s.args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), s.env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building test binaries (go %s): %w\n%s", strings.Join(s.args, " "), err, b)
		}
	}
	// pulselb is built on its own: a main module that does not compile
	// fails only the pods that run pulselb, with the compiler's message,
	// instead of every test; a stale binary never runs.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out+"/", PulselbCommand)
	cmd.Dir = mod
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(filepath.Join(out, "pulselb"))
		msg := fmt.Sprintf("building %s: %v\n%s", PulselbCommand, err, b)
		if werr := os.WriteFile(filepath.Join(out, pulselbBuildError), []byte(msg), 0o644); werr != nil {
			return "", fmt.Errorf("recording pulselb build error: %w", werr)
		}
		klog.FromContext(ctx).Error(err, "Building pulselb failed; pods running pulselb will fail", "output", string(b))
	} else {
		_ = os.Remove(filepath.Join(out, pulselbBuildError))
		// The image's binary, built as the Dockerfile builds it.
		cmd = exec.CommandContext(ctx, "make", "-C", filepath.Dir(mod), "image-binary", "IMAGE_BINARY="+filepath.Join(out, "static", "pulselb"))
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building the image's pulselb binary: %w\n%s", err, b)
		}
	}
	klog.FromContext(ctx).V(1).Info("Built test binaries", "dir", out, "took", time.Since(began).Round(time.Millisecond))
	return out, nil
}
