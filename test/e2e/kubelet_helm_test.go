package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/pulselb/pulselb/test/cluster"
)

// TestKubeletHelmInstall installs the Helm chart on real kubelet nodes as a
// user would, `helm install pulselb deploy/helm/pulselb -n pulselb-system
// --create-namespace --set image.repository=...,image.tag=...` (through the
// Helm SDK, the code of the helm command), and checks that pulselb runs
// under its own ServiceAccounts and that a LoadBalancer Service is published
// and reachable from outside over TCP and UDP. TestKubeletInstall does the
// same from deploy/base and goes on to the failover.
func TestKubeletHelmInstall(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{KubeletNodes: 3, WaitForMachine: 20 * time.Minute})
	ctx := t.Context()
	cs := c.Client

	repo, tag, _ := strings.Cut(cluster.PulselbImage, ":")
	chart, err := loader.Load(filepath.Join("..", "..", "deploy", "helm", "pulselb"))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, ns := c.Kubeconfig, systemNamespace
	getter := &genericclioptions.ConfigFlags{KubeConfig: &kubeconfig, Namespace: &ns}
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", func(format string, v ...any) { t.Logf("helm: "+format, v...) }); err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = "pulselb", ns, true
	install.Timeout = 2 * time.Minute
	installed := time.Now()
	rel, err := install.RunWithContext(ctx, chart, map[string]any{"image": map[string]any{"repository": repo, "tag": tag}})
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install: release %s version %d, %s", rel.Name, rel.Version, rel.Info.Status)
	defer func() {
		if t.Failed() {
			t.Logf("pods in %s: %s", systemNamespace, describePods(ctx, cs, systemNamespace))
			t.Logf("controller logs:\n%s", controllerLogs(ctx, t, c))
		}
	}()

	t.Run("ComponentsRunUnderTheirServiceAccounts", func(t *testing.T) {
		kubeletComponentsRun(ctx, t, c, installed, cluster.PulselbImage)
	})
	const webNS = "shop"
	if err := c.CreateNamespaces(ctx, webNS); err != nil {
		t.Fatal(err)
	}
	createKubeletWeb(ctx, t, cs, webNS)
	var ingress []string
	t.Run("ServicePublished", func(t *testing.T) {
		poll(ctx, t, 90*time.Second, "shop/web with 2 ingress IPs of kubelet nodes", func() bool {
			ingress = ingressIPs(ctx, cs, webNS, "web")
			return len(ingress) == 2
		})
		nodeIPs := c.NodeIPs()
		for _, ip := range ingress {
			found := false
			for _, nip := range nodeIPs {
				found = found || nip == ip
			}
			if !found {
				t.Errorf("ingress %s is not a node IP (%v)", ip, nodeIPs)
			}
		}
		t.Logf("status.loadBalancer.ingress = %v", ingress)
	})
	if len(ingress) != 2 {
		t.Fatal("no ingress")
	}
	t.Run("ClientReachesBackendOverTCPAndUDP", func(t *testing.T) {
		clientReachesWebOverTCPAndUDP(ctx, t, c, ingress)
	})
}
