package lbspecs

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"

	// What the upstream suite links in besides its specs: frozen feature
	// names, framework hooks.
	_ "k8s.io/kubernetes/test/e2e/feature"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"

	// The specs: sig-network, which has the LoadBalancer ones.
	_ "k8s.io/kubernetes/test/e2e/network"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown arguments: %v\n", flag.Args())
		os.Exit(2)
	}
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// TestE2E runs the selected specs (--ginkgo.focus) as the upstream suite
// does.
func TestE2E(t *testing.T) {
	if framework.TestContext.KubeConfig == "" {
		t.Skip("no --kubeconfig: package conformance runs this binary against its cluster")
	}
	e2e.RunE2ETests(t)
}
