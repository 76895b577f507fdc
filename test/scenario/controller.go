package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
)

// ControllerOptions says how StartController runs `pulselb controller`;
// what is left zero takes the default named.
type ControllerOptions struct {
	// Namespace is pulselb's namespace (--namespace); required.
	Namespace string
	// ProxyImage is the proxy pods' image (--proxy-image); default
	// "pulselb", the image the cluster preloads.
	ProxyImage string
	// LeaderElect runs it with leader election (--leader-elect); off, the
	// one replica leads from its start.
	LeaderElect bool
	// Metrics is the address of /metrics (--metrics-address); default a
	// free port on 127.0.0.1, so that Controller.Metrics names it.
	Metrics string
	// Log is the log file's name in the cluster's log directory, where it
	// is kept when the test fails; a "*" in it stands for a random string,
	// so that each run logs to a file of its own (os.CreateTemp). Default
	// "pulselb-controller.log".
	Log string
	// Args are the other flags. They follow those above, so they win.
	Args []string
	// Ready, when set, is how long StartController waits for the
	// controller to serve /metrics (its flags parsed, its clients made).
	Ready time.Duration
}

// Controller is a `pulselb controller` process that a scenario or a
// benchmark runs against a test cluster.
type Controller struct {
	*cluster.PulselbProcess
	// Metrics is the address of its /metrics, as given to
	// --metrics-address.
	Metrics string
	// Args are its flags after "controller".
	Args []string
}

// StartController runs `pulselb controller` against c with the cluster's
// admin kubeconfig, as o says. It returns once the process has started,
// or, with o.Ready set, once it serves /metrics.
func StartController(ctx context.Context, c *cluster.Cluster, o ControllerOptions) (*Controller, error) {
	if o.Namespace == "" {
		return nil, errors.New("starting pulselb controller: no namespace")
	}
	if o.Metrics == "" {
		addr, err := cluster.FreePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		o.Metrics = addr
	}
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--namespace=" + o.Namespace,
		"--proxy-image=" + cmp.Or(o.ProxyImage, "pulselb"),
		fmt.Sprintf("--leader-elect=%t", o.LeaderElect),
		"--metrics-address=" + o.Metrics,
	}
	args = append(args, o.Args...)
	logf, err := createLog(filepath.Join(c.Dir, "logs"), cmp.Or(o.Log, "pulselb-controller.log"))
	if err != nil {
		return nil, fmt.Errorf("creating pulselb controller log: %w", err)
	}
	p, err := cluster.StartPulselb(ctx, logf, append([]string{"controller"}, args...)...)
	if err != nil {
		return nil, err
	}
	ctl := &Controller{PulselbProcess: p, Metrics: o.Metrics, Args: args}
	if o.Ready > 0 {
		if err := ctl.WaitServing(ctx, o.Ready); err != nil {
			_ = p.Stop(time.Second)
			return nil, err
		}
	}
	return ctl, nil
}

// createLog creates the log file name in dir; a "*" in name stands for a
// random string.
func createLog(dir, name string) (*os.File, error) {
	if strings.Contains(name, "*") {
		return os.CreateTemp(dir, name)
	}
	return os.Create(filepath.Join(dir, name))
}

// MetricsURL is the URL of its /metrics.
func (ctl *Controller) MetricsURL() string { return "http://" + ctl.Metrics + "/metrics" }

// WaitServing waits up to timeout until the controller serves /metrics,
// and fails at once if it exits meanwhile.
func (ctl *Controller) WaitServing(ctx context.Context, timeout time.Duration) error {
	var alive error
	err := PollEvery(ctx, 50*time.Millisecond, timeout, "pulselb controller serving "+ctl.MetricsURL(), func() bool {
		if alive = ctl.Alive(); alive != nil {
			return true
		}
		resp, err := http.Get(ctl.MetricsURL())
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return errors.Join(alive, err)
}

// Alive returns nil while the controller runs, and once it has exited an
// error with how it exited and the end of its log.
func (ctl *Controller) Alive() error {
	if !ctl.Exited() {
		return nil
	}
	log, _ := os.ReadFile(ctl.LogPath)
	return fmt.Errorf("pulselb controller exited: %w; log %s:\n%s", ctl.Err(), ctl.LogPath, Tail(string(log), 40))
}

// Shutdown stops the controller with SIGTERM, and SIGKILL after grace, as
// a rolling update does (a leader releases its Lease), and waits for it
// to exit. It returns nil when it exited cleanly; an error wrapping
// cluster.ErrStopTimeout when it had to be killed; an error wrapping its
// *exec.ExitError when it exited with an error.
func (ctl *Controller) Shutdown(grace time.Duration) error {
	err := ctl.Stop(grace)
	var ee *exec.ExitError
	switch {
	case errors.Is(err, cluster.ErrStopTimeout):
		return fmt.Errorf("pulselb controller did not stop within %s of SIGTERM; log in %s: %w", grace, ctl.LogPath, err)
	case errors.As(err, &ee):
		return fmt.Errorf("pulselb controller exited with %w after SIGTERM; log in %s", err, ctl.LogPath)
	case err != nil:
		return fmt.Errorf("pulselb controller: %w", err)
	}
	return nil
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
