package planned

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
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
	proc    *scenario.Controller
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
	ctl.runs++
	p, err := scenario.StartController(ctx, ctl.e.C, scenario.ControllerOptions{
		Namespace:   SystemNamespace,
		ProxyImage:  image,
		LeaderElect: true,
		Metrics:     "127.0.0.1:0",
		Log:         fmt.Sprintf("pulselb-controller-%d-run%d.log", ctl.index, ctl.runs),
		Args: []string{
			"--leader-elect-lease-name=" + controllerLeaseName,
			// A standby takes over a killed leader within seconds.
			"--leader-elect-lease-duration=4s",
			"--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=500ms",
			"--dashboard=false",
			"--probe-reports=true",
			"--dns-zone=" + Zone,
			"--dns-ns=ns1." + Zone + "=" + cluster.BridgeIP,
			"--dns-listen=" + ctl.DNS,
			fmt.Sprintf("--dns-ttl=%d", ctl.e.Config.DNSTTL),
			"--v=2"},
	})
	if err != nil {
		return fmt.Errorf("pulselb controller %d: %w", ctl.index, err)
	}
	ctl.proc, ctl.logPath = p, p.LogPath
	return nil
}

// Running reports whether the process runs.
func (ctl *Controller) Running() bool {
	return ctl.proc != nil && !ctl.proc.Exited()
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
	// Exiting with an error after SIGTERM is no failure here.
	err := ctl.proc.Shutdown(20 * time.Second)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return fmt.Errorf("pulselb controller %d: %w", ctl.index, err)
	}
	return nil
}

// Kill stops the controller with SIGKILL, as a crash or a lost node would:
// its Lease runs out instead of being released.
func (ctl *Controller) Kill() error {
	if !ctl.Running() {
		return fmt.Errorf("pulselb controller %d is not running", ctl.index)
	}
	return ctl.proc.Kill()
}
