package conformance

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
)

// Binaries are the programs a run needs besides the harness' own.
type Binaries struct {
	// E2ETest is k8s.io/kubernetes/test/e2e built with `go test -c`.
	E2ETest string
	// Kubectl is k8s.io/kubernetes/cmd/kubectl: the specs exec into pods
	// with it.
	Kubectl string
	// Agnhost is k8s.io/kubernetes/test/images/agnhost, built static.
	Agnhost string
	// CoreDNS serves the cluster DNS.
	CoreDNS string
	// Pause is the harness' static pause process (pulselb-pause).
	Pause string
}

// Options configure a run.
type Options struct {
	Binaries
	// Specs to run, one at a time, in order.
	Specs []Spec
	// Base is the kustomization pulselb is installed from (deploy/base).
	Base string
	// Dir keeps the cluster's logs and each spec's output; a temporary
	// directory when empty.
	Dir string
	// SpecTimeout bounds each spec; default 30 minutes.
	SpecTimeout time.Duration
	// Out gets one line per spec as it finishes.
	Out io.Writer
}

// Outcome is how a spec ended, as the e2e binary's report says.
type Outcome string

// Outcomes.
const (
	Passed  Outcome = "passed"
	Failed  Outcome = "failed"
	Skipped Outcome = "skipped"
)

// Result is one spec's outcome.
type Result struct {
	Spec     Spec
	Outcome  Outcome
	Duration time.Duration
	// Message is the failure or the reason for a skip, first line only.
	Message string
	// Log is the spec's full output.
	Log string
}

// kubeletNodes is the cluster's size: the specs need at least two nodes
// ("on different nodes"); three is what users run.
const kubeletNodes = 3

// ClusterOptions are the harness options of a run: real kubelet nodes
// with the images the specs use and the cluster DNS that RunOn starts.
func ClusterOptions(b Binaries, dir string) (cluster.Options, error) {
	images, err := Images(b.Agnhost, b.Pause)
	if err != nil {
		return cluster.Options{}, err
	}
	return cluster.Options{
		Dir: dir, KubeletNodes: kubeletNodes, KubeletImages: images, ClusterDNS: cluster.HostIP,
		WaitForMachine: 30 * time.Minute,
	}, nil
}

