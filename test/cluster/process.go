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
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits,
		// and Go ends the thread of a goroutine that exits locked (as
		// code entering network namespaces does): a child forked from
		// such a thread would be killed at random. This thread stays
		// locked to this goroutine, so alive, until the child exits.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if err := rec.add(item{Kind: "process", Name: name, PID: cmd.Process.Pid, Start: processStart(cmd.Process.Pid)}); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Started process", "name", name, "pid", cmd.Process.Pid)
	return p, nil
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
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
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
