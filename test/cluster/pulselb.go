package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// ErrStopTimeout is returned by PulselbProcess.Stop when the process
// outlived its grace period and was killed.
var ErrStopTimeout = errors.New("did not stop within its grace period")

// PulselbProcess is a pulselb process (`pulselb controller`, say) that a
// test or benchmark runs on the harness' host, outside any pod.
type PulselbProcess struct {
	*process
	// LogPath is the file its output goes to.
	LogPath string
}

// StartPulselb runs the pulselb binary that Binaries built with args, its
// output going to logf, which it closes once the process has exited (or
// did not start). The process is killed if this program dies.
func StartPulselb(ctx context.Context, logf *os.File, args ...string) (*PulselbProcess, error) {
	bin, err := Binaries(ctx)
	if err != nil {
		logf.Close()
		return nil, err
	}
	exe := filepath.Join(bin, "pulselb")
	if _, err := os.Stat(exe); err != nil {
		logf.Close()
		why, _ := os.ReadFile(filepath.Join(bin, pulselbBuildError))
		return nil, fmt.Errorf("no pulselb binary: %w %s", err, why)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{name: "pulselb " + args[0], cmd: cmd, done: make(chan struct{})}
	if err := p.start(logf); err != nil {
		return nil, err
	}
	return &PulselbProcess{process: p, LogPath: logf.Name()}, nil
}

// Err is what waiting for the process returned; valid once Done is closed.
func (p *PulselbProcess) Err() error { return p.err }

// Exited reports whether the process has exited.
func (p *PulselbProcess) Exited() bool { return p.exited() }

// Pid is the process' ID.
func (p *PulselbProcess) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM, and SIGKILL if the process still runs after grace;
// it waits for the process to exit. It returns ErrStopTimeout when it had
// to kill, else what waiting for the process returned (an *exec.ExitError
// for a non-zero exit). Of a process that has already exited, it returns
// how it exited.
func (p *PulselbProcess) Stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return ErrStopTimeout
	}
}

// Kill sends SIGKILL, as a crash or the loss of a node would, and waits
// for the process to exit.
func (p *PulselbProcess) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.done
	return nil
}
