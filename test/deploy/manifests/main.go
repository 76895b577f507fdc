// Command manifests keeps the install manifests generated from the Helm
// chart: it copies the CRDs `make generate` writes into the chart's crds/
// and renders the chart's defaults into the kustomize base. With -check it
// changes nothing and exits 1 when either is stale.
//
//	cd test && go run ./deploy/manifests [-check]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulselb/pulselb/test/deploy"
)

func main() {
	root := flag.String("root", "..", "the pulselb repository")
	check := flag.Bool("check", false, "only check that the chart's CRDs and deploy/base are up to date")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	chart := filepath.Join(root, "deploy", "helm", "pulselb")
	crds, err := deploy.CRDFiles(filepath.Join(root, "deploy", "crds"))
	if err != nil {
		return err
	}
	chartCRDs := filepath.Join(chart, "crds")
	if check {
		if err := deploy.CheckBase(chartCRDs, crds); err != nil {
			return err
		}
	} else if err := deploy.WriteBase(chartCRDs, crds); err != nil {
		return err
	}
	files, err := deploy.BaseFiles(chart)
	if err != nil {
		return err
	}
	base := filepath.Join(root, "deploy", "base")
	if check {
		return deploy.CheckBase(base, files)
	}
	if err := deploy.WriteBase(base, files); err != nil {
		return err
	}
	fmt.Printf("wrote %d files to %s\n", len(files), base)
	return nil
}
