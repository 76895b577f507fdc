package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// apiServerPort is the API server's secure port on the bridge address.
const apiServerPort = 6443

// APIServerURL is where the API server of a cluster whose primary family
// is IPv4 listens, reachable from the root namespace and from every node
// namespace; with IPv6 first it listens on the bridge's IPv6 address
// (Cluster.Kubeconfig names it).
var APIServerURL = "https://" + net.JoinHostPort(bridgeIP, strconv.Itoa(apiServerPort))

// controlPlane is etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager as child processes.
type controlPlane struct {
	dir, bin, logs string
	rec            *record
	pki            *pki
	opts           Options

	etcd, apiserver, scheduler, controllerManager *process
	apiserverArgv                                 []string
}

// url is where this cluster's API server listens.
func (cp *controlPlane) url() string {
	return "https://" + net.JoinHostPort(cp.opts.apiServerIP(), strconv.Itoa(apiServerPort))
}

func (cp *controlPlane) startAPIServer(ctx context.Context) error {
	var err error
	cp.apiserver, err = startProcess(ctx, cp.rec, cp.logs, "kube-apiserver", "", []string{"PATH=" + os.Getenv("PATH")}, cp.apiserverArgv...)
	if err != nil {
		return err
	}
	admin, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cp.dir, "admin.kubeconfig"))
	if err != nil {
		return fmt.Errorf("loading admin kubeconfig: %w", err)
	}
	if err := waitReadyz(ctx, cp.apiserver, admin, 60*time.Second); err != nil {
		return fmt.Errorf("waiting for kube-apiserver: %w", err)
	}
	return nil
}

func (cp *controlPlane) restartAPIServer(ctx context.Context, down time.Duration) error {
	if err := cp.apiserver.stop(10 * time.Second); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	return cp.startAPIServer(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeKubeconfig writes a kubeconfig for the client certificate name.
func (cp *controlPlane) writeKubeconfig(path, name string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["pulselb-test"] = &clientcmdapi.Cluster{Server: cp.url(), CertificateAuthority: cp.pki.path("ca.crt")}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: cp.pki.path(name + ".crt"), ClientKey: cp.pki.path(name + ".key")}
	cfg.Contexts["pulselb-test"] = &clientcmdapi.Context{Cluster: "pulselb-test", AuthInfo: name}
	cfg.CurrentContext = "pulselb-test"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

func (cp *controlPlane) credentials() error {
	ips := []net.IP{net.ParseIP(bridgeIP), net.ParseIP(APIServiceIP), net.ParseIP("127.0.0.1")}
	if cp.opts.hasIPv6() {
		ips = append(ips, net.ParseIP(bridgeIP6), net.ParseIP(APIServiceIP6))
	}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	if err := cp.pki.issue("apiserver", "kube-apiserver", nil, ips, dns); err != nil {
		return err
	}
	users := []struct{ name, cn, org string }{
		{"admin", "pulselb-test-admin", "system:masters"},
		{"scheduler", "system:kube-scheduler", ""},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"kube-proxy", "system:kube-proxy", ""},
		// The kubelet simulator writes Nodes, Leases and pod status for
		// every node; system:masters keeps it simple and it is not under test.
		{"kubelet", "pulselb-test-kubelet", "system:masters"},
		// The API server's client certificate for kubelets (logs, exec).
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
	}
	for _, u := range users {
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		if err := cp.pki.issue(u.name, u.cn, orgs, nil, nil); err != nil {
			return err
		}
		if err := cp.writeKubeconfig(filepath.Join(cp.dir, u.name+".kubeconfig"), u.name); err != nil {
			return err
		}
	}
	return nil
}

func (cp *controlPlane) start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := cp.credentials(); err != nil {
		return err
	}
	env := []string{"PATH=" + os.Getenv("PATH")}

	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	cp.etcd, err = startProcess(ctx, cp.rec, cp.logs, "etcd", "", env, filepath.Join(cp.bin, "etcd"),
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-url="+etcdURL,
		fmt.Sprintf("--listen-peer-url=http://127.0.0.1:%d", peerPort))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, cp.etcd, etcdURL+"/health", nil, 30*time.Second); err != nil {
		return fmt.Errorf("waiting for etcd: %w", err)
	}

	p := cp.pki.path
	cp.apiserverArgv = []string{filepath.Join(cp.bin, "kube-apiserver"),
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + cp.opts.apiServerIP(),
		"--advertise-address=" + cp.opts.apiServerIP(),
		"--secure-port=" + strconv.Itoa(apiServerPort),
		"--cert-dir=" + filepath.Join(cp.dir, "apiserver-certs"),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		// Real kubelets (kubelet nodes) are authorized as nodes, as on a
		// kubeadm cluster.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--kubelet-client-certificate=" + p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p("apiserver-kubelet-client.key"),
		"--service-cluster-ip-range=" + cp.opts.serviceCIDRs(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--event-ttl=10m",
		"--v=1"}
	if err := cp.startAPIServer(ctx); err != nil {
		return err
	}
	logger.V(2).Info("API server ready", "url", cp.url())

	schedPort, err := freePort()
	if err != nil {
		return err
	}
	cp.scheduler, err = startProcess(ctx, cp.rec, cp.logs, "kube-scheduler", "", env,
		cp.componentArgv("kube-scheduler", "scheduler.kubeconfig", schedPort, "--v=1")...)
	if err != nil {
		return err
	}

	kcmPort, err := freePort()
	if err != nil {
		return err
	}
	grace := cp.opts.NodeGracePeriod
	cp.controllerManager, err = startProcess(ctx, cp.rec, cp.logs, "kube-controller-manager", "", env,
		cp.componentArgv("kube-controller-manager", "controller-manager.kubeconfig", kcmPort,
			"--controllers="+cp.opts.controllers(),
			"--service-account-private-key-file="+p("sa.key"),
			"--root-ca-file="+p("ca.crt"),
			// One service account per controller, as kubeadm does: the
			// bootstrap RBAC roles are written for that.
			"--use-service-account-credentials=true",
			"--node-monitor-grace-period="+grace.String(),
			"--node-monitor-period=1s",
			"--node-startup-grace-period="+grace.String(),
			"--service-cluster-ip-range="+cp.opts.serviceCIDRs(),
			"--allocate-node-cidrs=false",
			"--concurrent-deployment-syncs=10",
			"--concurrent-replicaset-syncs=10",
			"--v=1")...)
	if err != nil {
		return err
	}
	// Both report healthy only once their informers synced and they serve.
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	if err := waitHTTP(ctx, cp.scheduler, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), insecure, 60*time.Second); err != nil {
		return fmt.Errorf("waiting for kube-scheduler: %w", err)
	}
	if err := waitHTTP(ctx, cp.controllerManager, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), insecure, 60*time.Second); err != nil {
		return fmt.Errorf("waiting for kube-controller-manager: %w", err)
	}
	return nil
}

