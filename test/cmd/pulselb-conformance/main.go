// Command pulselb-conformance runs Kubernetes' own LoadBalancer e2e specs
// against pulselb (package github.com/pulselb/pulselb/test/conformance):
//
//	pulselb-conformance -e2e E2E.TEST -kubectl KUBECTL -agnhost AGNHOST -coredns COREDNS [-focus RE] [-skip RE] [-quick] [-dir DIR]
//
// It prints one line per spec as it finishes and a summary, and exits 1
// when a spec failed. `make conformance` builds the binaries and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/conformance"
)

func main() {
	klog.InitFlags(nil)
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pulselb-conformance:", err)
		os.Exit(1)
	}
}

func run() error {
	var opts conformance.Options
	flag.StringVar(&opts.E2ETest, "e2e", "", "the upstream e2e.test binary (go test -c k8s.io/kubernetes/test/e2e)")
	flag.StringVar(&opts.Kubectl, "kubectl", "", "kubectl of the same version")
	flag.StringVar(&opts.Agnhost, "agnhost", "", "agnhost (k8s.io/kubernetes/test/images/agnhost), static")
	flag.StringVar(&opts.CoreDNS, "coredns", "", "CoreDNS, for the cluster DNS")
	flag.StringVar(&opts.Base, "base", filepath.Join("..", "deploy", "base"), "the kustomization pulselb is installed from")
	flag.StringVar(&opts.Dir, "dir", "", "directory for the cluster's logs and each spec's output (default: a temporary one)")
	flag.DurationVar(&opts.SpecTimeout, "spec-timeout", 30*time.Minute, "time limit of each spec")
	focus := flag.String("focus", "", "run only the specs whose name matches this regular expression")
	skip := flag.String("skip", "", "leave out the specs whose name matches this regular expression")
	quick := flag.Bool("quick", false, "run only the quick specs (those `make test` runs)")
	flag.Parse()
	for name, v := range map[string]string{"-e2e": opts.E2ETest, "-kubectl": opts.Kubectl, "-agnhost": opts.Agnhost, "-coredns": opts.CoreDNS} {
		if v == "" {
			return fmt.Errorf("%s is required", name)
		}
	}
	specs, err := conformance.Select(*focus, *skip, *quick)
	if err != nil {
		return fmt.Errorf("-focus: %w", err)
	}
	if len(specs) == 0 {
		return fmt.Errorf("no spec matches -focus %q", *focus)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin, err := cluster.Binaries(ctx)
	if err != nil {
		return err
	}
	opts.Pause = filepath.Join(bin, "static", "pulselb-pause")
	opts.Specs, opts.Out = specs, os.Stdout
	results, err := conformance.Run(ctx, opts)
	fmt.Println(conformance.Summary(results))
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Outcome == conformance.Failed {
			return fmt.Errorf("%s failed", r.Spec.Text)
		}
	}
	return nil
}
