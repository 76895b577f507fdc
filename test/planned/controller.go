package planned

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
)

// Controller is one replica of `pulselb controller`, run as a process with
// leader election, serving DNS on its own port; it can be stopped, killed
// and started again (with another proxy image) like a pod of the
// controller's Deployment.
type Controller struct {
	e     *Env
	index int
	// DNS is its DNS server's address, the same across restarts.
	DNS string

	runs    int
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	logPath string
}

func (e *Env) newController(index int) (*Controller, error) {
	// The bridge address: the client namespace reaches it.
	addr, err := cluster.FreePort(cluster.BridgeIP)
	if err != nil {
		return nil, err
	}
	return &Controller{e: e, index: index, DNS: addr}, nil
}

// start runs the controller with proxy image image.
func (ctl *Controller) start(ctx context.Context, image string) error {
	bin, err := cluster.Binaries(ctx)
	if err != nil {
		return err
	}
	exe := filepath.Join(bin, "pulselb")
	if _, err := os.Stat(exe); err != nil {
		why, _ := os.ReadFile(filepath.Join(bin, "pulselb.build-error"))
		return fmt.Errorf("no pulselb binary: %w %s", err, why)
	}
	ctl.runs++
	ctl.logPath = filepath.Join(ctl.e.C.Dir, "logs", fmt.Sprintf("pulselb-controller-%d-run%d.log", ctl.index, ctl.runs))
	logf, err := os.Create(ctl.logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "controller",
		"--kubeconfig="+ctl.e.C.Kubeconfig,
		"--namespace="+SystemNamespace,
		"--proxy-image="+image,
		"--leader-elect=true",
		"--leader-elect-lease-name="+controllerLeaseName,
		// A standby takes over a killed leader within seconds.
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"--metrics-address=127.0.0.1:0",
		"--dashboard=false",
		"--probe-reports=true",
		"--dns-zone="+Zone,
		"--dns-ns=ns1."+Zone+"="+cluster.BridgeIP,
		"--dns-listen="+ctl.DNS,
		fmt.Sprintf("--dns-ttl=%d", ctl.e.Config.DNSTTL),
		"--v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctl.cmd, ctl.done, ctl.err = cmd, make(chan struct{}), nil
	done := ctl.done
	if err := cluster.StartLocked(cmd, func(err error) {
		ctl.err = err
		logf.Close()
		close(done)
	}); err != nil {
		logf.Close()
		return fmt.Errorf("starting pulselb controller %d: %w", ctl.index, err)
	}
	return nil
}

// Running reports whether the process runs.
func (ctl *Controller) Running() bool {
	if ctl.done == nil {
		return false
	}
	select {
	case <-ctl.done:
		return false
	default:
		return true
	}
}

// Leading reports whether the running process leads: it logged
// "Started leading" and runs.
func (ctl *Controller) Leading() bool {
	if !ctl.Running() {
		return false
	}
	b, err := os.ReadFile(ctl.logPath)
	return err == nil && strings.Contains(string(b), `"Started leading"`)
}

// LogPath is the log of the current (or last) run.
func (ctl *Controller) LogPath() string { return ctl.logPath }

// Stop stops the controller with SIGTERM, as a rolling update does (a
// leader releases its Lease), and waits for it to exit.
func (ctl *Controller) Stop() error {
	if !ctl.Running() {
		return nil
	}
	_ = ctl.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ctl.done:
	case <-time.After(20 * time.Second):
		_ = ctl.cmd.Process.Kill()
		<-ctl.done
		return fmt.Errorf("pulselb controller %d did not stop within 20s of SIGTERM; log %s", ctl.index, ctl.logPath)
	}
	var ee *exec.ExitError
	if ctl.err != nil && !errors.As(ctl.err, &ee) {
		return fmt.Errorf("pulselb controller %d: %w", ctl.index, ctl.err)
	}
	return nil
}

// Kill stops the controller with SIGKILL, as a crash or a lost node would:
// its Lease runs out instead of being released.
func (ctl *Controller) Kill() error {
	if !ctl.Running() {
		return fmt.Errorf("pulselb controller %d is not running", ctl.index)
	}
	if err := ctl.cmd.Process.Kill(); err != nil {
		return err
	}
	<-ctl.done
	return nil
}