// controllers are the kube-controller-manager controllers the harness runs.
const controllers = "node-lifecycle-controller,taint-eviction-controller,deployment-controller,replicaset-controller," +
	"daemonset-controller,endpointslice-controller,endpointslice-mirroring-controller,endpoints-controller," +
	"garbage-collector-controller,serviceaccount-token-controller,serviceaccount-controller,namespace-controller," +
	"root-ca-certificate-publisher-controller,pod-garbage-collector-controller,job-controller,statefulset-controller," +
	"disruption-controller,ttl-after-finished-controller,clusterrole-aggregation-controller"

// controllers returns the controllers kube-controller-manager runs:
// controllers less Options.WithoutControllers.
func (o Options) controllers() string {
	var out []string
	for c := range strings.SplitSeq(controllers, ",") {
		if !slices.Contains(o.WithoutControllers, c) {
			out = append(out, c)
		}
	}
	return strings.Join(out, ",")
}

// componentArgv returns the command line of kube-scheduler or
// kube-controller-manager (name): the flags they share (one kubeconfig for
// the API, authentication and authorization, no leader election, their
// health endpoint on 127.0.0.1:port), then flags, then the client rate of
// Options.ControlPlaneQPS.
func (cp *controlPlane) componentArgv(name, kubeconfig string, port int, flags ...string) []string {
	kc := filepath.Join(cp.dir, kubeconfig)
	argv := []string{filepath.Join(cp.bin, name),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
	}
	argv = append(argv, flags...)
	if q := cp.opts.ControlPlaneQPS; q > 0 {
		argv = append(argv, fmt.Sprintf("--kube-api-qps=%g", q), fmt.Sprintf("--kube-api-burst=%d", int(2*q)))
	}
	return argv
}

func (cp *controlPlane) stop() error {
	var first error
	for _, p := range []*process{cp.controllerManager, cp.scheduler, cp.apiserver, cp.etcd} {
		if p == nil {
			continue
		}
		if err := p.stop(10 * time.Second); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// waitHTTP polls url until it answers 200, p exits, or timeout passes.
func waitHTTP(ctx context.Context, p *process, url string, client *http.Client, timeout time.Duration) error {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	return poll(ctx, timeout, 100*time.Millisecond, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited: %v (see its log)", p.name, p.err)
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func waitReadyz(ctx context.Context, p *process, cfg *rest.Config, timeout time.Duration) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	return poll(ctx, timeout, 100*time.Millisecond, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited: %v (see its log)", p.name, p.err)
		}
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
}

// poll calls cond every interval until it returns true or an error, ctx
// ends, or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %s: %w", timeout, ctx.Err())
		case <-t.C:
		}
	}
}