// Run starts a cluster with ClusterOptions, runs the specs on it (RunOn)
// and stops it.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	copts, err := ClusterOptions(opts.Binaries, opts.Dir)
	if err != nil {
		return nil, err
	}
	c, err := cluster.Start(ctx, copts)
	if err != nil {
		if c != nil {
			_ = c.Stop(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	return RunOn(ctx, c, opts)
}

// RunOn starts the cluster DNS on c (started with ClusterOptions),
// installs pulselb from opts.Base, runs each spec of opts.Specs with the
// e2e binary and returns their results.
func RunOn(ctx context.Context, c *cluster.Cluster, opts Options) ([]Result, error) {
	if opts.SpecTimeout <= 0 {
		opts.SpecTimeout = 30 * time.Minute
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	dir := filepath.Join(c.Dir, "conformance")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	coredns, err := startClusterDNS(ctx, opts.CoreDNS, cluster.HostIP, c.Kubeconfig, dir)
	if err != nil {
		return nil, err
	}
	defer stopProcess(coredns)
	if err := install(ctx, c, opts.Base, dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "cluster %s: %d kubelet nodes, pulselb from %s; %d specs\n", c.Dir, kubeletNodes, opts.Base, len(opts.Specs))
	var results []Result
	for i, s := range opts.Specs {
		r := runSpec(ctx, opts, c.Kubeconfig, s, filepath.Join(dir, fmt.Sprintf("spec-%02d", i+1)))
		results = append(results, r)
		fmt.Fprintln(opts.Out, r.Line())
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	return results, nil
}

// Line is the result as one line: outcome, time, spec and, for a failure
// or skip, why.
func (r Result) Line() string {
	l := fmt.Sprintf("%-7s %6.0fs  %s", strings.ToUpper(string(r.Outcome)), r.Duration.Seconds(), r.Spec.shortName())
	if r.Message != "" {
		l += "\n        " + r.Message
	}
	return l
}

// install applies opts.Base with the harness' pulselb image and waits for
// the controllers and a prober on every node to be ready.
func install(ctx context.Context, c *cluster.Cluster, base, dir string) error {
	objs, err := deploy.Overlay(base, cluster.PulselbImage, dir)
	if err != nil {
		return err
	}
	a, err := deploy.NewApplier(c.RESTConfig)
	if err != nil {
		return err
	}
	if err := a.Install(ctx, objs); err != nil {
		return fmt.Errorf("installing %s: %w", base, err)
	}
	const ns = "pulselb-system"
	want := map[string]int{"app.kubernetes.io/name=pulselb-controller": 2, "app.kubernetes.io/name=pulselb-prober": kubeletNodes}
	deadline := time.Now().Add(3 * time.Minute)
	for sel, n := range want {
		for {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err == nil && readyCount(pods.Items) >= n {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pulselb not ready 3 minutes after the install: fewer than %d pods %s ready", n, sel)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func readyCount(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				n++
			}
		}
	}
	return n
}

// runSpec runs the e2e binary for s alone, with its output and junit
// report in dir.
func runSpec(ctx context.Context, opts Options, kubeconfig string, s Spec, dir string) Result {
	r := Result{Spec: s, Outcome: Failed, Log: filepath.Join(dir, "e2e.log")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Message = err.Error()
		return r
	}
	report := filepath.Join(dir, "junit.xml")
	sctx, cancel := context.WithTimeout(ctx, opts.SpecTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(sctx, opts.E2ETest,
		"--provider=skeleton",
		"--kubeconfig="+kubeconfig,
		"--kubectl-path="+opts.Kubectl,
		"--report-dir="+dir,
		"--e2e-output-dir="+dir,
		"--disable-log-dump",
		"--ginkgo.focus="+s.Focus(),
		"--ginkgo.junit-report="+report,
		"--ginkgo.timeout="+opts.SpecTimeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
	)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	log, err := os.Create(r.Log)
	if err != nil {
		r.Message = err.Error()
		return r
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	began := time.Now()
	runErr := cmd.Run()
	r.Duration = time.Since(began)
	cases, err := readJUnit(report)
	if err != nil {
		r.Message = fmt.Sprintf("no report (%v); e2e.test: %v; see %s", err, runErr, r.Log)
		return r
	}
	for _, tc := range cases {
		if !strings.Contains(tc.Name, s.Text) {
			continue
		}
		r.Outcome = Outcome(tc.Status)
		switch {
		case tc.Failure != nil:
			r.Message = firstLine(tc.Failure.Message)
		case tc.Skipped != nil:
			r.Message = firstLine(tc.Skipped.Message)
		}
		// A check that expects a target to be unreachable passes when its
		// command is missing: such a pass proves nothing.
		if missing := missingCommands(r.Log); len(missing) > 0 && r.Outcome == Passed {
			r.Outcome = Failed
			r.Message = "the spec's pods lack " + strings.Join(missing, ", ") + ": its checks are void"
		}
		return r
	}
	r.Message = fmt.Sprintf("the report does not name the spec (e2e.test: %v); see %s", runErr, r.Log)
	return r
}

// junitCase is the part of a Ginkgo junit testcase a result needs.
type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
	} `xml:"failure"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// readJUnit returns the test cases of a Ginkgo junit report.
func readJUnit(path string) ([]junitCase, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var out []junitCase
	for _, s := range doc.Suites {
		out = append(out, s.Cases...)
	}
	if len(out) == 0 {
		return nil, errors.New("no test cases in " + path)
	}
	return out, nil
}

// notFound is the shell's complaint about a command an exec'd pod lacks.
var notFound = regexp.MustCompile(`/bin/sh: (?:\d+: )?([^\s:]+): not found`)

// missingCommands returns the commands that the spec's log says its pods
// lacked.
func missingCommands(log string) []string {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range notFound.FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// Summary counts the outcomes.
func Summary(results []Result) string {
	n := map[Outcome]int{}
	for _, r := range results {
		n[r.Outcome]++
	}
	return fmt.Sprintf("%d specs: %d passed, %d failed, %d skipped", len(results), n[Passed], n[Failed], n[Skipped])
}
