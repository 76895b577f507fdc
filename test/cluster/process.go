package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// process is a child process in its own process group, logging to a file.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done is closed
	once sync.Once
}

// startProcess starts argv, inside network namespace ns unless ns is empty,
// with its output in logDir/name.log, and records its process group.
func startProcess(ctx context.Context, rec *record, logDir, name, ns string, env []string, argv ...string) (*process, error) {
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	return startCommand(ctx, rec, logDir, name, env, argv...)
}

func startCommand(ctx context.Context, rec *record, logDir, name string, env []string, argv ...string) (*process, error) {
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env
	// Own process group so the whole tree can be signalled; killed with the
	// harness if it dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	if err := p.start(logf); err != nil {
		return nil, err
	}
	if err := rec.add(item{Kind: "process", Name: name, PID: cmd.Process.Pid, Start: processStart(cmd.Process.Pid)}); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Started process", "name", name, "pid", cmd.Process.Pid)
	return p, nil
}

// start starts p.cmd with StartLocked; logf, its output, is closed once
// the process has exited or did not start.
func (p *process) start(logf *os.File) error {
	if err := StartLocked(p.cmd, func(err error) {
		p.err = err
		logf.Close()
		close(p.done)
	}); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	return nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return p.stopWhen(ctx.Done())
}

// stopWhen sends SIGTERM to the process group, and SIGKILL once kill is
// closed if the process is still running then. Only the first call
// signals; later ones wait for it.
func (p *process) stopWhen(kill <-chan struct{}) error {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
		// Children that outlived the leader.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return fmt.Errorf("stopping %s: %w", p.name, p.err)
	}
	return nil
}

// StartLocked starts cmd from a goroutine locked to its thread until cmd
// exits, then calls exited with cmd.Wait's error. A child started with
// Pdeathsig is signalled when the thread that forked it exits, and Go ends
// the thread of a goroutine that exits locked (as code entering network
// namespaces does): started from any other thread, such a child would be
// killed at random. Tests and benchmarks start their long-lived processes
// with it for the same reason.
func StartLocked(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}

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
