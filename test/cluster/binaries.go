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
	"./cmd/kube-proxy", "./cmd/pulselb-echo",
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
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", out + "/"}, Commands...)...)
	cmd.Dir = mod
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building test binaries: %w\n%s", err, b)
	}
	// pulselb is built on its own: a main module that does not compile
	// fails only the pods that run pulselb, with the compiler's message,
	// instead of every test; a stale binary never runs.
	cmd = exec.CommandContext(ctx, "go", "build", "-o", out+"/", PulselbCommand)
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
	}
	klog.FromContext(ctx).V(1).Info("Built test binaries", "dir", out, "took", time.Since(began).Round(time.Millisecond))
	return out, nil
}
