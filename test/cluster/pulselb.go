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
	Cmd *exec.Cmd
	// LogPath is the file its output goes to.
	LogPath string
	done    chan struct{}
	err     error // valid after done is closed
}

// StartPulselb runs the pulselb binary that Binaries built with args, its
// output going to logf, which it closes once the process has exited (or
// did not start). The process is killed if the caller's thread dies; see
// StartLocked.
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
	p := &PulselbProcess{Cmd: cmd, LogPath: logf.Name(), done: make(chan struct{})}
	if err := StartLocked(cmd, func(err error) {
		p.err = err
		logf.Close()
		close(p.done)
	}); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting pulselb %s: %w", args[0], err)
	}
	return p, nil
}

// Done is closed once the process has exited.
func (p *PulselbProcess) Done() <-chan struct{} { return p.done }

// Err is what waiting for the process returned; valid once Done is closed.
func (p *PulselbProcess) Err() error { return p.err }

// Exited reports whether the process has exited.
func (p *PulselbProcess) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, and SIGKILL if the process still runs after grace;
// it waits for the process to exit. It returns ErrStopTimeout when it had
// to kill, else what waiting for the process returned (an *exec.ExitError
// for a non-zero exit). Of a process that has already exited, it returns
// how it exited.
func (p *PulselbProcess) Stop(grace time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return ErrStopTimeout
	}
}

// Kill sends SIGKILL, as a crash or the loss of a node would, and waits
// for the process to exit.
func (p *PulselbProcess) Kill() error {
	if err := p.Cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.done
	return nil
}
