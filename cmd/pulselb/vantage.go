package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/pulselb/pulselb/api/contract"
)

const vantageKubeconfigUsage = `Usage: pulselb vantage-kubeconfig --vantage-name=NAME --server=URL [--kubeconfig=ADMIN] [--output=FILE]

Writes the kubeconfig of the external vantage NAME from the token Secret
pulselb-vantage-NAME-token of its ServiceAccount pulselb-vantage-NAME in
--namespace (the chart's externalVantages creates both): the Secret's token
and CA certificate, and --server, the API server's address as the vantage
reaches it. Run it with credentials that may read that Secret (--kubeconfig,
else in-cluster); hand the output to 'pulselb prober --external
--vantage-name=NAME --kubeconfig=FILE'. The file holds a credential: it is
written with mode 0600, and is never printed unless --output is -.

Flags:
`

func runVantageKubeconfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vantage-kubeconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kube := addKubeFlags(fs, 5, 10)
	namespace := fs.String("namespace", "pulselb-system", "namespace of the vantage's ServiceAccount and token Secret")
	name := fs.String("vantage-name", "", "the external vantage's name; required")
	server := fs.String("server", "", "the API server's URL as the external vantage reaches it, such as https://203.0.113.10:6443; required")
	output := fs.String("output", "", "file to write (mode 0600); - for standard output; required")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the token Secret to be filled in")
	if _, code, ok := parseFlags(fs, vantageKubeconfigUsage, args, stderr); !ok {
		return code
	}
	if _, err := contract.ExternalReportName(*name); err != nil {
		fmt.Fprintf(stderr, "pulselb vantage-kubeconfig: --vantage-name: %v\n", err)
		return 2
	}
	if u, err := url.Parse(*server); err != nil || u.Scheme != "https" || u.Host == "" {
		fmt.Fprintf(stderr, "pulselb vantage-kubeconfig: --server=%q: want the API server's https URL, such as https://203.0.113.10:6443\n", *server)
		return 2
	}
	if *output == "" {
		fmt.Fprintln(stderr, "pulselb vantage-kubeconfig: --output is required: a file, or - for standard output")
		return 2
	}
	cfg, err := kube.config("pulselb-vantage-kubeconfig")
	if err != nil {
		fmt.Fprintf(stderr, "pulselb vantage-kubeconfig: loading credentials: %v\n", err)
		return 1
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "pulselb vantage-kubeconfig: creating client: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	data, err := vantageKubeconfig(ctx, client, *namespace, *name, *server)
	if err != nil {
		fmt.Fprintf(stderr, "pulselb vantage-kubeconfig: %v\n", err)
		return 1
	}
	if *output == "-" {
		_, _ = stdout.Write(data)
		return 0
	}
	if err := os.WriteFile(*output, data, 0o600); err != nil {
		fmt.Fprintf(stderr, "pulselb vantage-kubeconfig: writing %s: %v\n", *output, err)
		return 1
	}
	fmt.Fprintf(stdout, "Wrote the kubeconfig of external vantage %s to %s\n", *name, *output)
	return 0
}

// vantageKubeconfig returns the kubeconfig of external vantage name: the
// token and CA of its ServiceAccount's token Secret in namespace, and
// server. It waits, until ctx is done, for the token controller to fill in
// a Secret just created.
func vantageKubeconfig(ctx context.Context, client kubernetes.Interface, namespace, name, server string) ([]byte, error) {
	account := contract.ExternalVantageAccountPrefix + name
	secretName := account + "-token"
	var sec *corev1.Secret
	for {
		s, err := client.CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading the token Secret %s/%s (set externalVantages in the chart, or create it as docs/external-vantages.md shows): %w", namespace, secretName, err)
		case s.Type != corev1.SecretTypeServiceAccountToken || s.Annotations[corev1.ServiceAccountNameKey] != account:
			return nil, fmt.Errorf("secret %s/%s is not a token of the ServiceAccount %s (type %s)", namespace, secretName, account, s.Type)
		}
		if len(s.Data[corev1.ServiceAccountTokenKey]) > 0 {
			sec = s
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("secret %s/%s has no token yet: is the ServiceAccount %s there?", namespace, secretName, account)
		case <-time.After(500 * time.Millisecond):
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["pulselb"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: sec.Data[corev1.ServiceAccountRootCAKey]}
	cfg.AuthInfos[account] = &clientcmdapi.AuthInfo{Token: string(sec.Data[corev1.ServiceAccountTokenKey])}
	cfg.Contexts["pulselb-vantage"] = &clientcmdapi.Context{Cluster: "pulselb", AuthInfo: account, Namespace: namespace}
	cfg.CurrentContext = "pulselb-vantage"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, errors.New("encoding the kubeconfig: " + err.Error())
	}
	return data, nil
}
