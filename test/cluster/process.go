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

// pause stops the process group with SIGSTOP for d (or until ctx ends),
// then continues it with SIGCONT, also when ctx ended: a process is never
// left stopped.
func (p *process) pause(ctx context.Context, d time.Duration) error {
	if p.exited() {
		return fmt.Errorf("pausing %s: it has exited", p.name)
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pausing %s: %w", p.name, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("continuing %s: %w", p.name, err)
	}
	return nil
}
