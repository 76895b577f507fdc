// Command pulselb-testcluster starts and stops the test cluster of package
// github.com/pulselb/pulselb/test/cluster by hand:
//
//	pulselb-testcluster up --nodes N [--light M] [--kubelet-nodes K] [--external-ips] [--ip-families=ipv4|ipv4,ipv6|ipv6,ipv4|ipv6] [--dir DIR]
//	pulselb-testcluster down [--dir DIR]
//	pulselb-testcluster status [--dir DIR]
//	pulselb-testcluster kubeconfig [--dir DIR]
//	pulselb-testcluster node NAME down|up|blackhole|heal|partition OTHER [--dir DIR]
//	pulselb-testcluster exec NAME -- CMD...
//	pulselb-testcluster client -- CMD...
//
// `up` starts a background harness process (the kubelet simulator lives in
// it) and prints the kubeconfig path once every node is Ready; `node`
// commands reach that process through a unix socket in DIR.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/traffic"
)

const defaultDir = "/tmp/pulselb-testcluster"

func main() {
	klog.InitFlags(nil)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pulselb-testcluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: pulselb-testcluster up|down|status|kubeconfig|node|exec|client [flags] (see the package doc)")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	dir := fs.String("dir", defaultDir, "cluster directory")
	nodes := fs.Int("nodes", 3, "nodes with network namespaces (up)")
	light := fs.Int("light", 0, "light nodes without namespaces (up)")
	kubeletNodes := fs.Int("kubelet-nodes", 0, "real kubelet nodes with containerd (up)")
	ext := fs.Bool("external-ips", false, "give nodes ExternalIPs 198.18.2.N (up)")
	grace := fs.Duration("node-grace-period", 0, "node monitor grace period (up; default 8s)")
	bin := fs.String("bin", "", "directory of prebuilt binaries (up; default: build them)")
	families := fs.String("ip-families", "ipv4", "the cluster's IP families, primary first: ipv4, ipv4,ipv6, ipv6,ipv4 or ipv6 (up)")
	ctx := context.Background()

	switch cmd {
	case "up", "serve":
		if err := fs.Parse(args); err != nil {
			return err
		}
		fams, err := cluster.ParseIPFamilies(*families)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pulselb-testcluster %s: --ip-families: %v\n", cmd, err)
			os.Exit(2)
		}
		opts := cluster.Options{Dir: *dir, Nodes: *nodes, LightNodes: *light, KubeletNodes: *kubeletNodes, ExternalIPs: *ext, NodeGracePeriod: *grace, BinDir: *bin,
			IPFamilies: fams}
		if cmd == "serve" {
			return serve(ctx, opts)
		}
		return up(ctx, opts, args)
	case "down", "status", "kubeconfig":
		if err := fs.Parse(args); err != nil {
			return err
		}
		abs, err := filepath.Abs(*dir)
		if err != nil {
			return err
		}
		switch cmd {
		case "down":
			return down(ctx, abs)
		case "status":
			return status(ctx, abs)
		default:
			fmt.Println(filepath.Join(abs, "kubeconfig"))
			return nil
		}
	case "node":
		// node NAME ACTION [OTHER] [--dir DIR]
		var pos []string
		for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			pos, args = append(pos, args[0]), args[1:]
		}
		if err := fs.Parse(args); err != nil {
			return err
		}
		if len(pos) < 2 {
			return usage()
		}
		return control(*dir, strings.Join(pos, " "))
	case "exec", "client":
		// exec NAME -- CMD... | client -- CMD...
		ns := "plt-client"
		if cmd == "exec" {
			if len(args) == 0 {
				return usage()
			}
			ns, args = cluster.NodeNamespace(args[0]), args[1:]
		}
		if len(args) > 0 && args[0] == "--" {
			args = args[1:]
		}
		if len(args) == 0 {
			return usage()
		}
		c := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := c.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			return err
		}
		return nil
	}
	return usage()
}

// up starts `serve` detached and waits until it reports ready or fails.
func up(ctx context.Context, opts cluster.Options, args []string) error {
	abs, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", abs, err)
	}
	if pid, ok := harnessPID(abs); ok {
		return fmt.Errorf("a cluster is already running from %s (pid %d); run down first", abs, pid)
	}
	_ = os.Remove(filepath.Join(abs, "ready"))
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding own executable: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(abs, "harness.log"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening harness log: %w", err)
	}
	defer logf.Close()
	c := exec.Command(self, append([]string{"serve", "--dir", abs}, args...)...)
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting harness: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	deadline := time.After(15 * time.Minute) // includes a cold build of the binaries
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("harness exited (%v); see %s", err, filepath.Join(abs, "harness.log"))
		case <-deadline:
			return fmt.Errorf("cluster not ready after 15m; see %s", filepath.Join(abs, "harness.log"))
		case <-tick.C:
		}
		if _, err := os.Stat(filepath.Join(abs, "ready")); err == nil {
			fmt.Println(filepath.Join(abs, "kubeconfig"))
			return nil
		}
	}
}

// serve runs the cluster in the foreground until SIGTERM or SIGINT.
func serve(ctx context.Context, opts cluster.Options) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx)
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(context.WithoutCancel(ctx)); err != nil {
			logger.Error(err, "Stopping cluster")
		}
		_ = os.Remove(filepath.Join(c.Dir, "harness.pid"))
		_ = os.Remove(filepath.Join(c.Dir, "ready"))
	}()
	sock := filepath.Join(c.Dir, "control.sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", sock, err)
	}
	defer l.Close()
	go serveControl(ctx, c, l)
	if err := os.WriteFile(filepath.Join(c.Dir, "harness.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "ready"), nil, 0o644); err != nil {
		return err
	}
	logger.Info("Cluster ready", "kubeconfig", c.Kubeconfig)
	<-ctx.Done()
	logger.Info("Stopping cluster")
	return nil
}

// serveControl answers one-line fault commands: "NAME down|up|blackhole|heal",
// "NAME partition OTHER".
func serveControl(ctx context.Context, c *cluster.Cluster, l net.Listener) {
	traffic.Serve(l, func(conn net.Conn) {
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		err = errors.New("bad command")
		if len(f) >= 2 {
			switch f[1] {
			case "down":
				err = c.NodeDown(ctx, f[0])
			case "up":
				err = c.NodeUp(ctx, f[0])
			case "blackhole":
				err = c.NodeBlackhole(ctx, f[0])
			case "heal":
				err = c.NodeHeal(ctx, f[0])
			case "partition":
				if len(f) == 3 {
					err = c.NodePartition(ctx, f[0], f[2])
				}
			}
		}
		if err != nil {
			fmt.Fprintf(conn, "error: %v\n", err)
			return
		}
		fmt.Fprintln(conn, "ok")
	})
}

func control(dir, line string) error {
	conn, err := net.DialTimeout("unix", filepath.Join(dir, "control.sock"), 5*time.Second)
	if err != nil {
		return fmt.Errorf("reaching the harness (is the cluster up?): %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := fmt.Fprintln(conn, line); err != nil {
		return err
	}
	resp, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the harness' answer: %w", err)
	}
	if resp = strings.TrimSpace(resp); resp != "ok" {
		return errors.New(resp)
	}
	return nil
}

func harnessPID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "harness.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

// down stops the harness and removes whatever it left behind.
func down(ctx context.Context, dir string) error {
	if pid, ok := harnessPID(dir); ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if syscall.Kill(pid, 0) != nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // polling for the harness to exit, bounded by deadline
		}
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := cluster.Teardown(ctx, dir); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "harness.pid"))
	_ = os.Remove(filepath.Join(dir, "ready"))
	fmt.Println("down:", dir)
	return nil
}

func status(ctx context.Context, dir string) error {
	pid, ok := harnessPID(dir)
	if !ok {
		fmt.Println("down")
		return errors.New("no cluster running from " + dir)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	fmt.Printf("harness pid %d, kubeconfig %s\n", pid, kubeconfig)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		var addrs []string
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeHostName {
				addrs = append(addrs, string(a.Type)+"="+a.Address)
			}
		}
		fmt.Printf("%-10s Ready=%-7s %s %s\n", n.Name, cluster.NodeReady(&n), n.Labels[cluster.LabelZone], strings.Join(addrs, " "))
	}
	return nil
}
